package robustness

import (
	"context"
	"errors"
	"flag"
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

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
)

// binary is the shardkit binary the tests run, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() || runtime.GOOS != "linux" {
		return m.Run() // the cluster test skips itself; the model tests need no binary
	}
	dir, err := os.MkdirTemp("", "shardkit-robustness-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "shardkit")
	args := []string{"build", "-o", binary}
	if os.Getenv("SHARDKIT_ROBUSTNESS_RACE") == "1" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/shardkit/shardkit/cmd/shardkit")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building shardkit: %v\n", err)
		return 1
	}
	return m.Run()
}

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}

// instance is one `shardkit run` process tree: the supervisor (its own
// process group) and the worker it starts (the instance proper).
type instance struct {
	name   string
	listen string
	logf   string
	args   []string

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

// start starts the supervisor. The goroutine that starts it keeps its OS
// thread until the process ends, so that Pdeathsig (the supervisor dies
// with the test binary) is not fired early by the thread's exit.
func (inst *instance) start() error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc != nil {
		select {
		case <-inst.proc.exited:
		default:
			return fmt.Errorf("%s is running", inst.name)
		}
	}
	logf, err := os.OpenFile(inst.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== robustness: start %s %s %v\n", inst.name, time.Now().Format(time.RFC3339Nano), inst.args)
	p := &process{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		cmd := exec.Command(binary, append([]string{"run"}, inst.args...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
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

func (inst *instance) current() (*process, bool) {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.proc, inst.stopped
}

func (inst *instance) running() bool {
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

// signalGroup sends sig to the supervisor's process group (the worker is
// in it too).
func (inst *instance) signalGroup(sig syscall.Signal) error {
	p, _ := inst.current()
	if p == nil {
		return fmt.Errorf("%s was never started", inst.name)
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%s is not running", inst.name)
	default:
	}
	return syscall.Kill(-p.pid, sig)
}

// kill sends SIGKILL to the supervisor and the worker and waits for the
// supervisor to be reaped. It works on a stopped process too.
func (inst *instance) kill() {
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

// killWorker sends SIGKILL to the worker alone: the supervisor sees a
// crash and starts a new one (after its backoff).
func (inst *instance) killWorker() (int, error) {
	p, _ := inst.current()
	if p == nil {
		return 0, fmt.Errorf("%s was never started", inst.name)
	}
	kids, err := children(p.pid)
	if err != nil {
		return 0, err
	}
	if len(kids) == 0 {
		return 0, fmt.Errorf("%s (supervisor %d) has no worker now", inst.name, p.pid)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	return kids[0], nil
}

// stop sends SIGSTOP to the whole instance; cont resumes it.
func (inst *instance) stop() error {
	if err := inst.signalGroup(syscall.SIGSTOP); err != nil {
		return err
	}
	inst.mu.Lock()
	inst.stopped = true
	inst.mu.Unlock()
	return nil
}

func (inst *instance) cont() error {
	err := inst.signalGroup(syscall.SIGCONT)
	inst.mu.Lock()
	inst.stopped = false
	inst.mu.Unlock()
	return err
}

// term sends SIGTERM to the supervisor and waits for it to exit; after
// timeout it kills the instance and says so.
func (inst *instance) term(timeout time.Duration) error {
	p, _ := inst.current()
	if p == nil {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		inst.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM (killed)", inst.name, timeout)
	}
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

// logTail returns the last n lines of the instance's log.
func (inst *instance) logTail(n int) string {
	b, _ := os.ReadFile(inst.logf)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// cluster is n instances on loopback in replicasets of rf instances each.
type cluster struct {
	t      *testing.T
	insts  []*instance
	addrs  []string
	rf     int
	logDir string
	admin  *client.Client
}

func newCluster(t *testing.T, n, rf int, logDir string) *cluster {
	t.Helper()
	c := &cluster{t: t, logDir: logDir, rf: rf}
	ports := freePorts(t, n)
	for i := range n {
		dataDir := filepath.Join(t.TempDir(), "data")
		inst := &instance{name: fmt.Sprintf("n%d", i+1), listen: ports[i], logf: filepath.Join(logDir, fmt.Sprintf("n%d.log", i+1))}
		inst.args = []string{
			"--listen", inst.listen, "--peer", strings.Join(ports, ","), "--data-dir", dataDir,
			"--instance-id", inst.name, "--init-replication-factor", strconv.Itoa(rf),
			"--auto-offline-timeout", "3s", "--shutdown-timeout", "10s", "--log-level", "debug",
		}
		c.insts = append(c.insts, inst)
		c.addrs = append(c.addrs, inst.listen)
	}
	admin, err := client.New(context.Background(), client.Config{Peers: c.addrs, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.admin = admin
	// Registered after the data dirs (t.TempDir), so it runs before
	// their removal: every process is gone before its files are.
	t.Cleanup(func() {
		for _, inst := range c.insts {
			inst.kill()
		}
		_ = admin.Close()
	})
	return c
}

func (c *cluster) startAll() {
	c.t.Helper()
	for _, inst := range c.insts {
		if err := inst.start(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// names maps the instances' addresses to their names.
func (c *cluster) names() map[string]string {
	out := map[string]string{}
	for _, inst := range c.insts {
		out[inst.listen] = inst.name
	}
	return out
}

func (c *cluster) byAddr(addr string) *instance {
	for _, inst := range c.insts {
		if inst.listen == addr {
			return inst
		}
	}
	return nil
}

func online(i *clusterv1.Instance) bool {
	cur, tgt := i.GetCurrentGrade(), i.GetTargetGrade()
	return cur.GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE &&
		tgt.GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE && cur.GetIncarnation() == tgt.GetIncarnation()
}

// health says what is missing for the cluster to be whole: every
// instance running, Online, group 0 with a leader, each replicaset full
// and with a leader all its members agree on. "" when whole.
func (c *cluster) health(ctx context.Context) string {
	for _, inst := range c.insts {
		if !inst.running() {
			return inst.name + " is not running"
		}
		if _, stopped := inst.current(); stopped {
			return inst.name + " is stopped"
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.admin.Status(sctx, false)
	if err != nil {
		return "status: " + err.Error()
	}
	if st.GetLeaderRaftId() == 0 {
		return "group 0 has no leader"
	}
	if len(st.GetInstances()) != len(c.insts) {
		return fmt.Sprintf("status lists %d instances", len(st.GetInstances()))
	}
	for _, is := range st.GetInstances() {
		if !online(is.GetInstance()) {
			return fmt.Sprintf("%s is %s -> %s", is.GetInstance().GetInstanceId(),
				client.FormatGrade(is.GetInstance().GetCurrentGrade()), client.FormatGrade(is.GetInstance().GetTargetGrade()))
		}
	}
	want := len(c.insts) / c.rf
	if len(st.GetReplicasets()) != want {
		return fmt.Sprintf("want %d replicasets of %d instances: %v", want, c.rf, st.GetReplicasets())
	}
	for _, rs := range st.GetReplicasets() {
		if len(rs.GetInstances()) != c.rf {
			return fmt.Sprintf("want %d replicasets of %d instances: %v", want, c.rf, st.GetReplicasets())
		}
	}
	views := c.replicasetLeaders(ctx)
	if len(views) != len(c.insts) {
		return fmt.Sprintf("not every instance names its replicaset's leader: %v", views)
	}
	agreed := map[string]string{}
	for _, v := range views {
		if l, ok := agreed[v.rs]; ok && l != v.leader {
			return fmt.Sprintf("the members of %s disagree on its leader: %v", v.rs, views)
		}
		agreed[v.rs] = v.leader
	}
	return ""
}

// waitHealthy polls health until it is "" or timeout passes.
func (c *cluster) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		if last = c.health(ctx); last == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the cluster is not whole after %v: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// leaderView is what one instance says of its own replicaset.
type leaderView struct{ rs, leader string }

// replicasetLeaders asks every running instance which address leads its
// replicaset (its own raft view, through GetRouting).
func (c *cluster) replicasetLeaders(ctx context.Context) map[string]leaderView {
	out := map[string]leaderView{}
	for _, inst := range c.insts {
		if !inst.running() {
			continue
		}
		conn, err := c.admin.Conn(inst.listen)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := datav1.NewDataServiceClient(conn).GetRouting(rctx, &datav1.GetRoutingRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, rs := range resp.GetReplicasets() {
			own := slices.ContainsFunc(rs.GetMembers(), func(m *datav1.Member) bool { return m.GetAddress() == inst.listen })
			if own && rs.GetLeaderAddress() != "" {
				out[inst.name] = leaderView{rs: rs.GetReplicasetId(), leader: rs.GetLeaderAddress()}
			}
		}
	}
	return out
}

// leaders returns the instances leading the replicaset and group 0 as
// the cluster reports them now (nil when unknown).
func (c *cluster) leaders(ctx context.Context) (rs, g0 *instance) {
	count := map[string]int{}
	for _, v := range c.replicasetLeaders(ctx) {
		count[v.leader]++
	}
	best := 0
	for addr, n := range count {
		if n > best {
			rs, best = c.byAddr(addr), n
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st, err := c.admin.Status(sctx, false); err == nil {
		for _, is := range st.GetInstances() {
			if is.GetInstance().GetRaftId() == st.GetLeaderRaftId() {
				g0 = c.byAddr(is.GetInstance().GetAddress())
			}
		}
	}
	return rs, g0
}

// scanLogs returns lines of the instance logs that no run may contain:
// a panic, a Go runtime fatal error, a data race.
func (c *cluster) scanLogs() []string {
	var out []string
	for _, inst := range c.insts {
		b, err := os.ReadFile(inst.logf)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", inst.name, err))
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
				if strings.HasPrefix(strings.TrimSpace(line), bad) {
					out = append(out, fmt.Sprintf("%s line %d: %s", inst.logf, i+1, line))
				}
			}
		}
	}
	return out
}

// copyLogs copies the instance logs into dir.
func (c *cluster) copyLogs(dir string) error {
	var errs []error
	for _, inst := range c.insts {
		if filepath.Dir(inst.logf) == dir {
			continue
		}
		b, err := os.ReadFile(inst.logf)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(inst.logf)), b, 0o644)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
