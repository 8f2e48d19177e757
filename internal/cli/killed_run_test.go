package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/synth"
)

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pollFor waits for cond with a deadline far beyond what it should take.
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startShardkit starts the test binary as `shardkit args...`.
func startShardkit(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asShardkit+"=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-done; err != nil {
			t.Logf("shardkit %v: %v", args, err) // killed, or failed: either way it is gone
		}
	})
	return cmd, out, done
}

// killMidRun starts `shardkit numerator run` args in a child process and
// kills it -9 once it has both an output under its temporary name and a
// spill file: the lock is held, and the leftovers are on disk.
func killMidRun(t *testing.T, output, tempDir string, args ...string) {
	t.Helper()
	cmd, out, done := startShardkit(t, append([]string{"numerator", "run"}, args...)...)
	pollFor(t, "the run to write a temporary output and a spill file", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the run ended before it could be killed (%v); make its input larger:\n%s", err, out)
		default:
		}
		return len(glob(t, output+".tmp-*")) > 0 && len(glob(t, filepath.Join(tempDir, "shardkit-numerator-spill.tmp-*", "spill-*.run"))) > 0
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the killed run ended with %v:\n%s", err, out)
	}
	done <- nil // for the cleanup
}

// TestNumeratorKilledRunFreesTheLockAndItsLeftovers: a run killed -9
// mid-run holds the lock only until its TTL runs out; the next run waits
// at most that long, succeeds, and removes the dead run's temporary
// outputs and spill files. A second killed run's lock and leftovers are
// removed by `unlock --force`.
func TestNumeratorKilledRunFreesTheLockAndItsLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "offers.parquet")
	// Large enough that a run under the race detector spills and works
	// for seconds after its first spill file.
	if _, err := synth.Write(t.Context(), offers, synth.Params{Offers: 1_500_000, Churn: 0.05}, 0); err != nil {
		t.Fatal(err)
	}
	coordDir, tempDir := filepath.Join(dir, "coord"), filepath.Join(dir, "tmp")
	if err := os.Mkdir(tempDir, 0o755); err != nil {
		t.Fatal(err)
	}
	common := []string{"--coordinator", "local", "--coordinator-addr", coordDir, "--input-offers", offers,
		"--memory-limit", "192MiB", "--temp-dir", tempDir, "--lock-ttl", "2s"}
	state1 := filepath.Join(dir, "state1")
	killMidRun(t, state1, tempDir, append(common, "--master-name", "dc-killed", "--output-state", state1)...)
	coord, err := coordinator.NewLocal(coordDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := coord.Status(t.Context()); err != nil || st.Lock == nil || st.Lock.Holder != "dc-killed" {
		t.Fatalf("status after the kill: %+v, %v; want dc-killed's lock", st, err)
	}

	// The rerun: the dead run's lock expires within its 2s TTL; 60s of
	// --lock-wait bound the wait with a wide margin.
	rerun := append([]string{"numerator", "run"}, common...)
	rerun = append(rerun, "--master-name", "dc-rerun", "--output-state", state1, "--lock-retry", "100ms", "--lock-wait", "60s")
	out, errOut, code := run(t, rerun...)
	if code != 0 || !strings.Contains(out, "recorded state "+state1) {
		t.Fatalf("the rerun: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "removed a dead run's leftovers: "+state1+".tmp-") ||
		!strings.Contains(errOut, "removed a dead run's leftovers: "+filepath.Join(tempDir, "shardkit-numerator-spill.tmp-")) {
		t.Fatalf("the rerun did not say it removed the dead run's leftovers:\n%s", errOut)
	}
	if left := append(glob(t, filepath.Join(dir, "*.tmp-*")), glob(t, filepath.Join(tempDir, "*"))...); len(left) > 0 {
		t.Fatalf("leftovers after the rerun: %v", left)
	}

	// A second run killed -9; this time an operator unlocks at once.
	state2 := filepath.Join(dir, "state2")
	killMidRun(t, state2, tempDir, append(common, "--master-name", "dc-killed-again", "--output-state", state2, "--lock-ttl", "1h")...)
	unlock := []string{"numerator", "unlock", "--coordinator", "local", "--coordinator-addr", coordDir, "--temp-dir", tempDir, "--outputs-dir", dir}
	_, errOut, code = run(t, unlock...)
	if code == 0 || !strings.Contains(errOut, "dc-killed-again holds the write lock") || !strings.Contains(errOut, "--force") {
		t.Fatalf("unlock without --force while the lock is held: exit %d, stderr %s", code, errOut)
	}
	out, errOut, code = run(t, append(unlock, "--force")...)
	if code != 0 || !strings.Contains(out, "dropped the write lock of dc-killed-again") || !strings.Contains(out, "removed 2 dead runs' leftovers") {
		t.Fatalf("unlock --force: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if left := append(glob(t, filepath.Join(dir, "*.tmp-*")), glob(t, filepath.Join(tempDir, "*"))...); len(left) > 0 {
		t.Fatalf("leftovers after unlock --force: %v", left)
	}
	st, err := coord.Status(t.Context())
	if err != nil || st.Lock != nil || st.State.Location != state1 {
		t.Fatalf("status after unlock --force: %+v, %v; want the lock free and %s recorded", st, err, state1)
	}
}

// TestNumeratorWaitingRunNamesTheHolder: a run that waits for the lock
// says on stderr who holds it and until when, and starts once it is
// released; a run that gives up names the holder and the way out.
func TestNumeratorWaitingRunNamesTheHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "offers.parquet")
	writeGeneration(t, offers, 0)
	coordDir := filepath.Join(dir, "coord")
	coord, err := coordinator.NewLocal(coordDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := coord.Acquire(t.Context(), "dc-other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"numerator", "run", "--coordinator", "local", "--coordinator-addr", coordDir, "--master-name", "dc-a",
		"--input-offers", offers, "--lock-retry", "20ms"}

	_, errOut, code := run(t, append(args, "--output-state", filepath.Join(dir, "s0"), "--lock-wait", "300ms")...)
	for _, words := range []string{"waiting for the write lock: dc-other holds it (ticket 1)", "gave up waiting", "dc-other holds it", "unlock --force"} {
		if code == 0 || !strings.Contains(errOut, words) {
			t.Fatalf("a run that gives up: exit %d, stderr does not say %q:\n%s", code, words, errOut)
		}
	}

	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(append(args, "--output-state", filepath.Join(dir, "s1"), "--lock-wait", "60s"), nil, &stdout, &stderr)
	}()
	pollFor(t, "the run to say who holds the lock", func() bool {
		return strings.Contains(stderr.String(), fmt.Sprintf("dc-other holds it (ticket %d) since %s, until %s",
			held.Ticket, held.Acquired.Format(time.RFC3339), held.Expires.Format(time.RFC3339)))
	})
	if _, err := coord.Report(context.Background(), held.Ticket, coordinator.Report{}); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.Contains(stdout.String(), "recorded state") {
		t.Fatalf("the run after the release: exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}
