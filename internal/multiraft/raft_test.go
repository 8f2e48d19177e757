package multiraft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
)

const g1 multiraft.GroupID = 1

func TestElectionOneLeaderPerTerm(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	lead := c.leader(g1)
	terms := map[uint64]multiraft.NodeID{}
	for _, id := range c.ids() {
		st := c.group(id, g1).Status()
		if st.Role == "leader" {
			if other, ok := terms[st.Term]; ok {
				t.Fatalf("two leaders in term %d: %d and %d", st.Term, other, id)
			}
			terms[st.Term] = id
		}
		if st.Leader != lead {
			t.Errorf("node %d sees leader %d, want %d", id, st.Leader, lead)
		}
		if !slices.Equal(st.Voters, []multiraft.NodeID{1, 2, 3}) {
			t.Errorf("node %d voters %v, want [1 2 3]", id, st.Voters)
		}
	}
	// Kill the leader: the others elect a new one in a higher term.
	oldTerm := c.group(lead, g1).Status().Term
	c.crash(lead)
	var rest []multiraft.NodeID
	for _, id := range c.ids() {
		if id != lead {
			rest = append(rest, id)
		}
	}
	newLead := c.leader(g1, rest...)
	if newLead == lead {
		t.Fatalf("crashed node %d still leads", lead)
	}
	if term := c.group(newLead, g1).Status().Term; term <= oldTerm {
		t.Fatalf("new leader's term %d is not above the old %d", term, oldTerm)
	}
}

// ProposeAs hands back the state machine's result as its own type, and
// names both types when the group's state machine gives another.
func TestProposeAsTypesTheResult(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, 1, nil)
	c.addGroup(g1, 1)
	c.start()
	lead := c.leader(g1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := c.group(lead, g1)
	res, err := multiraft.ProposeAs[kvsm.Result](ctx, g, put("a", "1").Encode())
	if err != nil || res.Err != nil {
		t.Fatalf("put: %v, %v", err, res.Err)
	}
	res, err = multiraft.ProposeAs[kvsm.Result](ctx, g, put("a", "2").Encode())
	if err != nil || !res.Found || string(res.Value) != "1" {
		t.Fatalf("second put: %+v, %v; want the old value 1", res, err)
	}
	_, err = multiraft.ProposeAs[string](ctx, g, put("a", "3").Encode())
	if err == nil || !strings.Contains(err.Error(), "kvsm.Result, not string") {
		t.Fatalf("a result of another type: %v, want an error naming kvsm.Result and string", err)
	}
}

func TestProposalsAppliedEverywhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	c.leader(g1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Proposals through every member (followers forward to the leader),
	// many at once, so they are batched into shared appends.
	errs := make(chan error, 60)
	for i := range 60 {
		via := multiraft.NodeID(i%3 + 1)
		go func() {
			_, err := c.propose(ctx, via, g1, put(fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)))
			errs <- err
		}()
	}
	for range 60 {
		if err := <-errs; err != nil {
			t.Fatalf("propose: %v", err)
		}
	}
	c.waitConverged(g1, 1, 2, 3)
	for _, id := range c.ids() {
		for i := range 60 {
			k := fmt.Sprintf("k%02d", i)
			if v, ok := c.read(id, g1, k); !ok || v != fmt.Sprintf("v%d", i) {
				t.Fatalf("node %d: %s = %q (found %v), want v%d", id, k, v, ok, i)
			}
		}
	}
	// The result of a command is the state machine's: put returns the old value.
	r := c.mustPropose(g1, put("k00", "new"))
	if !r.Found || string(r.Value) != "v0" {
		t.Fatalf("put result %+v, want previous value v0", r)
	}
}

func TestReadIndexSeesCommittedWrites(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	lead := c.leader(g1)
	c.mustPropose(g1, put("x", "1"))
	// A follower that is cut off from the leader's appends must not answer a
	// linearizable read until it has caught up.
	var follower multiraft.NodeID
	for _, id := range c.ids() {
		if id != lead {
			follower = id
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.mustPropose(g1, put("x", "2"))
	if err := c.group(follower, g1).ReadIndex(ctx); err != nil {
		t.Fatalf("read index on follower: %v", err)
	}
	if v, _ := c.read(follower, g1, "x"); v != "2" {
		t.Fatalf("follower read x=%q after ReadIndex, want 2", v)
	}
}

func TestRestartFromPebble(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	for i := range 20 {
		c.mustPropose(g1, appendCmd("log", fmt.Sprintf("%d,", i)))
	}
	c.waitConverged(g1, 1, 2, 3)
	want := c.mustPropose(g1, getCmd("log"))

	// Kill and reopen one follower, then every node at once.
	lead := c.leader(g1)
	follower := multiraft.NodeID(1)
	if follower == lead {
		follower = 2
	}
	before := c.group(follower, g1).Status()
	c.crash(follower)
	c.restart(follower)
	after := c.group(follower, g1).Status()
	if after.Term < before.Term || after.LastIndex < before.LastIndex {
		t.Fatalf("restart lost raft state: before %+v, after %+v", before, after)
	}
	for _, id := range c.ids() {
		c.crash(id)
	}
	for _, id := range c.ids() {
		c.restart(id)
	}
	c.leader(g1)
	c.mustPropose(g1, appendCmd("log", "end"))
	c.waitConverged(g1, 1, 2, 3)
	expect := string(want.Value) + "end"
	for _, id := range c.ids() {
		// An entry applied twice would show up twice in the appended log.
		if v, _ := c.read(id, g1, "log"); v != expect {
			t.Fatalf("node %d: log=%q after restarts, want %q", id, v, expect)
		}
	}
}

func TestConfChanges(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 5, 5, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	lead := c.leader(g1, 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lg := c.group(lead, g1)
	c.mustPropose(g1, put("a", "1"))

	check := func(step string, wantVoters, wantLearners []multiraft.NodeID) {
		t.Helper()
		st := c.group(c.leader(g1, wantVoters...), g1).Status()
		if !slices.Equal(st.Voters, wantVoters) || !slices.Equal(st.Learners, wantLearners) {
			t.Fatalf("%s: voters %v learners %v, want %v and %v", step, st.Voters, st.Learners, wantVoters, wantLearners)
		}
	}
	// Add learner 4; it catches up (by snapshot: its log starts empty).
	if _, err := lg.AddLearner(ctx, 4); err != nil {
		t.Fatalf("add learner: %v", err)
	}
	c.joinGroup(g1, 4)
	check("add learner", []multiraft.NodeID{1, 2, 3}, []multiraft.NodeID{4})
	waitFor(t, 20*time.Second, "learner 4 to catch up", func() bool {
		v, ok := c.read(4, g1, "a")
		return ok && v == "1"
	})
	if role := c.group(4, g1).Status().Role; role != "learner" {
		t.Fatalf("node 4 role %q, want learner", role)
	}
	// Promote it.
	if _, err := c.group(c.leader(g1, 1, 2, 3), g1).PromoteLearner(ctx, 4); err != nil {
		t.Fatalf("promote: %v", err)
	}
	check("promote learner", []multiraft.NodeID{1, 2, 3, 4}, nil)
	// Add voter 5 directly.
	if _, err := c.group(c.leader(g1, 1, 2, 3, 4), g1).AddVoter(ctx, 5); err != nil {
		t.Fatalf("add voter: %v", err)
	}
	c.joinGroup(g1, 5)
	check("add voter", []multiraft.NodeID{1, 2, 3, 4, 5}, nil)
	// Demote 1, remove 2.
	if _, err := c.group(c.leader(g1, 1, 2, 3, 4, 5), g1).DemoteVoter(ctx, 1); err != nil {
		t.Fatalf("demote: %v", err)
	}
	check("demote voter", []multiraft.NodeID{2, 3, 4, 5}, []multiraft.NodeID{1})
	if _, err := c.group(c.leader(g1, 2, 3, 4, 5), g1).RemoveNode(ctx, 2); err != nil {
		t.Fatalf("remove: %v", err)
	}
	check("remove voter", []multiraft.NodeID{3, 4, 5}, []multiraft.NodeID{1})
	// A joint change: swap voter 3 for learner 1 in one ConfChangeV2.
	cs, err := c.group(c.leader(g1, 3, 4, 5), g1).ChangeConfig(ctx, jointSwap(1, 3))
	if err != nil {
		t.Fatalf("joint change: %v", err)
	}
	if len(cs.GetVotersOutgoing()) == 0 {
		t.Fatalf("joint change applied without entering a joint config: %v", cs)
	}
	waitFor(t, 20*time.Second, "the joint config to be left", func() bool {
		st := c.group(c.leader(g1, 1, 4, 5), g1).Status()
		return len(st.VotersOutgoing) == 0 && slices.Equal(st.Voters, []multiraft.NodeID{1, 4, 5})
	})
	check("joint swap", []multiraft.NodeID{1, 4, 5}, []multiraft.NodeID{3})
	// The group still works and every member has the data.
	c.mustPropose(g1, put("b", "2"))
	c.waitConverged(g1, 1, 3, 4, 5)
	for _, id := range []multiraft.NodeID{1, 3, 4, 5} {
		if v, _ := c.read(id, g1, "b"); v != "2" {
			t.Fatalf("node %d: b=%q, want 2", id, v)
		}
	}
}

func TestLeadershipTransfer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 6, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	lead := c.leader(g1)
	c.mustPropose(g1, put("a", "1"))
	c.waitConverged(g1, 1, 2, 3)
	putAt := c.group(lead, g1).Applied() // the put's index: nothing came after it
	target := lead%3 + 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Ask through a member that is neither leader nor target.
	via := target%3 + 1
	if err := c.group(via, g1).TransferLeadership(ctx, target); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if got := c.leader(g1); got != target {
		t.Fatalf("leader %d after transfer, want %d", got, target)
	}
	// The new leader's empty entry reached no state machine: every member,
	// past it, has its last command at the put (read by offline checks,
	// which compare members stopped on either side of such entries).
	c.waitConverged(g1, 1, 2, 3)
	for id := multiraft.NodeID(1); id <= 3; id++ {
		applied := c.group(id, g1).Applied()
		c.mu.Lock()
		last, err := multiraft.LastCommandIndex(c.nodes[id].db, g1, applied)
		atPut, err2 := multiraft.LastCommandIndex(c.nodes[id].db, g1, putAt)
		c.mu.Unlock()
		if err != nil || err2 != nil || last != putAt || atPut != putAt || applied <= putAt {
			t.Fatalf("node %d: LastCommandIndex = %d at applied %d, %d at the put's index %d (%v, %v); want the put's",
				id, last, applied, atPut, putAt, err, err2)
		}
	}
	if r := c.mustPropose(g1, getCmd("a")); string(r.Value) != "1" {
		t.Fatalf("after transfer a=%q, want 1", r.Value)
	}
}

func TestSnapshotCatchUpAfterCompaction(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 7, 3, func(cfg *multiraft.Config) {
		cfg.LogCompactionThreshold = 50
		cfg.LogCompactionKeep = 5
	})
	c.addGroup(g1, 1, 2, 3)
	c.start()
	lead := c.leader(g1)
	down := lead%3 + 1
	c.mustPropose(g1, put("before", "x"))
	c.waitConverged(g1, 1, 2, 3)
	c.crash(down)
	big := strings.Repeat("v", 2000)
	for i := range 300 {
		c.mustPropose(g1, put(fmt.Sprintf("k%03d", i), big))
	}
	st := c.group(c.leader(g1), g1).Status()
	downApplied := uint64(0)
	c.restart(down)
	downApplied = c.group(down, g1).Applied()
	if st.FirstIndex <= downApplied+1 {
		t.Fatalf("log was not compacted past the down member: first index %d, member applied %d", st.FirstIndex, downApplied)
	}
	c.waitConverged(g1, 1, 2, 3)
	if n := c.group(down, g1).Status().SnapshotsRestored; n == 0 {
		t.Fatalf("member caught up without restoring a snapshot")
	}
	for i := range 300 {
		if v, _ := c.read(down, g1, fmt.Sprintf("k%03d", i)); v != big {
			t.Fatalf("node %d lacks k%03d after snapshot catch-up", down, i)
		}
	}
	if v, _ := c.read(down, g1, "before"); v != "x" {
		t.Fatalf("node %d lost data from before it went down", down)
	}
	// What it applied, as its database holds it (read by offline checks).
	c.mu.Lock()
	stored, err := multiraft.AppliedIndex(c.nodes[down].db, g1)
	c.mu.Unlock()
	if applied := c.group(down, g1).Applied(); err != nil || stored != applied {
		t.Fatalf("AppliedIndex = %d, %v; the member applied %d", stored, err, applied)
	}
	// Below the compacted log's first entry nothing shows that an entry
	// changed no data: the index is its own last command.
	c.mu.Lock()
	last, err := multiraft.LastCommandIndex(c.nodes[down].db, g1, st.FirstIndex-2)
	c.mu.Unlock()
	if err != nil || last != st.FirstIndex-2 {
		t.Fatalf("LastCommandIndex(%d), below the log's first index %d = %d, %v; want itself", st.FirstIndex-2, st.FirstIndex, last, err)
	}
	// It keeps working as a normal member afterwards.
	c.mustPropose(g1, put("after", "y"))
	c.waitConverged(g1, 1, 2, 3)
	if v, _ := c.read(down, g1, "after"); v != "y" {
		t.Fatalf("node %d missed an entry after the snapshot", down)
	}
}

// The byte rule's settings in its tests: small, so that a few hundred
// 4,000-byte entries cross them.
const byteLimit, byteKeep = 64 << 10, 16 << 10

// byteRuleCluster is three members of group 1 with the byte rule at byteLimit
// and byteKeep.
func byteRuleCluster(t *testing.T, seed uint64) *cluster {
	t.Helper()
	c := newCluster(t, seed, 3, func(cfg *multiraft.Config) {
		cfg.LogCompactionBytes = byteLimit
		cfg.LogCompactionKeepBytes = byteKeep
	})
	c.addGroup(g1, 1, 2, 3)
	c.start()
	return c
}

// The byte rule of log compaction (doc.go): a log of large entries is
// truncated long before the count rule would, on every member: a leader's
// past LogCompactionBytes, keeping about LogCompactionKeepBytes; a
// follower's only past 8 times that (it may lead next), keeping about
// LogCompactionBytes.
func TestALogOfLargeEntriesIsTruncatedByItsBytes(t *testing.T) {
	t.Parallel()
	c := byteRuleCluster(t, 9)
	big := strings.Repeat("v", 4000)
	for i := range 135 { // 540 KB, past 8 times byteLimit (524 KB) once: the count rule (10,000) never fires
		c.mustPropose(g1, put(fmt.Sprintf("k%03d", i), big))
	}
	c.waitConverged(g1, 1, 2, 3)
	lead := c.leader(g1)
	for _, id := range []multiraft.NodeID{1, 2, 3} {
		st := c.group(id, g1).Status()
		if st.FirstIndex <= 1 {
			t.Fatalf("node %d: log not truncated after 540 KB of entries (first index %d, applied %d)", id, st.FirstIndex, st.Applied)
		}
		// What is left: the last truncation kept at most its share (plus
		// a batch), and at most the threshold more were applied after it.
		most := uint64(byteLimit + byteKeep)
		if id != lead {
			most = 8*byteLimit + byteLimit
		}
		kept := (st.Applied - st.FirstIndex + 1) * 4000
		if kept > most+8*4000 {
			t.Fatalf("node %d (leader %d): %d applied entries (~%d bytes) left in the log, want at most ~%d", id, lead, st.Applied-st.FirstIndex+1, kept, most)
		}
		if id != lead && kept+2*4000 < byteLimit {
			t.Fatalf("follower %d kept ~%d bytes of applied entries, want about LogCompactionBytes (%d) at least: it may lead next", id, kept, byteLimit)
		}
		if st.SnapshotsRestored != 0 {
			t.Fatalf("node %d restored a snapshot with every member up", id)
		}
	}
	for i := range 135 {
		if v, _ := c.read(2, g1, fmt.Sprintf("k%03d", i)); v != big {
			t.Fatalf("node 2 lacks k%03d", i)
		}
	}
}

// A leader keeps by the byte rule the entries a follower that is down
// lacks, so that it catches up from the log on its return, until the log
// holds 8 times LogCompactionBytes; past that it truncates and the
// follower catches up by snapshot.
func TestALeaderKeepsTheEntriesADownFollowerLacksWithinItsBytes(t *testing.T) {
	t.Parallel()
	c := byteRuleCluster(t, 10)
	lead := c.leader(g1)
	down := lead%3 + 1
	other := 6 - lead - down
	c.mustPropose(g1, put("before", "x"))
	c.waitConverged(g1, 1, 2, 3)
	downHad := c.group(down, g1).Status().LastIndex
	c.crash(down)
	big := strings.Repeat("v", 4000)
	for i := range 60 { // 240 KB: over LogCompactionBytes, under 8 times it
		c.mustPropose(g1, put(fmt.Sprintf("a%03d", i), big))
	}
	c.waitConverged(g1, lead, other)
	if st := c.group(lead, g1).Status(); st.FirstIndex > downHad+1 {
		t.Fatalf("leader truncated through %d, past what the down member had (%d)", st.FirstIndex-1, downHad)
	}
	c.restart(down)
	c.waitConverged(g1, 1, 2, 3)
	if n := c.group(down, g1).Status().SnapshotsRestored; n != 0 {
		t.Fatalf("the member caught up by %d snapshots, want from the log", n)
	}

	// Past 8 times LogCompactionBytes the leader no longer waits.
	downHad = c.group(down, g1).Status().LastIndex
	c.crash(down)
	for i := range 200 { // 800 KB
		c.mustPropose(g1, put(fmt.Sprintf("b%03d", i), big))
	}
	if st := c.group(c.leader(g1), g1).Status(); st.FirstIndex <= downHad+1 {
		t.Fatalf("leader kept ~800 KB of log for a down member (first index %d, it had %d)", st.FirstIndex, downHad)
	}
	c.restart(down)
	c.waitConverged(g1, 1, 2, 3)
	if n := c.group(down, g1).Status().SnapshotsRestored; n == 0 {
		t.Fatalf("the member caught up without a snapshot past the leader's truncation")
	}
	for _, k := range []string{"before", "a059", "b199"} {
		if v, _ := c.read(down, g1, k); v == "" {
			t.Fatalf("node %d lacks %s after catching up", down, k)
		}
	}
}

func TestTwoGroupsOneLosesQuorum(t *testing.T) {
	t.Parallel()
	const g2 multiraft.GroupID = 2
	c := newCluster(t, 8, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.addGroup(g2, 1, 2, 3)
	c.start()
	c.leader(g1)
	c.leader(g2)
	c.mustPropose(g1, put("a", "1"))
	c.mustPropose(g2, put("a", "1"))
	// Group 2 loses two of its three members; group 1, on the same hosts,
	// sharing their workers and fsyncs, does not.
	c.net.IsolateInGroup(g2, 2)
	c.net.IsolateInGroup(g2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stuck := make(chan error, 1)
	go func() {
		_, err := c.propose(ctx, 1, g2, put("b", "lost?"))
		stuck <- err
	}()
	for i := range 20 {
		c.mustPropose(g1, put(fmt.Sprintf("k%d", i), "ok"))
	}
	err := <-stuck
	if err == nil {
		t.Fatalf("group 2 committed without a quorum")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, multiraft.ErrProposalDropped) &&
		!errors.Is(err, multiraft.ErrOutcomeUnknown) {
		t.Fatalf("group 2 proposal: %v", err)
	}
	c.net.Heal()
	c.mustPropose(g2, put("c", "3"))
	c.waitConverged(g2, 1, 2, 3)
	c.waitConverged(g1, 1, 2, 3)
	for _, id := range c.ids() {
		if v, _ := c.read(id, g1, "k19"); v != "ok" {
			t.Fatalf("node %d group 1 lacks k19", id)
		}
		if v, _ := c.read(id, g2, "c"); v != "3" {
			t.Fatalf("node %d group 2 lacks c after healing", id)
		}
	}
}

// jointSwap makes add a voter and remove a learner in one change, which
// raft carries out through a joint configuration.
func jointSwap(add, remove multiraft.NodeID) *raftpb.ConfChangeV2 {
	return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{
		{Type: raftpb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: new(uint64(add))},
		{Type: raftpb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(remove))},
	}}
}
