package server

import (
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/meta"
)

// The web console's login on a secure instance (docs/console.md): a form
// at /login that checks a user's password against the hash in group 0
// (this instance's copy), failed logins rate-limited and logged, a session
// cookie, and /logout.

// loginCookie holds the login form's CSRF token (double submit: the form
// carries it too), so that another site cannot log a browser in.
const loginCookie = "shardkit_login"

// dummyHash is verified against when the user is unknown or has no
// password, so that such a refusal takes as long as a wrong password.
var dummyHash = func() string {
	h, err := auth.HashPassword("not the password of anyone")
	if err != nil {
		panic(err)
	}
	return h
}()

var loginPage = template.Must(template.ParseFS(consoleFiles, "console/login.html"))

// consoleLogin serves /login and /logout.
type consoleLogin struct {
	node     *cluster.Node
	sessions *auth.Sessions
	limiter  *auth.LoginLimiter
	log      *slog.Logger
}

func (l *consoleLogin) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /login", l.form)
	mux.HandleFunc("POST /login", l.login)
	mux.HandleFunc("POST /logout", l.logout)
}

// loginForm is what the login form sends (parseLoginForm).
type loginForm struct {
	User     string
	Password string
	Token    string
}

// maxLoginBody bounds the login form's body.
const maxLoginBody = 2048

// parseLoginForm reads the login form (application/x-www-form-urlencoded,
// at most maxLoginBody bytes, each field once). The error says what was
// wrong, without the password.
func parseLoginForm(contentType string, body io.Reader) (loginForm, error) {
	var f loginForm
	if mt, _, _ := strings.Cut(contentType, ";"); strings.TrimSpace(mt) != "application/x-www-form-urlencoded" {
		return f, errors.New("the login is a form (application/x-www-form-urlencoded)")
	}
	b, err := io.ReadAll(io.LimitReader(body, maxLoginBody+1))
	if err != nil {
		return f, errors.New("the login form could not be read")
	}
	if len(b) > maxLoginBody {
		return f, errors.New("the login form is too long")
	}
	vals, err := url.ParseQuery(string(b))
	if err != nil {
		return f, errors.New("the login form is malformed")
	}
	for name, vs := range vals {
		if len(vs) != 1 {
			return f, errors.New("the login form repeats a field")
		}
		switch name {
		case "user":
			f.User = vs[0]
		case "password":
			f.Password = vs[0]
		case "token":
			f.Token = vs[0]
		default:
			return f, errors.New("the login form has an unknown field")
		}
	}
	switch {
	case f.User == "" || f.Password == "":
		return f, errors.New("give a user name and a password")
	case !meta.ValidUserName(f.User) && f.User != meta.RootUser:
		return f, errors.New("that is not a valid user name")
	case len(f.Password) > auth.MaxPasswordLen:
		return f, errors.New("the password is too long")
	}
	return f, nil
}

// cookie makes one of the console's cookies: HttpOnly, Secure,
// SameSite=Strict, for the whole site.
func cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}

func (l *consoleLogin) clusterID() string {
	return l.node.Meta().State().Props.GetClusterId()
}

// form shows the login form with a new CSRF token.
func (l *consoleLogin) form(w http.ResponseWriter, _ *http.Request) {
	l.render(w, http.StatusOK, "", "")
}

func (l *consoleLogin) render(w http.ResponseWriter, code int, user, msg string) {
	tok := auth.NewToken()
	http.SetCookie(w, cookie(loginCookie, tok, 600))
	consoleHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginPage.Execute(w, map[string]string{"Cluster": l.clusterID(), "Token": tok, "User": user, "Error": msg})
}

// remoteHost is the client's address without its port (the rate limit's
// key: a client has many ports).
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

func (l *consoleLogin) login(w http.ResponseWriter, r *http.Request) {
	addr := remoteHost(r)
	f, err := parseLoginForm(r.Header.Get("Content-Type"), r.Body)
	if err != nil {
		l.log.Warn("console login refused", "remote", addr, "reason", err.Error())
		l.render(w, http.StatusBadRequest, "", err.Error())
		return
	}
	c, cerr := r.Cookie(loginCookie)
	if cerr != nil || !auth.SameToken(c.Value, f.Token) {
		l.log.Warn("console login refused", "user", f.User, "remote", addr, "reason", "no valid login form token")
		l.render(w, http.StatusForbidden, f.User, "The login form expired or came from elsewhere: log in again.")
		return
	}
	if why := l.limiter.Refusal(f.User, addr); why != "" {
		l.log.Warn("console login refused", "user", f.User, "remote", addr, "reason", why)
		l.render(w, http.StatusTooManyRequests, f.User, "Not checked: "+why+".")
		return
	}
	u := l.node.Meta().State().Users[f.User]
	hash, reason := u.GetPasswordHash(), "wrong password"
	switch {
	case u == nil:
		hash, reason = dummyHash, "no such user"
	case hash == "":
		hash, reason = dummyHash, "the user has no password"
	}
	if !auth.VerifyPassword(hash, f.Password) || hash == dummyHash {
		l.limiter.Failed(f.User, addr)
		l.log.Warn("console login refused", "user", f.User, "remote", addr, "reason", reason)
		l.render(w, http.StatusUnauthorized, f.User, "Wrong user name or password.")
		return
	}
	id, _ := l.sessions.Create(f.User, hash)
	l.log.Info("console login", "user", f.User, "remote", addr)
	http.SetCookie(w, cookie(loginCookie, "", -1))
	http.SetCookie(w, cookie(auth.SessionCookie, id, int(auth.SessionTTL.Seconds())))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the session (the guard checked its CSRF token).
func (l *consoleLogin) logout(w http.ResponseWriter, r *http.Request) {
	if id := auth.SessionID(r); id != "" {
		l.sessions.Delete(id)
	}
	http.SetCookie(w, cookie(auth.SessionCookie, "", -1))
	w.WriteHeader(http.StatusNoContent)
}
