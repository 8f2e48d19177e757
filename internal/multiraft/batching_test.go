package multiraft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// TestALeaderHoldsProposalsWhileEntriesAreInFlight steps a cluster by hand
// through "Proposal batching" (doc.go): with the followers' answers cut, a
// leader appends a first proposal (nothing was in flight), holds the next
// ones while it is uncommitted, appends them together at a tick, or at
// once when enough are queued; healed, everything commits. With
// Config.DisableProposalBatching every proposal is appended when it comes,
// which shows that the rule, not the cut, held them.
func TestALeaderHoldsProposalsWhileEntriesAreInFlight(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("disabled=%v", disabled), func(t *testing.T) {
			c := newCluster(t, 1, 3, func(cfg *multiraft.Config) { cfg.DisableProposalBatching = disabled })
			c.addGroup(g1, 1, 2, 3)
			var lead multiraft.NodeID
			if !c.stepUntil(5000, func() bool { lead, _ = c.leaderOf(g1, 0, 1, 2, 3); return lead != 0 }) {
				t.Fatal("no leader")
			}
			c.proposeStepping(t, lead, put("x", "1")) // the term's first entry is committed too
			leader := c.group(lead, g1)
			c.ticksEvery = 1 << 40 // no tick from here on: a tick releases held proposals (3)
			for _, f := range []multiraft.NodeID{1, 2, 3} {
				if f != lead {
					c.net.Cut(f, lead) // the followers' answers are lost: nothing commits
				}
			}
			base := leader.Status().LastIndex
			last := func() uint64 { return leader.Status().LastIndex - base }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			propose := func(k string) <-chan error {
				return async(func() error { _, err := c.propose(ctx, lead, g1, put(k, "v")); return err })
			}

			var done []<-chan error
			done = append(done, propose("a"))
			if !c.stepUntilSettled(100, func() bool { return last() == 1 }) {
				t.Fatalf("the first proposal was not appended: %d new entries", last())
			}
			done = append(done, propose("b"), propose("c"))
			if !c.settle(func() bool { return leader.QueuedProposals() == 2 || last() == 3 }) {
				// settle waits 50 short sleeps at most: wait on.
				waitFor(t, 10*time.Second, "b and c queued", func() bool { return leader.QueuedProposals() == 2 || last() == 3 })
			}
			if disabled {
				if !c.stepUntilSettled(100, func() bool { return last() == 3 }) {
					t.Fatalf("batching off: %d new entries, want 3", last())
				}
			} else {
				c.stepUntilSettled(20, func() bool { return last() != 1 })
				if n := last(); n != 1 {
					t.Fatalf("%d new entries while the first is uncommitted, want 1 (b and c held)", n)
				}
				// (3) A tick appends them, together, commit or not.
				st0 := leader.Status()
				c.nodes[lead].host.Tick()
				c.runStep()
				if n := last(); n != 3 {
					t.Fatalf("%d new entries after a tick, want 3", n)
				}
				if st := leader.Status(); st.ProposalBatches != st0.ProposalBatches+1 || st.Proposals != st0.Proposals+2 {
					t.Fatalf("after the tick: %d batches, %d proposals; want %d and %d (b and c in one)",
						st.ProposalBatches, st.Proposals, st0.ProposalBatches+1, st0.Proposals+2)
				}
				// (4) Enough queued proposals go at once.
				for i := range 255 {
					done = append(done, propose(fmt.Sprintf("k%d", i)))
				}
				waitFor(t, 10*time.Second, "255 proposals queued", func() bool { return leader.QueuedProposals() == 255 })
				c.stepUntilSettled(20, func() bool { return last() != 3 })
				if n := last(); n != 3 {
					t.Fatalf("%d new entries with 255 proposals queued, want 3 (held)", n)
				}
				done = append(done, propose("k255"))
				if !c.stepUntilSettled(1000, func() bool { return last() == 3+256 }) {
					t.Fatalf("%d new entries with 256 queued, want %d", last(), 3+256)
				}
			}

			c.net.Heal()
			c.ticksEvery = 4 // the lost answers are sent again at heartbeats
			for i, ch := range done {
				c.stepUntilDone(t, fmt.Sprintf("proposal %d", i), 5000, ch)
			}
			if st := leader.Status(); st.Commit != st.LastIndex {
				t.Fatalf("commit %d, last index %d after the heal", st.Commit, st.LastIndex)
			}
			if disabled {
				return
			}
			// (2) The commit of the batch in flight releases what was held,
			// in the round that learns of it: no tick needed.
			c.ticksEvery = 1 << 40
			base = leader.Status().LastIndex
			d := propose("d")
			waitFor(t, 10*time.Second, "d queued", func() bool { return leader.QueuedProposals() == 1 })
			if !c.stepUntil(10, func() bool { return last() == 1 }) { // appended, its MsgApps not yet delivered
				t.Fatalf("d was not appended: %d new entries", last())
			}
			e, f := propose("e"), propose("f")
			waitFor(t, 10*time.Second, "e and f queued", func() bool { return leader.QueuedProposals() == 2 })
			st0 := leader.Status()
			if st0.Commit >= base+1 {
				t.Fatalf("d committed (commit %d) before e and f were queued: nothing was in flight", st0.Commit)
			}
			if !c.stepUntilSettled(100, func() bool { return last() == 3 }) {
				t.Fatalf("%d new entries after d's commit with no tick, want 3 (e and f released)", last())
			}
			if st := leader.Status(); st.ProposalBatches != st0.ProposalBatches+1 || st.Proposals != st0.Proposals+2 {
				t.Fatalf("after d's commit: %d batches, %d proposals; want %d and %d (e and f in one)",
					st.ProposalBatches, st.Proposals, st0.ProposalBatches+1, st0.Proposals+2)
			}
			for i, ch := range []<-chan error{d, e, f} {
				c.stepUntilDone(t, fmt.Sprintf("proposal %c", "def"[i]), 1000, ch)
			}
		})
	}
}
