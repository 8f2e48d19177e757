package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tests/framework"
)

// binary is the shardkit binary the tests run, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(fenceHolderEnv) != "" {
		os.Exit(runFenceHolder()) // a holder process of TestAPausedHolderWritesNothing
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "shardkit-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binary, err = framework.Build(dir, "-tags", buildTags); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("SHARDKIT_TEST_SECURE") != "" {
		// The whole suite in a secure cluster: every instance and every
		// command finds the certificates in SHARDKIT_CERTS_DIR (the one
		// variable of run --certs-dir and of the clients' --certs-dir).
		certsDir := filepath.Join(dir, "certs")
		if err := makeTestCerts(certsDir); err != nil {
			fmt.Fprintf(os.Stderr, "making certificates: %v\n", err)
			return 1
		}
		os.Setenv("SHARDKIT_CERTS_DIR", certsDir)
	}
	return m.Run()
}

// instance is one `shardkit run` process (a supervisor and its worker),
// with its HTTP address and its own directory (the data dir is its
// "data").
type instance struct {
	*framework.Instance
	http string
	dir  string
}

type cluster struct {
	t     *testing.T
	peers []string
	insts []*instance
}

// newInstance allocates an instance (not started) named name on two free
// ports, with the suite's run arguments and extra ones.
func (c *cluster) newInstance(name, listen, http string, extra ...string) *instance {
	dir := c.t.TempDir()
	inst := &instance{
		Instance: &framework.Instance{Name: name, Listen: listen, Log: filepath.Join(dir, "..", name+".log"), Binary: binary},
		http:     http,
		dir:      dir,
	}
	inst.Args = append([]string{
		"--listen", listen, "--http-listen", http,
		"--peer", strings.Join(c.peers, ","), "--data-dir", filepath.Join(dir, "data"),
		"--auto-offline-timeout", "3s", "--shutdown-timeout", "15s", "--log-level", "debug",
	}, extra...)
	return inst
}

// newCluster allocates n instances sharing a --peer list of the first
// min(n, 3) addresses; extra run arguments go to every instance.
func newCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t}
	addrs := framework.FreePorts(t, 2*n)
	for i := range min(n, 3) {
		c.peers = append(c.peers, addrs[2*i])
	}
	for i := range n {
		c.insts = append(c.insts, c.newInstance(fmt.Sprintf("n%d", i+1), addrs[2*i], addrs[2*i+1], extra...))
	}
	t.Cleanup(func() {
		for _, inst := range c.insts {
			inst.Kill()
		}
		if t.Failed() {
			for _, inst := range c.insts {
				t.Logf("---- %s (%s) log tail ----\n%s", inst.Name, inst.Listen, inst.LogTail(60))
			}
		}
	})
	return c
}

// checkData stops every instance and checks its data dir
// (framework.CheckData): want replicas of a replicaset's data in all.
// The instances do not come back.
func (c *cluster) checkData(t *testing.T, want int) {
	t.Helper()
	insts := make([]*framework.Instance, 0, len(c.insts))
	for _, inst := range c.insts {
		insts = append(insts, inst.Instance)
	}
	if n := framework.CheckData(t, insts); n != want {
		t.Errorf("the data check found %d replicas of a replicaset's data, want %d", n, want)
	}
}

// add allocates one more instance (not started).
func (c *cluster) add(extra ...string) *instance {
	addrs := framework.FreePorts(c.t, 2)
	inst := c.newInstance(fmt.Sprintf("n%d", len(c.insts)+1), addrs[0], addrs[1], extra...)
	c.insts = append(c.insts, inst)
	return inst
}

func (c *cluster) startAll() {
	for _, inst := range c.insts {
		inst.start(c.t)
	}
}

// start starts the instance with its arguments and extra ones.
func (inst *instance) start(t *testing.T, extra ...string) {
	t.Helper()
	if err := inst.Start(extra...); err != nil {
		t.Fatal(err)
	}
}

// term sends SIGTERM to the supervisor and waits for it to exit.
func (inst *instance) term(t *testing.T) {
	t.Helper()
	if err := inst.Term(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the process to exit on its own and returns its exit code.
func (inst *instance) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	code, err := inst.Wait(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

type grade struct {
	Variant     string `json:"variant"`
	Incarnation uint64 `json:"incarnation"`
}

type instanceJSON struct {
	InstanceID    string            `json:"instance_id"`
	RaftID        uint64            `json:"raft_id"`
	UUID          string            `json:"uuid"`
	ReplicasetID  string            `json:"replicaset_id"`
	Address       string            `json:"address"`
	HTTPAddress   string            `json:"http_address"`
	FailureDomain map[string]string `json:"failure_domain"`
	RaftRole      string            `json:"raft_role"`
	CurrentGrade  grade             `json:"current_grade"`
	TargetGrade   grade             `json:"target_grade"`
}

type replicasetJSON struct {
	ReplicasetID     string   `json:"replicaset_id"`
	UUID             string   `json:"uuid"`
	LeaderInstanceID string   `json:"leader_instance_id"`
	Weight           float64  `json:"weight"`
	Instances        []string `json:"instances"`
	BucketCount      int      `json:"bucket_count"`
}

type statusJSON struct {
	ClusterID    string           `json:"cluster_id"`
	ClusterUUID  string           `json:"cluster_uuid"`
	LeaderRaftID uint64           `json:"leader_raft_id"`
	Term         uint64           `json:"term"`
	CommitIndex  uint64           `json:"commit_index"`
	Instances    []instanceJSON   `json:"instances"`
	Replicasets  []replicasetJSON `json:"replicasets"`
}

func (s *statusJSON) byAddress(addr string) *instanceJSON {
	for i := range s.Instances {
		if s.Instances[i].Address == addr {
			return &s.Instances[i]
		}
	}
	return nil
}

func (s *statusJSON) byRaftID(id uint64) *instanceJSON {
	for i := range s.Instances {
		if s.Instances[i].RaftID == id {
			return &s.Instances[i]
		}
	}
	return nil
}

func (s *statusJSON) count(pred func(*instanceJSON) bool) int {
	n := 0
	for i := range s.Instances {
		if pred(&s.Instances[i]) {
			n++
		}
	}
	return n
}

// shardkit runs a CLI command and returns its stdout, stderr and exit code.
func shardkit(timeout time.Duration, args ...string) (string, string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), errb.String(), code
}

func status(peer string, all bool) (*statusJSON, error) {
	args := []string{"status", "--peer", peer, "--format", "json"}
	if all {
		args = append(args, "--all")
	}
	out, errs, code := shardkit(10*time.Second, args...)
	if code != 0 {
		return nil, fmt.Errorf("status exit %d: %s", code, errs)
	}
	st := &statusJSON{}
	if err := json.Unmarshal([]byte(out), st); err != nil {
		return nil, fmt.Errorf("status output: %w: %s", err, out)
	}
	return st, nil
}

// waitStatus polls status through any running instance until cond holds.
func (c *cluster) waitStatus(what string, timeout time.Duration, cond func(*statusJSON) bool) *statusJSON {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last *statusJSON
	var lastErr error
	for time.Now().Before(deadline) {
		for _, inst := range c.insts {
			if !inst.Running() {
				continue
			}
			st, err := status(inst.Listen, true)
			if err != nil {
				lastErr = err
				continue
			}
			last = st
			if cond(st) {
				return st
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	c.t.Fatalf("timed out after %v waiting for %s; last status %s; last error %v", timeout, what, b, lastErr)
	return nil
}

func online(i *instanceJSON) bool {
	return i.CurrentGrade.Variant == "Online" && i.TargetGrade.Variant == "Online"
}

// waitOnline waits until n instances are Online with a leader.
func (c *cluster) waitOnline(n int) *statusJSON {
	c.t.Helper()
	return c.waitStatus(fmt.Sprintf("%d instances Online", n), 90*time.Second, func(s *statusJSON) bool {
		return s.LeaderRaftID != 0 && s.count(online) == n
	})
}

func (c *cluster) instanceAt(addr string) *instance {
	for _, inst := range c.insts {
		if inst.Listen == addr {
			return inst
		}
	}
	return nil
}

// leader returns the instance leading group 0.
func (c *cluster) leader(st *statusJSON) *instance {
	l := st.byRaftID(st.LeaderRaftID)
	if l == nil {
		c.t.Fatalf("status names leader raft_id %d, which is not an instance", st.LeaderRaftID)
	}
	return c.instanceAt(l.Address)
}

// follower is the first instance that is not group 0's leader in st.
func (c *cluster) follower(st *statusJSON) *instance {
	lead := c.leader(st)
	for _, inst := range c.insts {
		if inst != lead {
			return inst
		}
	}
	c.t.Fatalf("no instance but the leader")
	return nil
}

func voters(st *statusJSON) []uint64 {
	var out []uint64
	for _, i := range st.Instances {
		if i.RaftRole == "voter" {
			out = append(out, i.RaftID)
		}
	}
	slices.Sort(out)
	return out
}

// makeTestCerts makes a CA, a node certificate for the loopback and root's
// client certificate.
func makeTestCerts(dir string) error {
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		return err
	}
	if err := certs.CreateNode(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}); err != nil {
		return err
	}
	return certs.CreateClient(dir, certs.RootUser, certs.Options{})
}

// httpBase is the scheme of the instances' HTTP ports ("https://" when the
// suite runs secure), and httpClient the client to ask them with (root's
// certificate when secure).
func httpBase() string {
	if os.Getenv("SHARDKIT_CERTS_DIR") != "" {
		return "https://"
	}
	return "http://"
}

func httpClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	c := &http.Client{Timeout: timeout}
	if dir := os.Getenv("SHARDKIT_CERTS_DIR"); dir != "" {
		cfg, err := certs.LoadClient(dir, certs.RootUser)
		if err != nil {
			t.Fatal(err)
		}
		c.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return c
}

// dialCredentials are root's credentials when the suite runs secure, and
// plaintext otherwise.
func dialCredentials() (credentials.TransportCredentials, error) {
	dir := os.Getenv("SHARDKIT_CERTS_DIR")
	if dir == "" {
		return insecure.NewCredentials(), nil
	}
	return client.LoadCredentials(dir, certs.RootUser)
}

// nodeCredentials are an instance's credentials when the suite runs
// secure (plaintext otherwise): the bucket audit reads the replicasets'
// own records, which only instances may.
func nodeCredentials(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	dir := os.Getenv("SHARDKIT_CERTS_DIR")
	if dir == "" {
		return insecure.NewCredentials()
	}
	srv, err := certs.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(srv.ClientConfig())
}

// testCredentials are root's credentials when the suite runs secure (nil:
// plaintext).
func testCredentials(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	dir := os.Getenv("SHARDKIT_CERTS_DIR")
	if dir == "" {
		return nil
	}
	c, err := client.LoadCredentials(dir, certs.RootUser)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
