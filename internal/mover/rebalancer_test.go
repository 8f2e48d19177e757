package mover

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/sharding"
)

func (c *cluster) setRebalancer(r *metapb.Rebalancer) {
	c.t.Helper()
	c.must(&metapb.Command{Op: &metapb.Command_SetRebalancer{SetRebalancer: &metapb.SetRebalancer{Rebalancer: r}}})
}

func (c *cluster) lock(rsID string) {
	c.t.Helper()
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: rsID, Locked: new(true)}}})
}

func (c *cluster) pin(b uint32) {
	c.t.Helper()
	c.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: b, Pinned: true}}})
}

// moveInZero moves buckets in group 0 alone, through every phase (for
// plans: the replicasets' records are not changed).
func (c *cluster) moveInZero(to string, buckets ...uint32) {
	c.t.Helper()
	c.start(to, buckets...)
	for _, p := range []metapb.Move_Phase{metapb.Move_PHASE_COPY, metapb.Move_PHASE_CLEANUP} {
		for _, b := range buckets {
			c.must(&metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: b, Generation: c.zero.State().Moves[b].GetGeneration(), Phase: p}}})
		}
	}
	for _, b := range buckets {
		c.must(&metapb.Command{Op: &metapb.Command_FinishMove{FinishMove: &metapb.FinishMove{Bucket: b, Generation: c.zero.State().Moves[b].GetGeneration()}}})
	}
}

// startedBuckets returns the buckets of the StartMove steps among cmds
// (with repeats), by destination.
func startedBuckets(cmds []*metapb.Command) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, c := range cmds {
		steps := c.GetMoveSteps().GetSteps()
		if c.GetStartMove() != nil {
			steps = []*metapb.Command{c}
		}
		for _, s := range steps {
			if sm := s.GetStartMove(); sm != nil {
				out[sm.GetTo()] = append(out[sm.GetTo()], sm.GetBucket())
			}
		}
	}
	for _, bs := range out {
		slices.Sort(bs)
	}
	return out
}

// rebalanceRound runs one round of m's rebalancer and returns the buckets
// it started moving, by destination; each of them must be recorded in
// group 0 (no bucket proposed twice, none refused).
func (c *cluster) rebalanceRound(m *Mover) map[string][]uint32 {
	c.t.Helper()
	c.zero.takeProposals()
	before := maps.Clone(c.zero.State().Moves)
	if err := m.rebalance(c.t.Context()); err != nil {
		c.t.Fatal(err)
	}
	started := startedBuckets(c.zero.takeProposals())
	st := c.zero.State()
	n := 0
	for to, bs := range started {
		if len(slices.Compact(slices.Clone(bs))) != len(bs) {
			c.t.Errorf("a bucket proposed twice in a round: %v", bs)
		}
		for _, b := range bs {
			if before[b] != nil {
				c.t.Errorf("bucket %d was chosen while it is moving already (%v)", b, before[b])
			}
			if mv := st.Moves[b]; mv.GetTo() != to {
				c.t.Errorf("bucket %d proposed to %s; group 0 records move %v", b, to, mv)
			}
		}
		n += len(bs)
	}
	if len(st.Moves) != len(before)+n {
		c.t.Errorf("%d moves recorded after the round, %d before and %d started", len(st.Moves), len(before), n)
	}
	return started
}

// counts returns how many buckets were started to each destination.
func counts(started map[string][]uint32) map[string]int {
	out := map[string]int{}
	for to, bs := range started {
		out[to] = len(bs)
	}
	return out
}

// finishInZero ends every recorded move in group 0 alone (switched, if
// not yet, and forgotten).
func (c *cluster) finishInZero() {
	c.t.Helper()
	for b, mv := range c.zero.State().Moves {
		for _, p := range []metapb.Move_Phase{metapb.Move_PHASE_COPY, metapb.Move_PHASE_CLEANUP} {
			if mv.GetPhase() >= p {
				continue
			}
			c.must(&metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: b, Generation: mv.GetGeneration(), Phase: p}}})
		}
		c.must(&metapb.Command{Op: &metapb.Command_FinishMove{FinishMove: &metapb.FinishMove{Bucket: b, Generation: mv.GetGeneration()}}})
	}
}

func TestSettingsFillInDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in               *metapb.Rebalancer
		threshold        float64
		maxSend, maxRecv int
		disabled         bool
	}{
		{nil, DefaultThresholdPercent, DefaultMaxSending, DefaultMaxReceiving, false},
		{&metapb.Rebalancer{}, DefaultThresholdPercent, DefaultMaxSending, DefaultMaxReceiving, false},
		{&metapb.Rebalancer{ThresholdCentiPercent: 250, MaxSending: 5, MaxReceiving: 7, Disabled: true}, 2.5, 5, 7, true},
		{&metapb.Rebalancer{ThresholdCentiPercent: 1}, 0.01, DefaultMaxSending, DefaultMaxReceiving, false},
	} {
		th, ms, mr, d := Settings(tc.in)
		if th != tc.threshold || ms != tc.maxSend || mr != tc.maxRecv || d != tc.disabled {
			t.Errorf("Settings(%v) = %v, %d, %d, %v; want %v, %d, %d, %v", tc.in, th, ms, mr, d, tc.threshold, tc.maxSend, tc.maxRecv, tc.disabled)
		}
	}
}

func TestPlanTargetsByWeight(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1, 2)
	p := MakePlan(c.zero.State())
	if want := map[string]int{"r1": 10, "r2": 10, "r3": 20}; !maps.Equal(p.Targets, want) {
		t.Errorf("targets %v, want %v", p.Targets, want)
	}
	if want := []sharding.Route{{From: "r1", To: "r3", Count: 20}, {From: "r1", To: "r2", Count: 10}}; !slices.Equal(p.Routes, want) {
		t.Errorf("routes %v, want %v", p.Routes, want)
	}
	if p.Disbalance["r1"] != 300 || p.Disbalance["r2"] != 100 || p.MaxDisbalance != 300 {
		t.Errorf("disbalance %v, max %v; want r1 300%%, r2 100%%, max 300%%", p.Disbalance, p.MaxDisbalance)
	}
	// A replicaset of weight 0 that holds buckets: +Inf, all of it goes.
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r1", Weight: new(uint32(0))}}})
	p = MakePlan(c.zero.State())
	if p.Targets["r1"] != 0 || !math.IsInf(p.MaxDisbalance, 1) || p.Targets["r2"]+p.Targets["r3"] != 40 {
		t.Errorf("r1 at weight 0: targets %v, max disbalance %v", p.Targets, p.MaxDisbalance)
	}
}

// A locked replicaset, and one with no member Online (or meant to stay
// so), neither sends nor receives: its target is what it holds, the others
// share the rest by weight, and no route touches it.
func TestPlanLockedAndUnavailableReplicasetsKeepTheirBuckets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		out  func(c *cluster)
	}{
		{"locked", func(c *cluster) { c.lock("r2") }},
		{"offline", func(c *cluster) { c.setGrade("i2", meta.Offline) }},
		{"going offline", func(c *cluster) {
			c.must(&metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{InstanceId: "i2", Variant: meta.Offline}}})
		}},
	} {
		for _, held := range []uint32{0, 4, 20} {
			t.Run(fmt.Sprintf("%s holding %d", tc.name, held), func(t *testing.T) {
				t.Parallel()
				c := newCluster(t, 30, 1, 1, 1)
				if held > 0 {
					c.moveInZero("r2", span(1, held)...)
				}
				tc.out(c)
				p := MakePlan(c.zero.State())
				rest := 30 - int(held)
				want := map[string]int{"r1": rest - rest/2, "r2": int(held), "r3": rest / 2}
				if !maps.Equal(p.Targets, want) {
					t.Errorf("targets %v, want %v", p.Targets, want)
				}
				for _, r := range p.Routes {
					if r.From == "r2" || r.To == "r2" {
						t.Errorf("route %v touches r2", r)
					}
				}
				if got := counts(c.rebalanceRound(c.mover(0))); got["r2"] != 0 {
					t.Errorf("the rebalancer started moves to r2: %v", got)
				}
			})
		}
	}
}

// A move still preparing counts as done (its bucket is on the source in
// group 0's map until the switch); every move in progress counts against
// the quotas of its source and destination.
func TestPlanCountsMovesInProgress(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1)
	c.start("r2", 1, 2, 3, 4, 5)
	check := func(when string) {
		t.Helper()
		p := MakePlan(c.zero.State())
		buckets := map[string]int{}
		for _, g := range p.Groups {
			buckets[g.ID] = g.Buckets
		}
		if buckets["r1"] != 35 || buckets["r2"] != 5 {
			t.Errorf("%s: the plan counts %v, want r1 35, r2 5", when, buckets)
		}
		if p.Sending["r1"] != 5 || p.Receiving["r2"] != 5 || p.Sending["r2"] != 0 || p.Receiving["r1"] != 0 {
			t.Errorf("%s: sending %v, receiving %v", when, p.Sending, p.Receiving)
		}
		if want := []sharding.Route{{From: "r1", To: "r2", Count: 15}}; !slices.Equal(p.Routes, want) {
			t.Errorf("%s: routes %v, want %v", when, p.Routes, want)
		}
	}
	check("preparing")
	for b := uint32(1); b <= 3; b++ {
		c.must(&metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: b, Generation: 2, Phase: metapb.Move_PHASE_COPY}}})
	}
	check("three switched")
}

// The rebalancer starts nothing under the threshold; over it, it moves
// buckets until every replicaset has its target, also below the threshold
// once it started.
func TestRebalancerRespectsTheThreshold(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1)
	c.moveInZero("r2", span(1, 19)...) // r1 21, r2 19: 5% off
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 1000})
	if got := c.rebalanceRound(c.mover(0)); len(got) != 0 {
		t.Fatalf("5%% off, threshold 10%%: started %v", got)
	}
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 400})
	if got := c.rebalanceRound(c.mover(0)); !slices.Equal(got["r2"], []uint32{20}) || len(got) != 1 {
		t.Fatalf("5%% off, threshold 4%%: started %v, want bucket 20 to r2", got)
	}

	c = newCluster(t, 40, 1, 1)
	c.moveInZero("r2", span(1, 10)...) // r1 30, r2 10: 50% off
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 2000, MaxSending: 7})
	m := c.mover(0)
	if got := counts(c.rebalanceRound(m)); got["r2"] != 7 {
		t.Fatalf("50%% off: started %v, want 7 (the sending quota)", got)
	}
	c.finishInZero() // r1 23, r2 17: 15% off, under the threshold
	if got := c.rebalanceRound(c.mover(0)); len(got) != 0 {
		t.Errorf("a new rebalancer 15%% off, threshold 20%%: started %v", got)
	}
	if got := counts(c.rebalanceRound(m)); got["r2"] != 3 {
		t.Errorf("the balancing rebalancer 15%% off: started %v, want the 3 left to the targets", got)
	}
	c.finishInZero()
	if got := c.rebalanceRound(m); len(got) != 0 {
		t.Errorf("balanced: started %v", got)
	}
	// Disabled: nothing, however far off.
	c.moveInZero("r2", span(21, 30)...)
	c.setRebalancer(&metapb.Rebalancer{Disabled: true})
	if got := c.rebalanceRound(c.mover(0)); len(got) != 0 {
		t.Errorf("disabled: started %v", got)
	}
}

// A round starts at most a batch of moves per route: BatchSize, or a
// third of the smaller quota when that is more.
func TestRebalancerStartsAtMostABatchPerRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		quota, batch int
	}{
		{quota: 120, batch: BatchSize}, // a third is 40
		{quota: 450, batch: 150},
	} {
		c := newCluster(t, 600, 1, 1, 1) // r2 and r3 are 200 short each
		c.setRebalancer(&metapb.Rebalancer{MaxSending: uint32(tc.quota), MaxReceiving: uint32(tc.quota)})
		m := c.mover(0)
		m.recordWindow("r2", 0) // no bound but the quotas (receiveRoom)
		m.recordWindow("r3", 0)
		got := counts(c.rebalanceRound(m))
		if want := map[string]int{"r2": tc.batch, "r3": tc.batch}; !maps.Equal(got, want) {
			t.Fatalf("quotas %d, first round: started %v, want %v", tc.quota, got, want)
		}
	}
}

// The quotas count the moves in progress: a source sends at most
// MaxSending at once, a destination receives at most MaxReceiving.
func TestRebalancerKeepsToTheQuotas(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1, 1) // targets r1 13, r2 13, r3 14
	c.setRebalancer(&metapb.Rebalancer{MaxSending: 6, MaxReceiving: 4})
	if got, want := counts(c.rebalanceRound(c.mover(0))), map[string]int{"r3": 4, "r2": 2}; !maps.Equal(got, want) {
		t.Errorf("started %v, want %v", got, want)
	}

	c = newCluster(t, 40, 1, 1, 1)
	c.setRebalancer(&metapb.Rebalancer{MaxSending: 6, MaxReceiving: 4})
	c.start("r2", 1, 2, 3) // in progress: r1 sends 3, r2 receives 3
	if got, want := counts(c.rebalanceRound(c.mover(0))), map[string]int{"r3": 3}; !maps.Equal(got, want) {
		t.Errorf("with 3 moves in progress: started %v, want %v", got, want)
	}
	c.setRebalancer(&metapb.Rebalancer{MaxSending: 100, MaxReceiving: 4})
	if got := counts(c.rebalanceRound(c.mover(0))); got["r2"] != 1 || got["r3"] != 1 {
		t.Errorf("r2 receiving 3 of 4, r3 3 of 4: started %v, want one more each", got)
	}
}

// Pinned buckets, and buckets moving already, are never chosen.
func TestRebalancerSkipsPinnedAndMovingBuckets(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1)
	for b := uint32(1); b <= 5; b++ {
		c.pin(b)
	}
	c.start("r2", 6, 7)
	c.must(&metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: 7, Generation: 2, Phase: metapb.Move_PHASE_COPY}}})
	m := c.mover(0)
	got := c.rebalanceRound(m) // rebalanceRound fails on a moving bucket chosen
	if want := span(8, 25); !slices.Equal(got["r2"], want) {
		t.Errorf("started %v, want %v (the lowest neither pinned nor moving)", got["r2"], want)
	}
	// The next round, nothing changed: the moves started count as done.
	if got := c.rebalanceRound(m); len(got) != 0 {
		t.Errorf("a second round started %v", got)
	}
	// Every bucket of r1 pinned: nothing to move.
	c = newCluster(t, 10, 1, 1)
	for b := uint32(1); b <= 10; b++ {
		c.pin(b)
	}
	if got := c.rebalanceRound(c.mover(0)); len(got) != 0 {
		t.Errorf("every bucket pinned: started %v", got)
	}
}

// A destination's receive window (its copy's answer) bounds the moves
// the rebalancer starts into it, counting its moves not yet copied; one
// no copy has told (or not for windowFresh) gets one batch; a window of
// 0 leaves the quotas alone.
func TestRebalancerKeepsToTheDestinationsReceiveWindow(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 600, 1, 1, 1) // r2 and r3 are 200 short each
	c.setRebalancer(&metapb.Rebalancer{MaxSending: 600, MaxReceiving: 600})
	m := c.mover(0)
	if got, want := counts(c.rebalanceRound(m)), map[string]int{"r2": firstWindow, "r3": firstWindow}; !maps.Equal(got, want) {
		t.Fatalf("no window told: started %v, want %v", got, want)
	}
	c.finishInZero()

	m.recordWindow("r2", 5)
	m.recordWindow("r3", 0)
	// r3: all it is still short of, under the batch.
	if got, want := counts(c.rebalanceRound(m)), map[string]int{"r2": 5, "r3": 200 - firstWindow}; !maps.Equal(got, want) {
		t.Fatalf("windows 5 and none: started %v, want %v", got, want)
	}
	// r2's five are still to be copied: no room.
	if got := counts(c.rebalanceRound(m)); got["r2"] != 0 {
		t.Fatalf("window 5 with 5 moves not yet copied: started %d more into r2", got["r2"])
	}
	// Copied (CLEANUP): they no longer count against the window.
	for _, mv := range slices.Collect(maps.Values(c.zero.State().Moves)) {
		for _, p := range []metapb.Move_Phase{metapb.Move_PHASE_COPY, metapb.Move_PHASE_CLEANUP} {
			c.must(&metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: mv.GetBucket(), Generation: mv.GetGeneration(), Phase: p}}})
		}
	}
	if got := counts(c.rebalanceRound(m)); got["r2"] != 5 {
		t.Fatalf("window 5, the moves before it copied: started %d into r2, want 5", got["r2"])
	}
	c.finishInZero()

	// A window no copy has told again for windowFresh is not known.
	c.zero.nowMs.Add((windowFresh + time.Second).Milliseconds())
	if got := counts(c.rebalanceRound(m)); got["r2"] != firstWindow {
		t.Fatalf("a stale window: started %d into r2, want %d", got["r2"], firstWindow)
	}
}

// The driver records the window a destination's copy answers with.
func TestTheDriverRecordsTheWindowACopyAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 8, 1, 1)
	c.rs["r2"].window = 3
	c.start("r2", 1, 2)
	m := c.mover(0)
	if got := m.receiveRoom("r2", 0); got != firstWindow {
		t.Fatalf("before a copy: room %d, want %d", got, firstWindow)
	}
	c.driveAll(m)
	if got := m.receiveRoom("r2", 1); got != 2 {
		t.Fatalf("after a copy answering window 3, with one not yet copied: room %d, want 2", got)
	}
}
