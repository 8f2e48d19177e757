package multiraft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
)

// The lease tests step their cluster by hand (no driver), so that what a
// member does between two steps is seen; the hosts' lease clock is the
// step count (cluster.stepClock).

func leaseCluster(t *testing.T, seed uint64) *cluster {
	t.Helper()
	c := newCluster(t, seed, 3, func(cfg *multiraft.Config) { cfg.LeaseReads = true })
	c.addGroup(g1, 1, 2, 3)
	return c
}

// stepUntil runs steps until cond holds, at most max of them; it reports
// whether cond held.
func (c *cluster) stepUntil(max int, cond func() bool) bool {
	for range max {
		if cond() {
			return true
		}
		c.runStep()
	}
	return cond()
}

// stepUntilSettled is stepUntil for a cond that a goroutine makes true
// (it waits for a Propose or a ReadIndex): after a step with nothing left
// to do it gives that goroutine a moment before the next step moves the
// clock on.
func (c *cluster) stepUntilSettled(max int, cond func() bool) bool {
	for range max {
		if cond() {
			return true
		}
		if !c.runStep() && c.settle(cond) {
			return true
		}
	}
	return cond()
}

// settle gives goroutines that wait for the cluster (a Propose, a
// ReadIndex) a moment to see what the last step did, before the next step
// moves the clock on; it reports whether cond came to hold.
func (c *cluster) settle(cond func() bool) bool {
	for range 50 {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Microsecond)
	}
	return false
}

// leaderOf returns a member that leads gid in a term above minTerm, or 0.
func (c *cluster) leaderOf(gid multiraft.GroupID, minTerm uint64, among ...multiraft.NodeID) (multiraft.NodeID, multiraft.Status) {
	for _, id := range among {
		if st := c.group(id, gid).Status(); st.Role == "leader" && st.Term > minTerm {
			return id, st
		}
	}
	return 0, multiraft.Status{}
}

// async runs f in a goroutine; the channel gets its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// stepUntilDone steps until ch has an answer (at most max steps).
func (c *cluster) stepUntilDone(t *testing.T, what string, max int, ch <-chan error) {
	t.Helper()
	var err error
	done := c.stepUntilSettled(max, func() bool {
		select {
		case err = <-ch:
			return true
		default:
			return false
		}
	})
	if !done {
		t.Fatalf("%s: no answer after %d steps", what, max)
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (c *cluster) proposeStepping(t *testing.T, id multiraft.NodeID, cmd kvsm.Command) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.stepUntilDone(t, fmt.Sprintf("propose %s=%s on %d", cmd.Key, cmd.Value, id), 2000, async(func() error {
		_, err := c.propose(ctx, id, g1, cmd)
		return err
	}))
}

func (c *cluster) readIndexStepping(t *testing.T, id multiraft.NodeID) {
	t.Helper()
	c.stepUntilDone(t, fmt.Sprintf("read index on %d", id), 2000, async(func() error {
		return c.group(id, g1).ReadIndex(context.Background())
	}))
}

// establishLease elects a leader, writes x=1 and reads through it, which
// gives it a lease; it returns the leader.
func (c *cluster) establishLease(t *testing.T) multiraft.NodeID {
	t.Helper()
	var lead multiraft.NodeID
	if !c.stepUntil(5000, func() bool { lead, _ = c.leaderOf(g1, 0, 1, 2, 3); return lead != 0 }) {
		t.Fatal("no leader")
	}
	c.proposeStepping(t, lead, put("x", "1"))
	c.readIndexStepping(t, lead)
	if st := c.group(lead, g1).Status(); st.LeaseRemaining <= 0 {
		t.Fatalf("leader %d holds no lease after a read index: %+v", lead, st)
	}
	return lead
}

// TestLeaseServesReadsWithoutARound: under its lease a leader answers
// ReadIndex without asking raft for a read index each time.
func TestLeaseServesReadsWithoutARound(t *testing.T) {
	c := leaseCluster(t, 1)
	lead := c.establishLease(t)
	before := c.group(lead, g1).Status()
	for range 50 {
		c.readIndexStepping(t, lead)
	}
	after := c.group(lead, g1).Status()
	if got := after.LeaseReads - before.LeaseReads; got != 50 {
		t.Fatalf("%d of 50 reads served under the lease, want all", got)
	}
	// The only read index rounds are the renewals, at most one per quarter
	// of a lease (7 steps here).
	if rounds := after.ReadIndexes - before.ReadIndexes; rounds >= 25 {
		t.Fatalf("%d read index rounds for 50 reads under a lease", rounds)
	}
	// A follower has no lease: its reads go to the leader.
	f := multiraft.NodeID(1 + int(lead)%3)
	fb := c.group(f, g1).Status()
	c.readIndexStepping(t, f)
	if fa := c.group(f, g1).Status(); fa.LeaseReads != fb.LeaseReads || fa.ReadIndexes != fb.ReadIndexes+1 {
		t.Fatalf("a follower's read: lease reads %d -> %d, read indexes %d -> %d; want a read index",
			fb.LeaseReads, fa.LeaseReads, fb.ReadIndexes, fa.ReadIndexes)
	}
}

// TestLeaseEndsBeforeAnotherLeaderIsElected: a leader cut off from the
// others keeps leading for a while (until CheckQuorum steps it down) while
// the others elect a new one. Its lease must have run out by the step the
// new leader is elected (the lease is shorter than an election timeout,
// the time the voters refuse votes after the leader's last heartbeat);
// and where the old leader still leads when the new one has written x=2,
// it must not answer a read (it would read x=1). The first check fails
// with a lease a few times longer (tried: ×6), in every run.
func TestLeaseEndsBeforeAnotherLeaderIsElected(t *testing.T) {
	windows := 0
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c := leaseCluster(t, seed)
			old := c.establishLease(t)
			oldTerm := c.group(old, g1).Status().Term
			var others []multiraft.NodeID
			for _, id := range []multiraft.NodeID{1, 2, 3} {
				if id != old {
					others = append(others, id)
				}
			}
			c.net.Isolate(old)
			var lead multiraft.NodeID
			var leaseEnd time.Duration // the latest end of the old leader's lease seen
			elected := c.stepUntil(20000, func() bool {
				if st := c.group(old, g1).Status(); st.Role == "leader" {
					leaseEnd = max(leaseEnd, c.stepClock()+st.LeaseRemaining)
				}
				lead, _ = c.leaderOf(g1, oldTerm, others...)
				return lead != 0
			})
			if !elected {
				t.Fatal("the others elected no leader")
			}
			if now := c.stepClock(); now < leaseEnd {
				t.Fatalf("%d was elected with %v of the old leader %d's lease left", lead, leaseEnd-now, old)
			}
			c.proposeStepping(t, lead, put("x", "2"))
			if c.group(old, g1).Status().Role != "leader" {
				return // stepped down already: no read to try
			}
			windows++
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			read := async(func() error { return c.group(old, g1).ReadIndex(ctx) })
			c.stepUntilSettled(8, func() bool {
				select {
				case err := <-read:
					if err == nil {
						v, _ := c.read(old, g1, "x")
						t.Fatalf("the old leader %d answered a read after %d was elected and wrote x=2 (it reads x=%q)", old, lead, v)
					}
					return true
				default:
					return false
				}
			})
		})
	}
	t.Logf("%d of 8 runs found the old leader still leading after the new one wrote, and tried a read there", windows)
}

// TestLeaseEndsWhenLeadershipIsHandedOver: once a leader sends
// MsgTimeoutNow its transferee may campaign at any time in this term, and
// the voters grant that campaign even within a lease; so the leader serves
// no read under its lease while the transfer is under way, and holds no
// lease for the rest of the term, even when the transfer fails.
func TestLeaseEndsWhenLeadershipIsHandedOver(t *testing.T) {
	c := leaseCluster(t, 3)
	lead := c.establishLease(t)
	to := multiraft.NodeID(1 + int(lead)%3)
	c.net.Cut(to, lead) // the transferee hears TimeoutNow, but its campaign never reaches the leader
	c.net.Cut(to, multiraft.NodeID(1+int(to)%3))
	ctx, cancel := context.WithCancel(context.Background())
	transfer := async(func() error { return c.group(lead, g1).TransferLeadership(ctx, to) })
	if !c.stepUntilSettled(200, func() bool { return c.group(lead, g1).Status().LeadTransferee == to }) {
		t.Fatal("the transfer never started")
	}
	during := c.group(lead, g1).Status()
	c.readIndexStepping(t, lead) // well inside the lease taken just before
	st := c.group(lead, g1).Status()
	if st.Role != "leader" || st.LeadTransferee != to {
		t.Fatalf("the leader %d is no longer handing over: %+v", lead, st)
	}
	if st.LeaseReads != during.LeaseReads {
		t.Fatalf("the leader %d served a read under its lease while handing over", lead)
	}
	// Let the transfer time out; the leader leads on in the same term (the
	// transferee campaigns in a higher one, but nobody hears it).
	c.stepUntil(2000, func() bool { return c.group(lead, g1).Status().LeadTransferee == 0 })
	cancel()
	if err := <-transfer; err == nil {
		t.Fatal("the transfer succeeded, though nobody heard the transferee")
	}
	before := c.group(lead, g1).Status()
	if before.Role != "leader" || before.Term != st.Term {
		t.Fatalf("leadership moved on (%s, term %d -> %d), though nobody heard the transferee", before.Role, st.Term, before.Term)
	}
	c.readIndexStepping(t, lead)
	c.readIndexStepping(t, lead)
	after := c.group(lead, g1).Status()
	if after.LeaseReads != before.LeaseReads || after.LeaseRemaining != 0 {
		t.Fatalf("after a handover in term %d the leader served %d reads under a lease (%v left)",
			st.Term, after.LeaseReads-before.LeaseReads, after.LeaseRemaining)
	}
}

// TestARestartedMemberHoldsItsVote: a member that answered the leader's
// heartbeat promised not to vote for anyone else for an election timeout,
// and a restart makes it forget that. So for an election timeout after it
// opens a group it answers no vote request. Here the lease's quorum is the
// leader and member a; member b has been cut off from the leader long
// enough to campaign at any moment; a restarts and hears no more from the
// leader. Without the hold, a votes for b, and b can be elected inside the
// leader's lease.
func TestARestartedMemberHoldsItsVote(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c := leaseCluster(t, seed)
			lead := c.establishLease(t)
			a := multiraft.NodeID(1 + int(lead)%3)
			b := multiraft.NodeID(1 + int(a)%3)
			c.net.Cut(lead, b)
			c.net.Cut(b, lead)
			c.stepUntil(100, func() bool { return false }) // b's election timer runs out: it campaigns, a refuses
			if st := c.group(lead, g1).Status(); st.Role != "leader" {
				t.Skipf("the leader %d stepped down while b was cut off", lead)
			}
			term := c.group(lead, g1).Status().Term
			c.readIndexStepping(t, lead) // a fresh lease from {lead, a}
			leaseEnd := c.stepClock() + c.group(lead, g1).Status().LeaseRemaining
			c.net.Cut(lead, a)
			c.crash(a)
			c.restart(a)
			var elected multiraft.NodeID
			c.stepUntil(400, func() bool { elected, _ = c.leaderOf(g1, term, a, b); return elected != 0 })
			if elected != 0 && c.stepClock() < leaseEnd {
				t.Fatalf("%d was elected with %v of the leader %d's lease left (the restarted %d voted)",
					elected, leaseEnd-c.stepClock(), lead, a)
			}
		})
	}
}

// TestAConfChangeVoidsTheLease: the quorum that confirmed a lease may not
// be a quorum of the new configuration, so an applied conf change ends the
// lease until a read index confirms leadership again.
func TestAConfChangeVoidsTheLease(t *testing.T) {
	c := leaseCluster(t, 5)
	lead := c.establishLease(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.stepUntilDone(t, "add a learner", 2000, async(func() error {
		_, err := c.group(lead, g1).AddLearner(ctx, 4)
		return err
	}))
	if st := c.group(lead, g1).Status(); st.LeaseRemaining != 0 {
		t.Fatalf("the leader holds a lease (%v) after a conf change", st.LeaseRemaining)
	}
	before := c.group(lead, g1).Status()
	c.readIndexStepping(t, lead)
	after := c.group(lead, g1).Status()
	if after.ReadIndexes != before.ReadIndexes+1 || after.LeaseReads != before.LeaseReads || after.LeaseRemaining <= 0 {
		t.Fatalf("the first read after a conf change: read indexes %d -> %d, lease reads %d -> %d, lease %v; want a read index that renews the lease",
			before.ReadIndexes, after.ReadIndexes, before.LeaseReads, after.LeaseReads, after.LeaseRemaining)
	}
}
