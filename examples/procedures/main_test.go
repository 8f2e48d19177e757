package main

// The example as a user runs it: the binary is built, started as a
// one-instance cluster (`shardkit-procs run`, the supervisor and its
// worker), and its procedures are called through the Go client and
// through the binary's own command line.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tests/framework"
	"github.com/shardkit/shardkit/tuple"
)

// buildBinary builds this example into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "shardkit-procs")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startCluster runs `bin run` as a one-instance cluster on addr until the
// test ends (SIGTERM, then SIGKILL to its process group if it lingers).
func startCluster(t *testing.T, bin, addr string) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	logPath := filepath.Join(t.TempDir(), "instance.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--listen", addr, "--data-dir", dataDir, "--shutdown-timeout", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the instance did not stop cleanly on SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err := <-done
			t.Errorf("the instance did not stop within 30s of SIGTERM (killed: %v)", err)
		}
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("instance log:\n%s", log)
			}
		}
	})
}

// waitWritable creates the products space once the cluster stores tuples.
func waitWritable(t *testing.T, c *client.Client) {
	t.Helper()
	def := client.SpaceDef{Name: "products", PrimaryKey: []string{"id"}, Format: tuple.Format{
		{Name: "id", Type: tuple.TypeUnsigned}, {Name: "name", Type: tuple.TypeString},
		{Name: "price", Type: tuple.TypeDouble}, {Name: "bumps", Type: tuple.TypeUnsigned},
	}}
	deadline := time.Now().Add(120 * time.Second)
	for {
		_, err := c.CreateSpace(t.Context(), def, true)
		if err == nil {
			_, err = c.Space("products").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.String("probe"), tuple.Double(0), tuple.Uint(0)})
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster stores no tuple after 120s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestExampleBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example binary")
	}
	bin := buildBinary(t, t.TempDir())
	addr := framework.FreePorts(t, 1)[0]
	startCluster(t, bin, addr)
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitWritable(t, c)
	ctx := t.Context()
	products := c.Space("products")
	if _, err := products.Delete(ctx, []tuple.Value{tuple.Uint(0)}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []struct {
		name  string
		price float64
	}{{"pen", 1.5}, {"lamp", 30}, {"desk", 120}, {"chair", 45.5}, {"mug", 4}} {
		if _, err := products.Insert(ctx, tuple.Tuple{tuple.Uint(uint64(i + 1)), tuple.String(p.name), tuple.Double(p.price), tuple.Uint(0)}); err != nil {
			t.Fatal(err)
		}
	}

	// top_prices, ro, on the replicaset; then on every replicaset.
	ro := client.RO
	top, err := c.Call(ctx, "top_prices", tuple.Tuple{tuple.String("products"), tuple.Uint(3)}, client.CallOptions{Mode: &ro})
	if got := string(tuple.AppendJSON(nil, top)); err != nil || got != "[3,120.0,4,45.5,2,30.0]" {
		t.Errorf("top_prices(products, 3) = %s, %v", got, err)
	}
	all, err := c.MapCall(ctx, "top_prices", tuple.Tuple{tuple.String("products"), tuple.Uint(1)}, client.RO)
	if err != nil || len(all) != 1 || string(tuple.AppendJSON(nil, all[0].Result)) != "[3,120.0]" {
		t.Errorf("map-call top_prices(products, 1) = %+v, %v", all, err)
	}

	// bump, rw, on the replicaset of the key's bucket: its writes are the
	// cluster's.
	key := []tuple.Value{tuple.Uint(2)}
	b, err := products.Bucket(ctx, key...)
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		res, err := c.Call(ctx, "bump", tuple.Tuple{tuple.String("products"), tuple.Uint(2)}, client.CallOptions{Bucket: b})
		if exp := fmt.Sprintf(`[2,"lamp",30.0,%d]`, want); err != nil || string(tuple.AppendJSON(nil, res)) != exp {
			t.Fatalf("bump %d = %s, %v; want %s", want, tuple.AppendJSON(nil, res), err, exp)
		}
	}
	got, _, err := products.Select(ctx, key, client.RW)
	if err != nil || string(tuple.AppendJSON(nil, got.Tuple)) != `[2,"lamp",30.0,2]` {
		t.Errorf("after two bumps: %+v, %v", got, err)
	}
	if res, err := c.Call(ctx, "bump", tuple.Tuple{tuple.String("products"), tuple.Uint(99)}, client.CallOptions{}); err != nil || len(res) != 0 {
		t.Errorf("bump of a missing product = %v, %v; want []", res, err)
	}
	if _, err := c.Call(ctx, "bump", tuple.Tuple{tuple.String("products"), tuple.Uint(2)}, client.CallOptions{Mode: &ro}); !errors.Is(err, client.ErrInvalid) ||
		!strings.Contains(err.Error(), "procedure bump writes (rw); call it in mode rw") {
		t.Errorf("bump in ro mode: %v", err)
	}

	// The binary's own command line knows its procedures.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"call", "--list"}, "top_prices(space, n)"},
		{[]string{"call", "--peer", addr, "top_prices", `["products", 2]`}, "[3,120.0,4,45.5]\n"},
		{[]string{"map-call", "--peer", addr, "--mode", "ro", "top_prices", `["products", 1]`}, "{\"replicaset\":\"r1\",\"result\":[3,120.0]}\n"},
		{[]string{"call", "--peer", addr, "bump", `["products", 2]`}, "[2,\"lamp\",30.0,3]\n"},
		{[]string{"select", "--peer", addr, "products", `[2]`}, "[[2,\"lamp\",30.0,3]]\n"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, tc.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("shardkit-procs %s: %v, stdout %q, stderr %q; want %q", strings.Join(tc.args, " "), err, stdout.String(), stderr.String(), tc.want)
		}
		// The table's columns are as wide as the longest name.
		if tc.args[1] == "--list" && !regexp.MustCompile(`(?m)^top_prices +ro +top_prices\(`).MatchString(stdout.String()) {
			t.Errorf("shardkit-procs call --list: stdout %q; want a row top_prices, ro, its doc", stdout.String())
		}
	}
}
