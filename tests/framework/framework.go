package framework

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the shardkit binary into dir, with extra `go build` flags
// (-tags, -race), and returns its path.
func Build(dir string, flags ...string) (string, error) {
	binary := filepath.Join(dir, "shardkit")
	args := append(append([]string{"build", "-o", binary}, flags...), "github.com/shardkit/shardkit/cmd/shardkit")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building shardkit: %w", err)
	}
	return binary, nil
}

// handedOut holds every address FreePorts returned in this process: the
// kernel may give a port just closed to the next listener on port 0, so
// two calls (two instances allocated one after the other, the first not
// started yet) could get the same port; FreePorts never returns one twice.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// FreePorts returns n loopback addresses that were free a moment ago,
// none returned before in this process.
func FreePorts(tb testing.TB, n int) []string {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l) // held open until all n are found: none repeats within the call
		if addr := l.Addr().String(); !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			out = append(out, addr)
		}
	}
	return out
}

// StartMarker begins the line Start appends to the log before each start.
const StartMarker = "==== start "

// Instance is one `shardkit run` process tree: the supervisor (its own
// process group) and the worker it starts (the instance proper). The
// exported fields are set before the first Start.
type Instance struct {
	Name   string
	Listen string   // the gRPC address (--listen)
	Log    string   // the log file; every start appends to it
	Args   []string // the arguments of `shardkit run`
	Binary string   // the shardkit binary
	Env    []string // added to the test's environment ("NAME=value")

	mu      sync.Mutex
	proc    *process
	stopped bool // SIGSTOPped
}

// process is one start of an instance's supervisor.
type process struct {
	pid    int
	exited chan struct{}
	state  *os.ProcessState
}

// Start starts the supervisor with Args and extra arguments. The goroutine
// that starts it keeps its OS thread until the process ends, so that
// Pdeathsig (the supervisor dies with the test binary) is not fired early
// by the thread's exit.
func (inst *Instance) Start(extra ...string) error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc != nil {
		select {
		case <-inst.proc.exited:
		default:
			return fmt.Errorf("%s is running", inst.Name)
		}
	}
	logf, err := os.OpenFile(inst.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	args := append(append([]string{"run"}, inst.Args...), extra...)
	fmt.Fprintf(logf, "%s%s %s %v\n", StartMarker, inst.Name, time.Now().Format(time.RFC3339Nano), args[1:])
	p := &process{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		cmd := exec.Command(inst.Binary, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if len(inst.Env) > 0 {
			cmd.Env = append(os.Environ(), inst.Env...)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	inst.proc, inst.stopped = p, false
	return nil
}

func (inst *Instance) current() (*process, bool) {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.proc, inst.stopped
}

// Running reports whether the supervisor runs (stopped or not).
func (inst *Instance) Running() bool {
	p, _ := inst.current()
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stopped reports whether the instance is SIGSTOPped (Stop, not yet Cont).
func (inst *Instance) Stopped() bool {
	_, stopped := inst.current()
	return stopped
}

// running returns the running process, or why there is none.
func (inst *Instance) running() (*process, error) {
	p, _ := inst.current()
	if p == nil {
		return nil, fmt.Errorf("%s was never started", inst.Name)
	}
	select {
	case <-p.exited:
		return nil, fmt.Errorf("%s is not running", inst.Name)
	default:
		return p, nil
	}
}

// Signal sends sig to the supervisor alone (it passes SIGTERM and SIGHUP
// on to the worker).
func (inst *Instance) Signal(sig syscall.Signal) error {
	p, err := inst.running()
	if err != nil {
		return err
	}
	return syscall.Kill(p.pid, sig)
}

// SignalGroup sends sig to the supervisor's process group (the worker is
// in it too).
func (inst *Instance) SignalGroup(sig syscall.Signal) error {
	p, err := inst.running()
	if err != nil {
		return err
	}
	return syscall.Kill(-p.pid, sig)
}

// Kill sends SIGKILL to the supervisor and the worker and waits for the
// supervisor to be reaped. It works on a stopped process too, and does
// nothing to one that is not running.
func (inst *Instance) Kill() {
	p, _ := inst.current()
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		// Gone already (its worker dies with it: Pdeathsig).
	default:
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
	}
	inst.mu.Lock()
	inst.stopped = false
	inst.mu.Unlock()
}

// KillWorker sends SIGKILL to the worker alone: the supervisor sees a
// crash and starts a new one (after its backoff). It returns the pid
// killed.
func (inst *Instance) KillWorker() (int, error) {
	p, _ := inst.current()
	if p == nil {
		return 0, fmt.Errorf("%s was never started", inst.Name)
	}
	kids, err := children(p.pid)
	if err != nil {
		return 0, err
	}
	if len(kids) == 0 {
		return 0, fmt.Errorf("%s (supervisor %d) has no worker now", inst.Name, p.pid)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	return kids[0], nil
}

// Stop sends SIGSTOP to the whole instance; Cont resumes it.
func (inst *Instance) Stop() error {
	if err := inst.SignalGroup(syscall.SIGSTOP); err != nil {
		return err
	}
	inst.mu.Lock()
	inst.stopped = true
	inst.mu.Unlock()
	return nil
}

// Cont resumes an instance Stop stopped.
func (inst *Instance) Cont() error {
	err := inst.SignalGroup(syscall.SIGCONT)
	inst.mu.Lock()
	inst.stopped = false
	inst.mu.Unlock()
	return err
}

// Term sends SIGTERM to the supervisor and waits for it to exit; after
// timeout it kills the instance and says so. An instance that is not
// running is left as it is.
func (inst *Instance) Term(timeout time.Duration) error {
	p, err := inst.running()
	if err != nil {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		inst.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM (killed)", inst.Name, timeout)
	}
}

// Wait waits up to timeout for the supervisor to exit on its own and
// returns its exit code.
func (inst *Instance) Wait(timeout time.Duration) (int, error) {
	p, _ := inst.current()
	if p == nil {
		return 0, fmt.Errorf("%s was never started", inst.Name)
	}
	select {
	case <-p.exited:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still runs after %v", inst.Name, timeout)
	}
}

// LogText returns the instance's whole log ("" when there is none).
func (inst *Instance) LogText() string {
	b, _ := os.ReadFile(inst.Log)
	return string(b)
}

// LastRun returns the part of the log written since the last Start.
func (inst *Instance) LastRun() string {
	text := inst.LogText()
	if i := strings.LastIndex(text, StartMarker); i >= 0 {
		return text[i:]
	}
	return text
}

// LogTail returns the last n lines of the instance's log.
func (inst *Instance) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(inst.LogText(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// children returns the pids of a process's children (Linux).
func children(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out, nil
}
