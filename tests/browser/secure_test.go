package browser

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// On a secure cluster the console needs a login: a wrong password is
// refused; a reader logged in sees the cluster (and the grid of the
// default 3000 buckets), and every operation it tries is refused with the
// server's message.
func TestSecureConsoleInABrowser(t *testing.T) {
	chromium(t) // before the cluster: without a browser, fail at once
	dir := filepath.Join(t.TempDir(), "certs")
	c := &cluster{t: t}
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", dir},
		{"cert", "create-node", "--certs-dir", dir, "127.0.0.1", "localhost"},
		{"cert", "create-client", "--certs-dir", dir, "root"},
	} {
		if out, err := c.run(args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	c = startCluster(t, 1, "--certs-dir", dir) // the default 3000 buckets
	c.extra = []string{"--certs-dir", dir}
	c.online(60 * time.Second)
	if _, err := c.cliIn("rita's secret 1\n", "user", "create", "rita", "--role", "reader", "--password-stdin"); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, 1280, 800, true)
	base := "https://" + c.insts[0].http

	t.Log("the console sends to the login; a wrong password is refused")
	run(ctx, t, 30*time.Second, "a wrong password",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-submit")),
		chromedp.SetValue(chromedp.CSS("#user"), "rita"),
		chromedp.SetValue(chromedp.CSS("#password"), "not rita's"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	if got := text(ctx, t, "#login-error"); got != "Wrong user name or password." {
		t.Errorf("the refusal says %q", got)
	}
	shot(ctx, t, "console-login-refused")

	t.Log("rita (reader) logs in and sees the cluster")
	run(ctx, t, 30*time.Second, "rita's login",
		chromedp.SetValue(chromedp.CSS("#password"), "rita's secret 1"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		waitJS(`document.querySelectorAll('#instances tr[data-grade="Online"]').length === 1`),
		waitJS(`document.querySelector('#who').textContent === 'rita (reader)'`))
	if got := text(ctx, t, "#security"); got != "secure (mutual TLS)" {
		t.Errorf("the header says %q", got)
	}

	t.Log("every operation rita tries is refused with the server's message")
	for _, op := range []struct {
		what, button, method string
	}{
		{"the weight", `#replicasets tr button[data-op="weight"]`, "ShardingService/SetWeight"},
		{"the lock", `#replicasets tr button[data-op="lock"]`, "ShardingService/SetLocked"},
		{"the expel", `#instances tr button[data-op="expel"]`, "ClusterService/Expel"},
	} {
		run(ctx, t, 30*time.Second, op.what,
			chromedp.Click(chromedp.CSS(op.button)),
			chromedp.Click(chromedp.CSS("#confirm-ok")),
			waitJS(`document.querySelector('#confirm-result').className === 'error'`))
		want := `Refused: user "rita" (role reader) may not call /shardkit.`
		if got := text(ctx, t, "#confirm-result"); !strings.HasPrefix(got, want) || !strings.Contains(got, op.method+": it needs role admin") {
			t.Errorf("%s: %q", op.what, got)
		}
		if op.what == "the weight" {
			shot(ctx, t, "console-reader-refused")
		}
		run(ctx, t, 10*time.Second, "closing the dialog", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	}
	run(ctx, t, 30*time.Second, "the bucket grid",
		chromedp.Navigate(base+"/#/buckets"),
		waitJS(`document.querySelectorAll('#grid div[data-rs="r1"]').length === 3000`))
	shot(ctx, t, "console-buckets-3000")
	run(ctx, t, 30*time.Second, "the reshard plan",
		chromedp.Click(chromedp.CSS(`#reshard button[data-step="plan"]`)),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitJS(`document.querySelector('#confirm-result').className === 'error'`))
	if got := text(ctx, t, "#confirm-result"); !strings.Contains(got, "ShardingService/Reshard: it needs role admin") {
		t.Errorf("the reshard plan: %q", got)
	}
}
