//go:build unix

package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testDeadline bounds every wait in these tests; it is a hang guard, not
// a timing assertion.
const testDeadline = 60 * time.Second

// syncBuffer is a bytes.Buffer safe for the worker's output copier.
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

type fixture struct {
	state, data string
	stderr      *syncBuffer
	sigs        chan os.Signal
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		state:  filepath.Join(root, "state"),
		data:   filepath.Join(root, "data"),
		stderr: &syncBuffer{},
		sigs:   make(chan os.Signal, 1),
	}
	must(t, os.Mkdir(f.state, 0o755))
	// As the parent would at its start; tests put files in it before Run.
	must(t, PrepareDataDir(f.data))
	return f
}

func (f *fixture) env(mode string) []string {
	return append(os.Environ(),
		// A race-enabled test binary sleeps 1s at a clean exit by default.
		"GORACE=atexit_sleep_ms=0",
		envFakeMode+"="+mode,
		envFakeState+"="+f.state,
		envFakeData+"="+f.data,
	)
}

func (f *fixture) config(t *testing.T, mode string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Path:           exe,
		Env:            f.env(mode),
		DataDir:        f.data,
		Stderr:         f.stderr,
		Signals:        f.sigs,
		InitialBackoff: time.Millisecond,
		MaxBackoff:     5 * time.Millisecond,
	}
}

// run runs the supervisor in this process, failing the test if it hangs.
func run(ctx context.Context, t *testing.T, cfg Config) (int, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type out struct {
		code int
		err  error
	}
	done := make(chan out, 1)
	go func() {
		code, err := Run(ctx, cfg)
		done <- out{code, err}
	}()
	select {
	case o := <-done:
		return o.code, o.err
	case <-time.After(testDeadline):
		cancel()
		<-done
		t.Fatalf("supervisor did not return within %v", testDeadline)
		return 0, nil
	}
}

func (f *fixture) starts(t *testing.T) []start {
	t.Helper()
	s, err := readStarts(f.state)
	if err != nil {
		t.Fatalf("read starts: %v", err)
	}
	return s
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fileAppears polls for path, for goroutines that may not fail the test;
// false at the deadline (the test's own guard then fails it).
func fileAppears(path string) bool {
	deadline := time.Now().Add(testDeadline)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		mode       string
		wantCode   int
		wantStarts int
	}{
		{"clean exit is not restarted", "crash:0", 0, 1},
		{"crashes are restarted", "crash:3", 0, 4},
		{"death by signal is a crash", "signal", 0, 2},
		{"refused is not restarted", "refuse", ExitRefused, 1},
		{"expelled is not restarted", "expelled", ExitExpelled, 1},
		{"rebootstrap code without a request is a crash", "bad-request", 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			code, err := run(t.Context(), t, f.config(t, tt.mode))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; worker stderr:\n%s", code, tt.wantCode, f.stderr)
			}
			starts := f.starts(t)
			if len(starts) != tt.wantStarts {
				t.Errorf("%d worker starts, want %d", len(starts), tt.wantStarts)
			}
			pids := map[int]bool{}
			for _, s := range starts {
				if pids[s.pid] {
					t.Errorf("pid %d started twice: restarts must be new processes", s.pid)
				}
				pids[s.pid] = true
				if s.entrypoint != "" {
					t.Errorf("entrypoint %q without a rebootstrap", s.entrypoint)
				}
			}
		})
	}
}

func TestRefusedLineReachesStderr(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := run(t.Context(), t, f.config(t, "refuse")); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(f.stderr.String()); got != `cluster_id mismatch: instance has "x", cluster has "y"` {
		t.Errorf("stderr %q: want exactly the worker's one line", got)
	}
}

func TestBadRequestDoesNotWipe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	precious := filepath.Join(f.data, "precious")
	if err := os.WriteFile(precious, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t.Context(), t, f.config(t, "bad-request")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("data dir wiped without a request: %v", err)
	}
}

func TestRebootstrapWipesDataDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	outside := filepath.Join(f.state, "outside")
	must(t, os.WriteFile(outside, []byte("not ours"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.data, "precious"), []byte("db"), 0o644))
	must(t, os.MkdirAll(filepath.Join(f.data, "sub", "deeper"), 0o755))
	must(t, os.WriteFile(filepath.Join(f.data, "sub", "deeper", "x"), []byte("x"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(f.data, "link")))
	must(t, os.Symlink(f.state, filepath.Join(f.data, "dirlink")))

	code, err := run(t.Context(), t, f.config(t, "rebootstrap"))
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, f.stderr)
	}
	starts := f.starts(t)
	if len(starts) != 2 {
		t.Fatalf("%d starts, want 2", len(starts))
	}
	if starts[0].entrypoint != "" || !starts[0].dataPresent {
		t.Errorf("first worker: entrypoint %q, data present %v; want \"\", true", starts[0].entrypoint, starts[0].dataPresent)
	}
	if starts[1].entrypoint != rebootstrapTo || starts[1].dataPresent {
		t.Errorf("second worker: entrypoint %q, data present %v; want %q, false", starts[1].entrypoint, starts[1].dataPresent, rebootstrapTo)
	}
	entries, err := os.ReadDir(f.data)
	if err != nil {
		t.Fatalf("data dir itself must remain: %v", err)
	}
	if len(entries) != 1 || entries[0].Name() != MarkerFile {
		t.Errorf("data dir after the wipe holds %v, want only %s", entries, MarkerFile)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "not ours" {
		t.Errorf("a file outside the data dir (behind a symlink) was touched: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(f.state, "starts")); err != nil {
		t.Errorf("a directory outside the data dir (behind a symlink) was wiped: %v", err)
	}
}

func TestRepeatedRebootstraps(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config(t, "rebootstrap-loop:6")
	cfg.QuickRebootstraps = 2 // the later ones go through the backoff path
	code, err := run(t.Context(), t, cfg)
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	starts := f.starts(t)
	if len(starts) != 7 {
		t.Fatalf("%d starts, want 7", len(starts))
	}
	for i, s := range starts[1:] {
		if want := "join:" + strconv.Itoa(i+1); s.entrypoint != want {
			t.Errorf("start %d: entrypoint %q, want %q", i+2, s.entrypoint, want)
		}
	}
}

func TestCrashAfterRebootstrapKeepsEntrypoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	must(t, os.WriteFile(filepath.Join(f.data, "precious"), []byte("db"), 0o644))
	code, err := run(t.Context(), t, f.config(t, "rebootstrap-crash"))
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	starts := f.starts(t)
	if len(starts) != 3 {
		t.Fatalf("%d starts, want 3", len(starts))
	}
	for i, s := range starts[1:] {
		if s.entrypoint != rebootstrapTo {
			t.Errorf("start %d: entrypoint %q, want %q (kept across a crash)", i+2, s.entrypoint, rebootstrapTo)
		}
	}
}

func TestStopForwardsSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			go func() {
				if fileAppears(filepath.Join(f.state, "ready")) {
					f.sigs <- sig
				}
			}()
			code, err := run(t.Context(), t, f.config(t, "term"))
			if err != nil || code != 0 {
				t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, f.stderr)
			}
			got, err := os.ReadFile(filepath.Join(f.state, "got"))
			if err != nil || string(got) != sig.String() {
				t.Errorf("worker got %q (%v), want %q", got, err, sig.String())
			}
			if n := len(f.starts(t)); n != 1 {
				t.Errorf("%d starts after a stop, want 1", n)
			}
		})
	}
}

func TestCancelStopsWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		if fileAppears(filepath.Join(f.state, "ready")) {
			cancel()
		}
	}()
	code, err := run(ctx, t, f.config(t, "term"))
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	if got, _ := os.ReadFile(filepath.Join(f.state, "got")); string(got) != syscall.SIGTERM.String() {
		t.Errorf("worker got %q, want SIGTERM", got)
	}
}

func TestStopTimeoutKillsWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config(t, "ignore-term")
	cfg.StopTimeout = 50 * time.Millisecond
	go func() {
		if fileAppears(filepath.Join(f.state, "ready")) {
			f.sigs <- syscall.SIGTERM
		}
	}()
	code, err := run(t.Context(), t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := 128 + int(syscall.SIGKILL); code != want {
		t.Errorf("exit code %d, want %d (killed)", code, want)
	}
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config(t, "crash:0")
	cfg.Path = filepath.Join(f.state, "no-such-binary")
	if _, err := run(t.Context(), t, cfg); err == nil || !strings.Contains(err.Error(), "no-such-binary") {
		t.Errorf("Run error %v, want one naming the binary", err)
	}
}

func TestRefusesUnsafeDataDir(t *testing.T) {
	t.Parallel()
	foreign := t.TempDir()
	must(t, os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644))
	for _, dir := range []string{"/", "", foreign} {
		f := newFixture(t)
		cfg := f.config(t, "crash:0")
		cfg.DataDir = dir
		if _, err := run(t.Context(), t, cfg); !errors.Is(err, ErrUnsafeDataDir) {
			t.Errorf("Run with data dir %q: error %v, want ErrUnsafeDataDir", dir, err)
		}
		if _, err := os.Stat(filepath.Join(f.state, "starts")); err == nil {
			t.Errorf("a worker was started with data dir %q", dir)
		}
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("a foreign dir was touched: %q, %v", b, err)
	}
}

// startParent runs the supervisor as a separate process (the test binary
// in parent role), so that it can be signalled and killed.
func startParent(t *testing.T, f *fixture, mode string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(f.env(mode), envFakeRole+"=parent")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, out
}

func TestParentForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	parent, out := startParent(t, f, "term")
	readPID(t, filepath.Join(f.state, "ready"))
	must(t, parent.Process.Signal(syscall.SIGTERM))
	err := parent.Wait()
	if err != nil {
		t.Fatalf("parent: %v; output:\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(f.state, "got")); string(got) != syscall.SIGTERM.String() {
		t.Errorf("worker got %q, want SIGTERM", got)
	}
}

func TestWorkerDiesWithParent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	parent, _ := startParent(t, f, "hang")
	worker := readPID(t, filepath.Join(f.state, "ready"))
	if !alive(worker) {
		t.Fatalf("worker %d not running", worker)
	}
	must(t, parent.Process.Kill())
	_ = parent.Wait()
	waitFor(t, "the worker to die with its parent", func() bool { return !alive(worker) })
}

// alive: the process exists and is not a zombie (an orphan's reaper may
// be slow, or absent in a container).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces, so take what follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
