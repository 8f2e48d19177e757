package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

// browserish is an HTTPS client that trusts the cluster's CA and has no
// client certificate (as a browser): it keeps the cookies it is given and
// follows no redirect.
type browserish struct {
	t       *testing.T
	base    string
	hc      *http.Client
	cookies map[string]string
	csrf    string
}

func newBrowserish(t *testing.T, dir, base string) *browserish {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &browserish{t: t, base: base, cookies: map[string]string{}, hc: &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}}
}

// answer is a response, read.
type answer struct {
	StatusCode int
	Header     http.Header
	cookies    []*http.Cookie
}

func (a answer) Cookies() []*http.Cookie { return a.cookies }

// do sends a request and returns the answer and its body.
func (b *browserish) do(method, path, contentType, body string, header ...string) (answer, string) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.t.Context(), method, b.base+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	for k, v := range b.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.MaxAge < 0 {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c.Value
		}
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header, cookies: resp.Cookies()}, string(out)
}

var tokenField = regexp.MustCompile(`name="token" value="([A-Za-z0-9_-]+)"`)

// login gets the login form and sends it; it returns the answer.
func (b *browserish) login(user, password string) (answer, string) {
	b.t.Helper()
	resp, page := b.do("GET", "/login", "", "")
	m := tokenField.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil {
		b.t.Fatalf("the login form: %d %s", resp.StatusCode, page)
	}
	form := url.Values{"user": {user}, "password": {password}, "token": {m[1]}}.Encode()
	return b.do("POST", "/login", "application/x-www-form-urlencoded", form)
}

// A secure instance's console needs a login: a password checked against
// group 0's hash; each refusal says what was wrong (a wrong password
// does not say which part); failed logins are rate-limited and logged
// without the password; the session cookie is HttpOnly, Secure,
// SameSite=Strict and expiring; a POST needs the session's CSRF token;
// a reader reads but its operations are refused by the gRPC method table;
// a changed password and a logout end sessions.
func TestConsoleLogin(t *testing.T) {
	dir := t.TempDir()
	mustCreate(t, certs.CreateCA(dir, certs.Options{}))
	mustCreate(t, certs.CreateNode(dir, []string{"127.0.0.1"}, certs.Options{}))
	mustCreate(t, certs.CreateClient(dir, "root", certs.Options{}))
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, addr := servertest.Listen(t)
	hl, haddr := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: l, HTTPListener: hl, CertsDir: dir,
		AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second, Logger: log})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	root := userClient(t, dir, "root", []string{addr})
	const ritaPw, adaPw, wandaPw = "rita's secret 1", "ada's secret 22", "wanda's secret 333"
	pollOK(t, "the users", func() error {
		for _, u := range []struct{ name, role, pw string }{{"rita", "reader", ritaPw}, {"ada", "admin", adaPw}, {"wanda", "reader", wandaPw}, {"nopw", "writer", ""}} {
			if err := root.CreateUserWithPassword(ctx, u.name, u.role, u.pw); err != nil && !strings.Contains(err.Error(), "already exists") {
				return err
			}
		}
		return nil
	})
	if err := root.CreateUserWithPassword(ctx, "shorty", "reader", "short"); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("a short password: %v", err)
	}
	users, err := root.Users(ctx)
	mustCreate(t, err)
	for _, u := range users {
		if want := u.GetName() == "rita" || u.GetName() == "ada" || u.GetName() == "wanda"; u.GetHasPassword() != want {
			t.Errorf("user %s has_password %v", u.GetName(), u.GetHasPassword())
		}
	}

	b := newBrowserish(t, dir, "https://"+haddr)
	if resp, body := b.do("GET", "/api/v1/cluster", "", ""); resp.StatusCode != 401 || !strings.Contains(body, "log in to the web console at /login") {
		t.Errorf("not logged in: %d %s", resp.StatusCode, body)
	}
	if resp, _ := b.do("GET", "/", "", ""); resp.StatusCode != 303 || resp.Header.Get("Location") != "/login" {
		t.Errorf("GET / not logged in: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := b.do("GET", "/console/app.js", "", ""); resp.StatusCode != 200 {
		t.Errorf("the console's script (no secret) needs no login: %d", resp.StatusCode)
	}

	for _, tc := range []struct{ user, pw, says string }{
		{"rita", "rita's bad guess", "Wrong user name or password."},
		{"nobody", ritaPw, "Wrong user name or password."},
		{"nopw", "whatever it is", "Wrong user name or password."},
		{"root", "root's guess", "Wrong user name or password."},
		{"a b", "x", "not a valid user name"},
	} {
		if resp, page := b.login(tc.user, tc.pw); resp.StatusCode/100 != 4 || !strings.Contains(page, tc.says) || b.cookies["shardkit_session"] != "" {
			t.Errorf("login %s/%s: %d %s", tc.user, tc.pw, resp.StatusCode, page)
		}
	}
	// Without the form's token (its cookie), or with another one.
	form := url.Values{"user": {"rita"}, "password": {ritaPw}, "token": {strings.Repeat("A", 43)}}.Encode()
	if resp, page := b.do("POST", "/login", "application/x-www-form-urlencoded", form); resp.StatusCode != 403 || !strings.Contains(page, "expired or came from elsewhere") {
		t.Errorf("a login without the form's token: %d %s", resp.StatusCode, page)
	}
	// Five failures of one user; the sixth attempt is not even checked.
	for range 5 {
		b.login("wanda", "not wanda's")
	}
	if resp, page := b.login("wanda", wandaPw); resp.StatusCode != 429 || !strings.Contains(page, "too many failed logins for this user") {
		t.Errorf("wanda's sixth login: %d %s", resp.StatusCode, page)
	}
	logText := logs.String()
	for _, want := range []string{`msg="console login refused" user=rita remote=127.0.0.1 reason="wrong password"`, `user=nobody remote=127.0.0.1 reason="no such user"`,
		`user=nopw remote=127.0.0.1 reason="the user has no password"`, "too many failed logins for this user"} {
		if !strings.Contains(logText, want) {
			t.Errorf("the log does not say %q", want)
		}
	}

	resp, _ := b.login("rita", ritaPw)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/" {
		t.Fatalf("rita's login: %d", resp.StatusCode)
	}
	var sc *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "shardkit_session" {
			sc = c
		}
	}
	if sc == nil || !sc.HttpOnly || !sc.Secure || sc.SameSite != http.SameSiteStrictMode || sc.MaxAge != 8*3600 || sc.Path != "/" {
		t.Fatalf("the session cookie: %+v", sc)
	}
	if !strings.Contains(logs.String(), `msg="console login" user=rita`) {
		t.Error("the login is not logged")
	}
	for _, pw := range []string{ritaPw, adaPw, wandaPw, "not wanda's", "rita's bad guess", "root's guess"} {
		if strings.Contains(logs.String(), pw) {
			t.Errorf("the log holds a password %q", pw)
		}
	}
	_, sess := b.do("GET", "/api/v1/session", "", "")
	m := regexp.MustCompile(`"csrf":"([A-Za-z0-9_-]{43})"`).FindStringSubmatch(sess)
	if m == nil || !strings.Contains(sess, `"user":"rita"`) || !strings.Contains(sess, `"role":"reader"`) {
		t.Fatalf("rita's session: %s", sess)
	}
	b.csrf = m[1]
	if resp, body := b.do("GET", "/api/v1/spaces", "", ""); resp.StatusCode != 200 {
		t.Errorf("a reader reads: %d %s", resp.StatusCode, body)
	}
	const weight = "/api/v1/replicasets/r1/weight"
	if resp, body := b.do("POST", weight, "application/json", `{"weight": 2}`); resp.StatusCode != 403 || !strings.Contains(body, "no valid CSRF token") {
		t.Errorf("a POST without the CSRF token: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.do("POST", weight, "application/json", `{"weight": 2}`, "X-CSRF-Token", strings.Repeat("x", 43)); resp.StatusCode != 403 || !strings.Contains(body, "no valid CSRF token") {
		t.Errorf("a POST with another CSRF token: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.do("POST", weight, "application/json", `{"weight": 2}`, "X-CSRF-Token", b.csrf); resp.StatusCode != 403 ||
		!strings.Contains(body, `user \"rita\" (role reader) may not call /shardkit.data.v1.ShardingService/SetWeight: it needs role admin`) {
		t.Errorf("a reader's operation: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.do("GET", "/metrics", "", ""); resp.StatusCode != 200 || !strings.Contains(body, "shardkit_rpc_server_seconds") {
		t.Errorf("a reader's /metrics: %d %.100s", resp.StatusCode, body)
	}

	a := newBrowserish(t, dir, "https://"+haddr)
	if resp, _ := a.login("ada", adaPw); resp.StatusCode != 303 {
		t.Fatalf("ada's login: %d", resp.StatusCode)
	}
	_, sess = a.do("GET", "/api/v1/session", "", "")
	a.csrf = regexp.MustCompile(`"csrf":"([A-Za-z0-9_-]{43})"`).FindStringSubmatch(sess)[1]
	if resp, body := a.do("POST", weight, "application/json", `{"weight": 2}`, "X-CSRF-Token", a.csrf); resp.StatusCode != 200 {
		t.Errorf("an admin's operation: %d %s", resp.StatusCode, body)
	}

	// A new password ends rita's session; a logout ends ada's.
	mustCreate(t, root.SetUserPassword(ctx, "rita", "rita's new secret"))
	pollOK(t, "rita's session ended", func() error {
		if resp, body := b.do("GET", "/api/v1/session", "", ""); resp.StatusCode != 401 {
			return &statusErr{resp.StatusCode, body}
		}
		return nil
	})
	if resp, body := a.do("POST", "/logout", "", "", "X-CSRF-Token", a.csrf); resp.StatusCode != 204 {
		t.Errorf("logout: %d %s", resp.StatusCode, body)
	}
	if resp, _ := a.do("GET", "/api/v1/session", "", ""); resp.StatusCode != 401 {
		t.Errorf("after the logout: %d", resp.StatusCode)
	}
	a.cookies["shardkit_session"] = "not-a-session"
	if resp, _ := a.do("GET", "/api/v1/session", "", ""); resp.StatusCode != 401 {
		t.Errorf("a made-up session: %d", resp.StatusCode)
	}
}

type statusErr struct {
	code int
	body string
}

func (e *statusErr) Error() string { return http.StatusText(e.code) + ": " + e.body }
