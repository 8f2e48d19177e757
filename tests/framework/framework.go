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

// FreePorts hands out ports below the kernel's ephemeral range (the ports
// it gives to listeners on port 0 and to outgoing connections), so that
// no connection made by anyone between FreePorts and the process that
// binds the port can take it (a port from the ephemeral range was taken
// so, in CI, by a connection's local end). Test binaries run in parallel
// (`go test ./...`), so each port is reserved across processes by a lock
// on a file named for it (portLocks), held until this process exits.
const (
	portsFrom = 20000 // below: the services of scripts/services.sh (1xxxx)
	portsTo   = 32768 // the usual start of the ephemeral range
)

// portLocks is where FreePorts' reservations are, one file a port.
var portLocks = filepath.Join(os.TempDir(), "shardkit-test-ports")

// handedOut holds the ports this process reserved, with their locked
// files (kept open: closing one would release its lock).
var handedOut = struct {
	sync.Mutex
	ports map[int]*os.File
	next  int // where the next search starts; 0: not chosen yet
}{ports: map[int]*os.File{}}

// portRange is the ports FreePorts hands out: [portsFrom, portsTo) and
// below the ephemeral range this machine has.
func portRange() (from, to int) {
	from, to = portsFrom, portsTo
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo < to {
				to = lo
			}
		}
	}
	return from, to
}

// FreePorts returns n loopback addresses whose ports are free, below the
// ephemeral range, and reserved for this process: none is returned twice,
// in this process or another.
func FreePorts(tb testing.TB, n int) []string {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	from, to := portRange()
	if to-from < 100 {
		tb.Fatalf("no room for test ports: the ephemeral range begins at %d, FreePorts' at %d", to, from)
	}
	if err := os.MkdirAll(portLocks, 0o777); err != nil {
		tb.Fatal(err)
	}
	if handedOut.next == 0 {
		// Processes started together begin their searches apart.
		handedOut.next = from + (os.Getpid()*7919)%(to-from)
	}
	var out []string
	for tried := 0; len(out) < n; tried++ {
		if tried == to-from {
			tb.Fatalf("no free port in [%d, %d) for this test (%d handed out here)", from, to, len(handedOut.ports))
		}
		p := handedOut.next
		if handedOut.next++; handedOut.next == to {
			handedOut.next = from
		}
		if handedOut.ports[p] != nil {
			continue
		}
		f, ok := reservePort(p)
		if !ok {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			_ = f.Close() // bound by something else: not ours
			continue
		}
		_ = l.Close()
		handedOut.ports[p] = f
		out = append(out, addr)
	}
	return out
}

// reservePort locks p's file in portLocks without waiting; ok is false
// when another process holds it.
func reservePort(p int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(portLocks, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
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
