package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/tests/framework"
)

// K2: instances started at the same moment with the same --peer list form
// exactly one cluster. SHARDKIT_IT_ROUNDS repeats it (default 2 per size;
// the discovery unit test runs each size 30 times in-process).
func TestStartTogetherFormsOneCluster(t *testing.T) {
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("SHARDKIT_IT_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for run := range rounds {
		for _, n := range []int{2, 3, 5} {
			startTogether(t, run, n)
		}
	}
}

func startTogether(t *testing.T, run, n int) {
	t.Helper()
	{
		t.Run(fmt.Sprintf("round=%d/n=%d", run, n), func(t *testing.T) {
			c := newCluster(t, n)
			c.startAll()
			st := c.waitOnline(n)
			if st.count(func(i *instanceJSON) bool { return i.RaftID == 1 }) != 1 {
				t.Fatalf("no single raft_id 1: %+v", st.Instances)
			}
			// Every instance sees the same cluster.
			for _, inst := range c.insts {
				s, err := status(inst.Listen, false)
				if err != nil {
					t.Fatal(err)
				}
				if s.ClusterUUID != st.ClusterUUID || len(s.Instances) != n {
					t.Fatalf("%s sees cluster %s with %d instances, want %s with %d", inst.Name, s.ClusterUUID, len(s.Instances), st.ClusterUUID, n)
				}
			}
			wantVoters := map[int]int{2: 1, 3: 3, 5: 5}[n]
			st = c.waitStatus(fmt.Sprintf("%d voters", wantVoters), 30*time.Second, func(s *statusJSON) bool {
				return len(voters(s)) == wantVoters
			})
			if st.ClusterID != "demo" {
				t.Fatalf("cluster_id %q, want the default demo", st.ClusterID)
			}
		})
	}
}

// K7, K5: joiners through any member; restarts keep identity and bump the
// incarnation; a full cold restart recovers.
func TestJoinRestartAndColdRestart(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	st := c.waitOnline(3)
	lead := c.leader(st)
	follower := c.follower(st)

	// A joiner that knows only a follower.
	j1 := c.add()
	j1.Args = replacePeer(j1.Args, follower.Listen)
	j1.start(t)
	c.waitOnline(4)

	// A joiner whose first peer is dead.
	dead := framework.FreePorts(t, 1)[0]
	j2 := c.add()
	j2.Args = replacePeer(j2.Args, dead+","+lead.Listen)
	j2.start(t)
	st = c.waitOnline(5)

	// Restart a follower: same raft_id, incarnation + 1.
	before := *st.byAddress(follower.Listen)
	follower.term(t)
	follower.start(t)
	st = c.waitStatus("the follower back Online with a new incarnation", 60*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(follower.Listen)
		// At least +1: a sentinel flap around the restart may add another.
		return i != nil && online(i) && i.CurrentGrade.Incarnation > before.CurrentGrade.Incarnation
	})
	if after := st.byAddress(follower.Listen); after.RaftID != before.RaftID || after.InstanceID != before.InstanceID || after.UUID != before.UUID {
		t.Fatalf("restart changed identity: before %+v after %+v", before, after)
	}

	// Restart the leader (kill -9): a new leader, and the old one rejoins.
	before = *st.byAddress(lead.Listen)
	lead.Kill()
	lead.start(t)
	st = c.waitStatus("the old leader back Online with a new incarnation", 60*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(lead.Listen)
		return i != nil && online(i) && i.CurrentGrade.Incarnation > before.CurrentGrade.Incarnation
	})
	if after := st.byAddress(lead.Listen); after.RaftID != before.RaftID {
		t.Fatalf("leader restart changed raft_id %d -> %d", before.RaftID, after.RaftID)
	}

	// A joiner that knows only the former leader.
	j3 := c.add()
	j3.Args = replacePeer(j3.Args, lead.Listen)
	j3.start(t)
	c.waitOnline(6)

	// Full cold restart.
	for _, inst := range c.insts {
		inst.Kill()
	}
	for _, inst := range c.insts {
		inst.start(t)
	}
	st = c.waitOnline(6)
	if len(st.Instances) != 6 || st.count(func(i *instanceJSON) bool { return i.RaftID > 6 }) != 0 {
		t.Fatalf("after cold restart: %+v", st.Instances)
	}
}

// An instance restarted with another --listen and --http-listen (moved to
// another port or host) is reached there: it sends its addresses with its
// request for Online, and group 0 records them before the grade. Before,
// its peers kept sending to the old address and it stayed Offline,
// asking for Online every few seconds, forever.
func TestAnInstanceRestartedOnAnotherAddressIsReachedThere(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	st := c.waitOnline(3)
	moved := c.follower(st)
	before := *st.byAddress(moved.Listen)
	moved.term(t)
	addrs := framework.FreePorts(t, 2)
	moved.Args = replaceArg(replaceArg(moved.Args, "--listen", addrs[0]), "--http-listen", addrs[1])
	moved.Listen, moved.http = addrs[0], addrs[1]
	moved.start(t)
	// Online: the governor saw it catch up with group 0's log, which only
	// the leader's messages to its new address bring.
	st = c.waitStatus("the instance Online at its new address", 60*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(moved.Listen)
		return i != nil && online(i) && i.HTTPAddress == moved.http
	})
	if after := st.byAddress(moved.Listen); after.RaftID != before.RaftID || after.UUID != before.UUID {
		t.Fatalf("the move changed the identity: before %+v, after %+v", before, after)
	}
}

// An instance restarted with an --advertise address another instance has
// is refused by group 0, and says so where an operator looks: its
// /health/ready names the refusal (it said "no leader of group 0 is
// known"), and its log has it at warn.
func TestAnInstanceRestartedOnATakenAddressSaysWhy(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	st := c.waitOnline(3)
	lead := c.leader(st)
	moved := c.follower(st)
	moved.term(t)
	free := framework.FreePorts(t, 1)[0]
	moved.Args = replaceArg(moved.Args, "--listen", free)
	moved.Listen = free
	moved.start(t, "--advertise", lead.Listen)
	deadline := time.Now().Add(60 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		code, body = httpGet2(t, moved.http+"/health/ready") // 0 until it listens
		if strings.Contains(body, "refuses this instance's request for target Online: ") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if code != 503 || !strings.Contains(body, "refuses this instance's request for target Online: ") || !strings.Contains(body, lead.Listen) {
		t.Fatalf("/health/ready of an instance advertising %s (the leader's): %d %s", lead.Listen, code, body)
	}
	if b, _ := os.ReadFile(moved.Log); !strings.Contains(string(b), "group 0 refuses this instance's target grade") {
		t.Errorf("no warning of the refusal in the log:\n%s", lastLines(string(b), 20))
	}
}

func replaceArg(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := range out {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

func replacePeer(args []string, peer string) []string {
	out := slices.Clone(args)
	for i := range out {
		if out[i] == "--peer" {
			out[i+1] = peer
		}
	}
	return out
}

// K13 and the sentinel: SIGTERM of the leader hands leadership over;
// kill -9 of a voter gets it marked Offline and a learner promoted.
func TestLeaderShutdownAndVoterCrash(t *testing.T) {
	c := newCluster(t, 4)
	c.startAll()
	c.waitOnline(4)
	st := c.waitStatus("3 voters and 1 learner", 30*time.Second, func(s *statusJSON) bool {
		return len(voters(s)) == 3 && s.count(func(i *instanceJSON) bool { return i.RaftRole == "learner" }) == 1
	})
	lead := c.leader(st)
	oldLeader := st.LeaderRaftID
	lead.term(t)
	if !strings.Contains(lead.LogText(), "transferring leadership") {
		t.Errorf("the leader's log does not show a leadership transfer")
	}
	st = c.waitStatus("a new leader and the old one Offline", 30*time.Second, func(s *statusJSON) bool {
		old := s.byAddress(lead.Listen)
		return s.LeaderRaftID != 0 && s.LeaderRaftID != oldLeader && old != nil && old.CurrentGrade.Variant == "Offline"
	})
	// The rest keep working: a lease can be taken.
	if granted, _, err := acquire(c.leader(st).Listen, "after-shutdown", "x", time.Minute); err != nil || !granted {
		t.Fatalf("the cluster cannot take a lease after the leader's shutdown: granted=%v, %v", granted, err)
	}
	lead.start(t)
	c.waitOnline(4)
	st = c.waitStatus("3 voters again", 30*time.Second, func(s *statusJSON) bool { return len(voters(s)) == 3 })

	// kill -9 a voter that is not the leader.
	var victim *instance
	var victimID uint64
	for _, i := range st.Instances {
		if i.RaftRole == "voter" && i.RaftID != st.LeaderRaftID {
			victim, victimID = c.instanceAt(i.Address), i.RaftID
			break
		}
	}
	victim.Kill()
	st = c.waitStatus("the sentinel to mark the killed voter Offline and a learner to be promoted", 60*time.Second, func(s *statusJSON) bool {
		v := s.byRaftID(victimID)
		return v != nil && v.TargetGrade.Variant == "Offline" && v.CurrentGrade.Variant == "Offline" &&
			v.RaftRole == "learner" && len(voters(s)) == 3
	})
	for _, id := range voters(st) {
		if i := st.byRaftID(id); !online(i) {
			t.Fatalf("voter %d is not Online: %+v", id, i)
		}
	}
}

// acquire asks addr for the lease; it does not call t.Fatal, so it may run
// in a goroutine.
func acquire(addr, name, holder string, ttl time.Duration) (bool, *clusterv1.Lease, error) {
	creds, err := dialCredentials()
	if err != nil {
		return false, nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false, nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := clusterv1.NewClusterServiceClient(conn).AcquireLease(ctx, &clusterv1.AcquireLeaseRequest{Name: name, Holder: holder, TtlMs: ttl.Milliseconds()})
	if err != nil {
		return false, nil, fmt.Errorf("acquire %s as %s at %s: %w", name, holder, addr, err)
	}
	return resp.GetGranted(), resp.GetLease(), nil
}

// Leases: two holders race, exactly one wins; the loser gets the lease
// after it expires, with a larger ticket.
func TestLeaseRace(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	type result struct {
		granted bool
		lease   *clusterv1.Lease
		err     error
	}
	// The TTL outlasts both racing RPCs even on a loaded machine, so the
	// second request always finds the first one's lease live.
	const ttl = 6 * time.Second
	res := make(chan result, 2)
	for i, holder := range []string{"A", "B"} {
		addr := c.insts[i].Listen
		go func() {
			g, l, err := acquire(addr, "shard-7", holder, ttl)
			res <- result{g, l, err}
		}()
	}
	r1, r2 := <-res, <-res
	if r1.err != nil || r2.err != nil {
		t.Fatalf("racing acquires: %v; %v", r1.err, r2.err)
	}
	if r1.granted == r2.granted {
		t.Fatalf("both or neither got the lease: %+v %+v", r1, r2)
	}
	winner, loser := r1, r2
	if !winner.granted {
		winner, loser = r2, r1
	}
	loserName := "A"
	if winner.lease.GetHolder() == "A" {
		loserName = "B"
	}
	// The refusal names the holder and its ticket.
	if loser.lease.GetHolder() != winner.lease.GetHolder() || loser.lease.GetTicket() != winner.lease.GetTicket() {
		t.Fatalf("the loser was told %+v, the winner holds %+v", loser.lease, winner.lease)
	}
	deadline := time.Now().Add(ttl + 30*time.Second)
	for {
		g, l, err := acquire(c.insts[2].Listen, "shard-7", loserName, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if g {
			if l.GetTicket() <= winner.lease.GetTicket() {
				t.Fatalf("the loser got ticket %d, not larger than the winner's %d", l.GetTicket(), winner.lease.GetTicket())
			}
			if time.Now().UnixMilli() < winner.lease.GetExpiresUnixMs()-500 {
				t.Fatalf("the loser got the lease before the winner's expired")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loser never got the lease")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
