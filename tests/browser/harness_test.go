package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shardkit/shardkit/tests/framework"
)

// binary is the shardkit binary the tests run, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "shardkit-browser-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binary, err = framework.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// installHint is how to get the browser the tests need.
const installHint = "these tests need Chromium: install it with `bash scripts/services.sh install-chromium` " +
	"(Debian's chromium package), or name its binary in SHARDKIT_CHROMIUM"

// chromium finds the browser: SHARDKIT_CHROMIUM, else chromium,
// chromium-browser or google-chrome on PATH. Without it the test fails
// (CI installs it): a browser test that skips would pass having tested
// nothing.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SHARDKIT_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SHARDKIT_CHROMIUM=%s: %v; %s", p, err, installHint)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found on PATH: " + installHint)
	return ""
}

// browser starts a headless Chromium for the test, with a window of w×h,
// and returns a tab's context; the browser ends with the test. trustAny
// makes it accept any server certificate: a secure test cluster's CA is
// made for the test and is in no trust store the browser reads.
func browser(t *testing.T, w, h int, trustAny bool) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(w, h),
		chromedp.NoSandbox, // root in CI containers
		chromedp.Flag("ignore-certificate-errors", trustAny),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v; %s", err, installHint)
	}
	return ctx
}

// run runs browser actions, bounded by d, and fails the test with what
// was being done.
func run(ctx context.Context, t *testing.T, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		shot(ctx, t, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("%s: %v", what, err)
	}
}

// text is an element's text content (the first that matches sel), once
// one matches. It is found and read in one script run: the console
// redraws its views as it polls the cluster, and a node found by one
// DevTools call may be gone by the next ("No node with given id found").
func text(ctx context.Context, t *testing.T, sel string) string {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	expr := fmt.Sprintf(`(e => e ? {text: e.textContent} : null)(document.querySelector(%s))`, strconv.Quote(sel))
	got, err := chromedp.Run(tctx, chromedp.Poll[struct {
		Text string `json:"text"`
	}](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		t.Fatalf("the text of %s: %v", sel, err)
	}
	return got.Text
}

// waitJS waits until the JavaScript expression is true, also across a
// navigation (a form's submit) that ends the page it started on.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))(ctx, tg)
			if err == nil || ctx.Err() != nil || !navigated(err) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// navigated reports whether err is the page's going away under a script.
func navigated(err error) bool {
	for _, s := range []string{"navigated or closed", "Not attached to an active page", "Cannot find context", "Execution context was destroyed"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// shot saves a screenshot of the page to SHARDKIT_TEST_SCREENSHOTS (a
// directory; none saved when unset) as name.png.
func shot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("SHARDKIT_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	buf, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}

// instance is one `shardkit run` process tree with its HTTP address.
type instance struct {
	*framework.Instance
	http string
}

// cluster is a local cluster of real processes.
type cluster struct {
	t     *testing.T
	insts []*instance
	peer  string
	extra []string // arguments of every client command (--certs-dir ...)
}

// startCluster starts n instances, the first the bootstrapping one, with
// args added to each one's `shardkit run`.
func startCluster(t *testing.T, n int, args ...string) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for i := range n {
		ports := framework.FreePorts(t, 2)
		if i == 0 {
			c.peer = ports[0]
		}
		dir := t.TempDir()
		inst := &instance{http: ports[1], Instance: &framework.Instance{
			Name:   fmt.Sprintf("i%d", i+1),
			Listen: ports[0],
			Log:    filepath.Join(dir, "log"),
			Binary: binary,
			Args: append([]string{"--instance-id", fmt.Sprintf("i%d", i+1), "--listen", ports[0], "--http-listen", ports[1],
				"--peer", c.peer, "--data-dir", filepath.Join(dir, "data")}, args...),
		}}
		if err := inst.Start(); err != nil {
			t.Fatal(err)
		}
		c.insts = append(c.insts, inst)
	}
	t.Cleanup(func() {
		for _, inst := range c.insts {
			if t.Failed() {
				t.Logf("---- %s's log:\n%s", inst.Name, inst.LogTail(30))
			}
			inst.Kill()
		}
	})
	return c
}

// inst is the instance named name.
func (c *cluster) inst(name string) *instance {
	for _, inst := range c.insts {
		if inst.Name == name {
			return inst
		}
	}
	c.t.Fatalf("no instance %s", name)
	return nil
}

// cli runs a client command of the binary against the cluster.
func (c *cluster) cli(args ...string) (string, error) { return c.cliIn("", args...) }

// run runs the binary with args as they are (no --peer).
func (c *cluster) run(args ...string) (string, error) {
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// cliIn runs a client command with stdin.
func (c *cluster) cliIn(stdin string, args ...string) (string, error) {
	args = append(append(args, "--peer", c.peer), c.extra...)
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("shardkit %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// poll runs f until it succeeds or d passes.
func poll(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterStatus is what the tests read of `shardkit status --format json`.
type clusterStatus struct {
	Instances []struct {
		InstanceID   string `json:"instance_id"`
		ReplicasetID string `json:"replicaset_id"`
		CurrentGrade struct {
			Variant string `json:"variant"`
		} `json:"current_grade"`
	} `json:"instances"`
	Replicasets []struct {
		ReplicasetID string `json:"replicaset_id"`
		BucketCount  uint32 `json:"bucket_count"`
	} `json:"replicasets"`
}

func (c *cluster) status() (clusterStatus, error) {
	var st clusterStatus
	out, err := c.cli("status", "--format", "json")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(out), &st)
}

// online waits until every instance is Online, as the CLI sees it.
func (c *cluster) online(d time.Duration) clusterStatus {
	c.t.Helper()
	var st clusterStatus
	poll(c.t, d, "every instance Online", func() error {
		var err error
		if st, err = c.status(); err != nil {
			return err
		}
		n := 0
		for _, in := range st.Instances {
			if in.CurrentGrade.Variant == "Online" {
				n++
			}
		}
		if n < len(c.insts) {
			return fmt.Errorf("%d of %d instances Online: %+v", n, len(c.insts), st.Instances)
		}
		return nil
	})
	return st
}
