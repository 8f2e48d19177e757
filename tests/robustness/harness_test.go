package robustness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tests/framework"
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
	var flags []string
	if os.Getenv("SHARDKIT_ROBUSTNESS_RACE") == "1" {
		flags = append(flags, "-race")
	}
	if failpoints {
		flags = append(flags, "-tags", "failpoints")
	}
	if binary, err = framework.Build(dir, flags...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// instance is one `shardkit run` process tree, which the nemesis kills,
// stops and restarts.
type instance = framework.Instance

// cluster is n instances on loopback in replicasets of rf instances each.
type cluster struct {
	t     *testing.T
	insts []*instance
	addrs []string
	// http maps an instance's name to its --http-listen address (its
	// /debug/failpoints endpoint).
	http   map[string]string
	rf     int
	logDir string
	admin  *client.Client
}

// Every instance gets env added to its environment (the deliberate
// defect's failpoints).
func newCluster(t *testing.T, n, rf int, logDir string, env []string) *cluster {
	t.Helper()
	c := &cluster{t: t, logDir: logDir, rf: rf, http: map[string]string{}}
	all := framework.FreePorts(t, 2*n)
	ports, httpPorts := all[:n], all[n:]
	for i := range n {
		dataDir := filepath.Join(t.TempDir(), "data")
		name := fmt.Sprintf("n%d", i+1)
		inst := &instance{Name: name, Listen: ports[i], Log: filepath.Join(logDir, name+".log"), Binary: binary, Env: env}
		c.http[name] = httpPorts[i]
		inst.Args = []string{
			"--listen", inst.Listen, "--http-listen", httpPorts[i], "--peer", strings.Join(ports, ","), "--data-dir", dataDir,
			"--instance-id", inst.Name, "--init-replication-factor", strconv.Itoa(rf),
			"--auto-offline-timeout", "3s", "--shutdown-timeout", "10s", "--log-level", "debug",
		}
		c.insts = append(c.insts, inst)
		c.addrs = append(c.addrs, inst.Listen)
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
			inst.Kill()
		}
		_ = admin.Close()
	})
	return c
}

func (c *cluster) startAll() {
	c.t.Helper()
	for _, inst := range c.insts {
		if err := inst.Start(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// names maps the instances' addresses to their names.
func (c *cluster) names() map[string]string {
	out := map[string]string{}
	for _, inst := range c.insts {
		out[inst.Listen] = inst.Name
	}
	return out
}

func (c *cluster) byAddr(addr string) *instance {
	for _, inst := range c.insts {
		if inst.Listen == addr {
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
		if !inst.Running() {
			return inst.Name + " is not running"
		}
		if inst.Stopped() {
			return inst.Name + " is stopped"
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
		if !inst.Running() {
			continue
		}
		conn, err := c.admin.Conn(inst.Listen)
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
			own := slices.ContainsFunc(rs.GetMembers(), func(m *datav1.Member) bool { return m.GetAddress() == inst.Listen })
			if own && rs.GetLeaderAddress() != "" {
				out[inst.Name] = leaderView{rs: rs.GetReplicasetId(), leader: rs.GetLeaderAddress()}
			}
		}
	}
	return out
}

// replicasetLeader returns the instance most members of the replicasets
// name as their leader (nil when none names one).
func (c *cluster) replicasetLeader(ctx context.Context) *instance {
	count := map[string]int{}
	for _, v := range c.replicasetLeaders(ctx) {
		count[v.leader]++
	}
	var out *instance
	best := 0
	for addr, n := range count {
		if n > best {
			out, best = c.byAddr(addr), n
		}
	}
	return out
}

// leaders returns the instances leading the replicaset and group 0 as
// the cluster reports them now (nil when unknown).
func (c *cluster) leaders(ctx context.Context) (rs, g0 *instance) {
	rs = c.replicasetLeader(ctx)
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
		b, err := os.ReadFile(inst.Log)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", inst.Name, err))
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
				if strings.HasPrefix(strings.TrimSpace(line), bad) {
					out = append(out, fmt.Sprintf("%s line %d: %s", inst.Log, i+1, line))
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
		if filepath.Dir(inst.Log) == dir {
			continue
		}
		b, err := os.ReadFile(inst.Log)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(inst.Log)), b, 0o644)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
