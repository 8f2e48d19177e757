package browser

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// sel quotes a value for a CSS attribute selector.
func sel(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// The console in a real browser against a plaintext cluster of four
// processes (two replicasets of two): it lists every instance, finds a
// tuple written from the CLI, shows a refusal in the server's words,
// drains a replicaset set to weight 0 (and the grid shows it), expels an
// instance, marks a killed one Offline, and marks itself stale when the
// instance serving it loses the cluster.
func TestConsoleInABrowser(t *testing.T) {
	chromium(t) // before the cluster: without a browser, fail at once
	c := startCluster(t, 4, "--init-replication-factor", "2", "--init-bucket-count", "300", "--auto-offline-timeout", "3s")
	st := c.online(90 * time.Second)
	if _, err := c.cli("space", "create", "kv", "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "a tuple written from the CLI", func() error {
		_, err := c.cli("replace", "kv", `[42, "from the CLI"]`)
		return err
	})
	// The replicaset of i1 (which serves the console) stays; the other
	// is drained, and one of its members expelled.
	rsOf := map[string]string{}
	members := map[string][]string{}
	for _, in := range st.Instances {
		rsOf[in.InstanceID] = in.ReplicasetID
		members[in.ReplicasetID] = append(members[in.ReplicasetID], in.InstanceID)
	}
	keep := rsOf["i1"]
	var drain string
	for rs := range members {
		if rs != keep {
			drain = rs
		}
	}
	if drain == "" || len(members[drain]) != 2 || len(members[keep]) != 2 {
		t.Fatalf("replicasets %v: want two of two", members)
	}
	expel := slices.Max(members[drain])
	ctx := browser(t, 1280, 800, false)
	base := "http://" + c.insts[0].http

	t.Log("every instance is listed, Online, and the header says the cluster is insecure")
	run(ctx, t, 30*time.Second, "the cluster page",
		chromedp.Navigate(base+"/#/cluster"),
		waitJS(`document.querySelectorAll('#instances tr[data-grade="Online"]').length === 4`),
		waitJS(`document.querySelector('#security').textContent === 'insecure cluster'`))
	run(ctx, t, 30*time.Second, "every instance's health",
		waitJS(`document.querySelectorAll('#instances td.health.ok').length === 4`))
	for _, in := range []string{"i1", "i2", "i3", "i4"} {
		if got := text(ctx, t, sel(`#instances tr[data-instance=%q] .current`, in)); !strings.HasPrefix(got, "Online") {
			t.Errorf("%s is shown %q", in, got)
		}
		if got := text(ctx, t, sel(`#instances tr[data-instance=%q] .health`, in)); got != "ready" {
			t.Errorf("%s's health is shown %q", in, got)
		}
	}
	shot(ctx, t, "console-cluster")
	// Nothing is wider than the window (wide tables scroll in their own
	// box), at 1280×800 and at a phone's width.
	const fits = `document.documentElement.scrollWidth <= window.innerWidth`
	run(ctx, t, 10*time.Second, "the page fits 1280 px", waitJS(fits))
	run(ctx, t, 20*time.Second, "the page fits a phone",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(base+"/#/buckets"),
		waitJS(`document.querySelectorAll('#grid div[data-rs]').length === 300`),
		waitJS(fits))
	shot(ctx, t, "console-phone")
	run(ctx, t, 10*time.Second, "the viewport back to 1280×800", chromedp.EmulateViewport(1280, 800))

	t.Log("a key lookup finds the tuple written from the CLI")
	run(ctx, t, 30*time.Second, "the key lookup",
		chromedp.Navigate(base+"/#/spaces"),
		waitJS(`!!document.querySelector('#lookup-space option[value="kv"]')`),
		waitJS(`document.querySelector('#spaces tr[data-space="kv"] .count').textContent === '1'`),
		chromedp.SetValue(chromedp.CSS("#lookup-key"), "[42]"),
		chromedp.Click(chromedp.CSS(`#lookup button[type="submit"]`)),
		waitJS(`!!document.querySelector('#lookup-out .tuple')`))
	if got := text(ctx, t, "#lookup-out .tuple"); got != `[42,"from the CLI"]` {
		t.Errorf("the lookup shows %q", got)
	}
	run(ctx, t, 30*time.Second, "a page of the space",
		chromedp.Click(chromedp.CSS(`#browse button[type="submit"]`)),
		waitJS(`[...document.querySelectorAll('#browse-out tbody code')].some((c) => c.textContent === '[42,"from the CLI"]')`))
	shot(ctx, t, "console-spaces")

	t.Log("a refused operation shows the server's message")
	run(ctx, t, 30*time.Second, "a refused reshard step",
		chromedp.Navigate(base+"/#/buckets"),
		waitJS(`document.querySelectorAll('#grid div[data-rs]').length === 300`),
		chromedp.Click(chromedp.CSS(`#reshard button[data-step="copy"]`)),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitJS(`document.querySelector('#confirm-result').className === 'error'`))
	if got := text(ctx, t, "#confirm-result"); !strings.Contains(got, "Refused: no reshard is under way") {
		t.Errorf("the refusal shows %q", got)
	}
	shot(ctx, t, "console-refused")
	run(ctx, t, 10*time.Second, "closing the dialog", chromedp.Click(chromedp.CSS("#confirm-cancel")))

	t.Logf("weight 0 drains %s, and the grid shows it", drain)
	run(ctx, t, 30*time.Second, "setting the weight",
		chromedp.Navigate(base+"/#/cluster"),
		chromedp.Click(chromedp.CSS(sel(`#replicasets tr[data-replicaset=%q] button[data-op="weight"]`, drain))),
		chromedp.SetValue(chromedp.CSS(`#confirm-fields input[name="weight"]`), "0"),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitJS(`document.querySelector('#confirm-result').className !== ''`))
	if got := text(ctx, t, "#confirm-result"); !strings.HasPrefix(got, "Done.") {
		t.Fatalf("setting the weight: %q", got)
	}
	run(ctx, t, 10*time.Second, "closing the dialog", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	run(ctx, t, 90*time.Second, "the drain on the grid",
		chromedp.Navigate(base+"/#/buckets"),
		waitJS(sel(`document.querySelectorAll('#grid div[data-rs=%q]').length === 300`, keep)))
	shot(ctx, t, "console-drained")
	if got := text(ctx, t, sel(`#legend span[data-replicaset=%q]`, drain)); !strings.HasPrefix(got, drain+": 0 / 0 buckets, weight 0") {
		t.Errorf("the legend says %q", got)
	}

	t.Logf("expel %s through the console (running: with force)", expel)
	run(ctx, t, 60*time.Second, "the expel",
		chromedp.Navigate(base+"/#/cluster"),
		chromedp.Click(chromedp.CSS(sel(`#instances tr[data-instance=%q] button[data-op="expel"]`, expel))),
		chromedp.Click(chromedp.CSS(`#confirm-fields input[name="force"]`)),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitJS(`document.querySelector('#confirm-result').className !== ''`))
	if got := text(ctx, t, "#confirm-result"); !strings.HasPrefix(got, "Done.") {
		t.Fatalf("the expel: %q", got)
	}
	run(ctx, t, 30*time.Second, "the expelled instance leaves the list",
		chromedp.Click(chromedp.CSS("#confirm-cancel")),
		waitJS(sel(`!document.querySelector('#instances tr[data-instance=%q]')`, expel)))
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range after.Instances {
		if in.InstanceID == expel {
			t.Errorf("the CLI still lists %s: %+v", expel, in)
		}
	}

	killed := slices.DeleteFunc(slices.Clone(members[keep]), func(s string) bool { return s == "i1" })[0]
	t.Logf("a killed instance (%s) is marked Offline", killed)
	c.inst(killed).Kill()
	run(ctx, t, 30*time.Second, "the killed instance Offline",
		waitJS(sel(`!!document.querySelector('#instances tr[data-instance=%q][data-grade="Offline"]')`, killed)),
		waitJS(sel(`document.querySelector('#instances tr[data-instance=%q] .health').textContent.startsWith('not ready: does not answer')`, killed)))
	shot(ctx, t, "console-offline")

	// The drained replicaset's other member serves the console; when i1
	// goes too, it is left without a quorum of group 0's voters.
	other := c.inst(slices.DeleteFunc(slices.Clone(members[drain]), func(s string) bool { return s == expel })[0])
	t.Logf("the console of %s marks itself stale when %s loses the cluster", other.Name, other.Name)
	run(ctx, t, 30*time.Second, "the console of "+other.Name,
		chromedp.Navigate("http://"+other.http+"/#/cluster"),
		waitJS(`document.querySelectorAll('#instances tr').length > 0`),
		waitJS(`document.querySelector('#stale').hidden`))
	c.inst("i1").Kill()
	run(ctx, t, 30*time.Second, "the stale mark",
		waitJS(`!document.querySelector('#stale').hidden`))
	t.Logf("stale: %s", text(ctx, t, "#stale"))
	shot(ctx, t, "console-stale")
}
