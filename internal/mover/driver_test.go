package mover

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// A batch of moves of one route goes through every phase: each bucket
// ends on the destination with its tuples, the source's copy gone, group 0
// forgets the moves, and every record change happened once; the batch
// takes each step together (one call per step, not one per bucket).
func TestDriverMovesABatchThroughEveryPhase(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	moved := span(1, 8)
	c.start("r2", moved...)
	var calls atomic.Int64
	for _, rs := range c.rs {
		rs.setIntercept(func(_ context.Context, call rsCall) error {
			if !call.applied && call.method != "SendBuckets" {
				calls.Add(1)
			}
			return nil
		})
	}
	c.zero.takeProposals()
	c.driveAll(c.mover(0))

	c.checkMoved("r1", "r2", 2, moved...)
	c.checkStayed("r1", "r2", 1, span(9, 20)...)
	for _, b := range moved {
		if h := c.rs["r1"].history(b); !slices.Equal(h, []string{"SENDING(2)", "GARBAGE(2)"}) {
			t.Errorf("bucket %d on the source: changes %v", b, h)
		}
		if h := c.rs["r2"].history(b); !slices.Equal(h, []string{"RECEIVING(2)", "copied", "ACTIVE(2)"}) {
			t.Errorf("bucket %d on the destination: changes %v", b, h)
		}
	}
	// Destination RECEIVING, source SENDING, copy, destination ACTIVE,
	// source GARBAGE: five replicaset calls for the batch.
	if n := calls.Load(); n != 5 {
		t.Errorf("%d replicaset calls for a batch of %d moves, want 5", n, len(moved))
	}
	// Group 0: the switch, the cleanup, the finish: three entries.
	if p := c.zero.takeProposals(); len(p) != 3 {
		t.Errorf("%d group-0 entries for the batch, want 3: %v", len(p), p)
	}
	if c.rs["r2"].insertedCount() != int(seedCounts(moved...)[1]+seedCounts(moved...)[2]) {
		t.Errorf("%d tuples inserted on the destination, want %v", c.rs["r2"].insertedCount(), seedCounts(moved...))
	}
}

// A batch larger than CopyStreamBuckets is copied as concurrent streams
// of at most that many buckets, as many at once as the quotas hold, and
// every bucket is moved as in a batch copied by one stream.
func TestDriverCopiesALargeBatchAsConcurrentStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		quota, streams int
	}{
		{quota: 3 * CopyStreamBuckets, streams: 3},
		{quota: 2 * CopyStreamBuckets, streams: 2}, // the third stream waits for a slot
	} {
		c := newCluster(t, 200, 1, 1)
		c.setRebalancer(&metapb.Rebalancer{MaxSending: uint32(tc.quota), MaxReceiving: uint32(tc.quota)})
		moved := span(1, 3*CopyStreamBuckets)
		c.start("r2", moved...)
		var (
			mu       sync.Mutex
			inflight int
			most     int
			sizes    []int
			all      = make(chan struct{}) // closed when tc.streams streams are in
			release  = make(chan struct{}) // closed a while after all
		)
		go func() {
			select { // long enough for a stream over the quota to come in too
			case <-all:
				time.Sleep(300 * time.Millisecond)
			case <-time.After(2 * time.Second): // they came one by one: fail
			}
			close(release)
		}()
		c.rs["r2"].setIntercept(func(ctx context.Context, call rsCall) error {
			if call.method != "ReceiveBuckets" || call.applied {
				return nil
			}
			mu.Lock()
			inflight++
			most = max(most, inflight)
			sizes = append(sizes, len(call.buckets))
			if inflight == tc.streams {
				close(all)
			}
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			inflight--
			mu.Unlock()
			return nil
		})
		c.driveAll(c.mover(0))

		c.checkMoved("r1", "r2", 2, moved...)
		mu.Lock()
		if most != tc.streams {
			t.Errorf("quotas %d: at most %d copy streams at once (sizes %v), want %d", tc.quota, most, sizes, tc.streams)
		}
		for _, n := range sizes {
			if n > CopyStreamBuckets {
				t.Errorf("quotas %d: a copy stream of %d buckets, want at most %d (sizes %v)", tc.quota, n, CopyStreamBuckets, sizes)
			}
		}
		mu.Unlock()
	}
}

// A bucket the source refuses to freeze is aborted on its own: the rest
// of its batch is moved.
func TestDriverAbortsABucketRefusedAtTheFreeze(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2, 3, 4)
	// The source holds bucket 3 at a generation above the move's: the
	// freeze is refused (as after a move group 0 does not know of).
	c.rs["r1"].records[3].Generation = 7
	c.zero.takeProposals()
	c.driveAll(c.mover(0))

	c.checkMoved("r1", "r2", 2, 1, 2, 4)
	st := c.zero.State()
	if st.Buckets[2] != "r1" || st.Moves[3] != nil || st.Generation(3) != 2 {
		t.Errorf("bucket 3: on %s, move %v, generation %d; want on r1, no move, generation 2 used up", st.Buckets[2], st.Moves[3], st.Generation(3))
	}
	if r := c.rs["r1"].record(3); r.GetState() != rspb.BucketState_STATE_ACTIVE || r.GetGeneration() != 7 || c.rs["r1"].count(3) != len(seedTuples(3)) {
		t.Errorf("bucket 3 on the source: %s with %d tuples; want ACTIVE(7), untouched", describe(r), c.rs["r1"].count(3))
	}
	// The destination, never prepared, gets the abort's fence: GARBAGE at
	// the move's generation, so that a RECEIVING of it applied late is
	// refused.
	if r := c.rs["r2"].record(3); r.GetState() != rspb.BucketState_STATE_GARBAGE || r.GetGeneration() != 2 || c.rs["r2"].count(3) != 0 {
		t.Errorf("bucket 3 on the destination: %s with %d tuples, want GARBAGE(2) and none", describe(r), c.rs["r2"].count(3))
	}
	phases := phasesProposed(c.zero.takeProposals())
	if !slices.Equal(phases[3], []metapb.Move_Phase{metapb.Move_PHASE_ABORTING}) {
		t.Errorf("phases proposed for bucket 3: %v, want ABORTING only", phases[3])
	}
	for _, b := range []uint32{1, 2, 4} {
		if slices.Contains(phases[b], metapb.Move_PHASE_ABORTING) {
			t.Errorf("bucket %d of the same batch was aborted too: %v", b, phases[b])
		}
	}
}

// A bucket the destination refuses to prepare is aborted on its own too,
// and the source never freezes it (the destination is prepared first): it
// only takes the move's generation, the abort's fence.
func TestDriverAbortsABucketRefusedByTheDestination(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2, 3)
	c.rs["r2"].setRefuse(func(call rsCall, b uint32) string {
		if b == 2 && call.state == rspb.BucketState_STATE_RECEIVING {
			return "test: no room"
		}
		return ""
	})
	c.driveAll(c.mover(0))
	c.checkMoved("r1", "r2", 2, 1, 3)
	c.checkStayed("r1", "r2", 2, 2)
	if h := c.rs["r1"].history(2); !slices.Equal(h, []string{"ACTIVE(2)"}) {
		t.Errorf("bucket 2 on the source: changes %v, want never frozen, only fenced at the move's generation", h)
	}
	for _, b := range []uint32{1, 3} {
		if h := c.rs["r2"].history(b); len(h) == 0 || h[0] != "RECEIVING(2)" {
			t.Errorf("bucket %d on the destination: changes %v, want RECEIVING first", b, h)
		}
	}
}

// After the switch a refusal (here: the destination's copy and
// activation, twice each) is retried until the move completes: a switched
// bucket is never aborted.
func TestDriverRetriesARefusalAfterTheSwitch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2, 3)
	var refusedCopy, refusedActive atomic.Int64
	c.rs["r2"].setRefuse(func(call rsCall, b uint32) string {
		switch {
		case b == 2 && call.method == "ReceiveBuckets" && refusedCopy.Add(1) <= 2:
			return "test: the copy is refused"
		case b == 3 && call.state == rspb.BucketState_STATE_ACTIVE && refusedActive.Add(1) <= 2:
			return "test: activation refused"
		}
		return ""
	})
	c.zero.takeProposals()
	c.driveAll(c.mover(0))
	c.checkMoved("r1", "r2", 2, 1, 2, 3)
	if refusedCopy.Load() < 3 || refusedActive.Load() < 3 {
		t.Errorf("the refusals were not retried: copy asked %d times, activation %d", refusedCopy.Load(), refusedActive.Load())
	}
	for b, ps := range phasesProposed(c.zero.takeProposals()) {
		if slices.Contains(ps, metapb.Move_PHASE_ABORTING) {
			t.Errorf("bucket %d was aborted after the switch: phases proposed %v", b, ps)
		}
	}
}

// A move stuck before the switch (the destination does not answer) is
// aborted past Config.SwitchTimeout, and the source takes the bucket back.
func TestDriverAbortsAMoveStuckPastTheSwitchTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2)
	c.rs["r2"].setIntercept(func(ctx context.Context, call rsCall) error {
		if call.method == "SetBuckets" && call.state == rspb.BucketState_STATE_RECEIVING {
			<-ctx.Done() // never answers
			return ctx.Err()
		}
		return nil
	})
	c.driveAll(c.mover(switchTimeoutForTest))
	c.checkStayed("r1", "r2", 2, 1, 2)
	if r := c.rs["r1"].record(1); r.GetGeneration() != 2 {
		t.Errorf("bucket 1 on the source: %s, want ACTIVE(2) (frozen, then taken back)", describe(r))
	}
}

// A step call that never answers (its instance stopped and came back with
// the answer lost, say) is given up after StepTimeout and the step taken
// again, in any phase: here the abort's fence of the source. It used to
// hold the move in ABORTING for as long as the driver led group 0 (a
// robustness run, 2026-11-26).
func TestDriverRetriesAStepCallThatNeverAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2)
	var hung atomic.Int64
	c.rs["r1"].setIntercept(func(ctx context.Context, call rsCall) error {
		switch {
		case call.applied || call.method != "SetBuckets":
		case call.state == rspb.BucketState_STATE_SENDING:
			return unavailable // the freeze fails: past the switch timeout, an abort
		case call.state == rspb.BucketState_STATE_ACTIVE && hung.Add(1) == 1:
			<-ctx.Done() // the abort's first fence never answers
			return ctx.Err()
		}
		return nil
	})
	m := New(Config{GroupZero: c.zero, Dial: c.dial, SwitchTimeout: switchTimeoutForTest, StepTimeout: 100 * time.Millisecond,
		Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now: time.Now})
	c.driveAll(m)
	c.checkStayed("r1", "r2", 2, 1, 2)
	if n := hung.Load(); n < 2 {
		t.Errorf("the source's fence was asked %d times, want it asked again after the call that hung", n)
	}
}

// A stale step (one a crashed leader took, repeated with the moves as
// they were) changes nothing: replicasets answer it as done, group 0
// refuses what it no longer allows (an abort after the switch).
func TestDriverStepsAreIdempotent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2, 3)
	m := c.mover(0)
	ctx := t.Context()
	snapshot := func() []*metapb.Move {
		st := c.zero.State()
		return []*metapb.Move{st.Moves[1], st.Moves[2], st.Moves[3]}
	}
	prepare := snapshot()
	if err := m.step(ctx, prepare); err != nil {
		t.Fatal(err)
	}
	copying := snapshot()
	if err := m.step(ctx, copying); err != nil {
		t.Fatal(err)
	}
	cleanup := snapshot()
	for _, mv := range cleanup {
		if mv.GetPhase() != metapb.Move_PHASE_CLEANUP {
			t.Fatalf("after PREPARE and COPY: move %v", mv)
		}
	}
	before := map[string][]string{}
	for _, rs := range []string{"r1", "r2"} {
		for b := uint32(1); b <= 3; b++ {
			before[rs] = append(before[rs], strings.Join(c.rs[rs].history(b), ","))
		}
	}
	inserted := c.rs["r2"].insertedCount()
	// Both steps again, as a new leader would from an older state.
	if err := m.step(ctx, copying); err != nil {
		t.Errorf("a repeated COPY step: %v", err)
	}
	// The stale PREPARE finds the destination past RECEIVING, and tries
	// to abort: group 0 refuses, the moves are switched.
	if err := m.step(ctx, prepare); err == nil || !strings.Contains(err.Error(), "cannot go to PHASE_ABORTING") {
		t.Errorf("a stale PREPARE step after the switch: %v, want group 0's refusal of the abort", err)
	}
	for _, mv := range snapshot() {
		if mv.GetPhase() != metapb.Move_PHASE_CLEANUP {
			t.Errorf("after the repeated steps: move %v, want CLEANUP", mv)
		}
	}
	for _, rs := range []string{"r1", "r2"} {
		for b := uint32(1); b <= 3; b++ {
			if h := strings.Join(c.rs[rs].history(b), ","); h != before[rs][b-1] {
				t.Errorf("bucket %d on %s: changes %s after the repeated steps, %s before", b, rs, h, before[rs][b-1])
			}
		}
	}
	if n := c.rs["r2"].insertedCount(); n != inserted {
		t.Errorf("the repeated copy inserted %d tuples more", n-inserted)
	}
	if err := m.step(ctx, cleanup); err != nil {
		t.Fatal(err)
	}
	// Repeated after the moves are forgotten: the source's GARBAGE is a
	// no-op; group 0 no longer knows the moves.
	if err := m.step(ctx, cleanup); err == nil || !strings.Contains(err.Error(), "no move of bucket") {
		t.Errorf("a repeated CLEANUP step: %v, want group 0's refusal of the finish", err)
	}
	c.checkMoved("r1", "r2", 2, 1, 2, 3)
}

// A new group-0 leader (a new Mover) resumes each move from the phase
// recorded when the old one stopped, after any of its steps: every bucket
// ends on the destination with its tuples once, each record change made
// once.
func TestDriverResumesUnderANewLeader(t *testing.T) {
	t.Parallel()
	type stop struct {
		name string
		rs   string // the replicaset whose call is the last (""; group 0)
		// state or method of the call, or phase of group 0's entry
		state  rspb.BucketState_State
		method string
		phase  metapb.Move_Phase
		finish bool
	}
	stops := []stop{
		{name: "source sending", rs: "r1", state: rspb.BucketState_STATE_SENDING},
		{name: "destination receiving", rs: "r2", state: rspb.BucketState_STATE_RECEIVING},
		{name: "switched", phase: metapb.Move_PHASE_COPY},
		{name: "copied", rs: "r2", method: "ReceiveBuckets"},
		{name: "destination active", rs: "r2", state: rspb.BucketState_STATE_ACTIVE},
		{name: "cleanup marked", phase: metapb.Move_PHASE_CLEANUP},
		{name: "source garbage", rs: "r1", state: rspb.BucketState_STATE_GARBAGE},
		{name: "finished", finish: true},
	}
	for _, s := range stops {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 10, 1, 1)
			moved := []uint32{2, 3, 5, 6}
			c.start("r2", moved...)
			stopped := atomic.Bool{}
			// The old leader's last step is applied; its answer is lost and
			// the leader is gone.
			crash := func() error {
				if stopped.CompareAndSwap(false, true) {
					c.zero.leads.Store(false)
					return unavailable
				}
				return nil
			}
			if s.rs != "" {
				c.rs[s.rs].setIntercept(func(_ context.Context, call rsCall) error {
					if call.applied && (s.method != "" && call.method == s.method || s.method == "" && call.method == "SetBuckets" && call.state == s.state) {
						return crash()
					}
					return nil
				})
			} else {
				c.zero.setAfter(func(cmd *metapb.Command, _ meta.Result) error {
					for _, st := range cmd.GetMoveSteps().GetSteps() {
						if s.finish && st.GetFinishMove() != nil || st.GetSetMovePhase().GetPhase() == s.phase && s.phase != 0 {
							return crash()
						}
					}
					return nil
				})
			}
			c.driveAll(c.mover(0))
			if !stopped.Load() {
				t.Fatal("the old leader never got to the step")
			}
			c.rs["r1"].setIntercept(nil)
			c.rs["r2"].setIntercept(nil)
			c.zero.setAfter(nil)
			c.zero.leads.Store(true)
			c.driveAll(c.mover(0))

			c.checkMoved("r1", "r2", 2, moved...)
			for _, b := range moved {
				if h := c.rs["r1"].history(b); !slices.Equal(h, []string{"SENDING(2)", "GARBAGE(2)"}) {
					t.Errorf("bucket %d on the source: changes %v", b, h)
				}
				if h := c.rs["r2"].history(b); !slices.Equal(h, []string{"RECEIVING(2)", "copied", "ACTIVE(2)"}) {
					t.Errorf("bucket %d on the destination: changes %v", b, h)
				}
			}
			want := seedCounts(moved...)
			if n := c.rs["r2"].insertedCount(); n != int(want[1]+want[2]) {
				t.Errorf("%d tuples inserted on the destination, want %d", n, want[1]+want[2])
			}
		})
	}
}

// A failure before the switch that is not a refusal (a replicaset's
// answer lost, its leader changing) is retried while the switch timeout
// has not passed: the moves complete, none is aborted.
func TestDriverRetriesAFailureBeforeTheSwitch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2, 3)
	var sourceFailed, destinationFailed atomic.Bool
	c.rs["r1"].setIntercept(func(_ context.Context, call rsCall) error {
		if !call.applied && call.state == rspb.BucketState_STATE_SENDING && sourceFailed.CompareAndSwap(false, true) {
			return unavailable // before applying it
		}
		return nil
	})
	c.rs["r2"].setIntercept(func(_ context.Context, call rsCall) error {
		if call.applied && call.state == rspb.BucketState_STATE_RECEIVING && destinationFailed.CompareAndSwap(false, true) {
			return unavailable // applied, the answer lost
		}
		return nil
	})
	c.zero.takeProposals()
	c.driveAll(c.mover(time.Minute))
	for b, ps := range phasesProposed(c.zero.takeProposals()) {
		if slices.Contains(ps, metapb.Move_PHASE_ABORTING) {
			t.Errorf("bucket %d was aborted for a failure within the switch timeout: phases proposed %v", b, ps)
		}
	}
	c.checkMoved("r1", "r2", 2, 1, 2, 3)
	if !sourceFailed.Load() || !destinationFailed.Load() {
		t.Errorf("failures injected: source %v, destination %v; want both", sourceFailed.Load(), destinationFailed.Load())
	}
}

// loseFreezeAnswers loses every answer of source r1 to a freeze (SENDING)
// it applied, and at the passAt-th makes the switch timeout (a minute at
// most, in these tests) pass on group 0's clock. It returns how many were
// lost.
func (c *cluster) loseFreezeAnswers(passAt int64) *atomic.Int64 {
	var lost atomic.Int64
	c.rs["r1"].setIntercept(func(_ context.Context, call rsCall) error {
		if !call.applied || call.state != rspb.BucketState_STATE_SENDING {
			return nil
		}
		if lost.Add(1) == passAt {
			c.zero.nowMs.Add((time.Minute + time.Millisecond).Milliseconds())
		}
		return unavailable
	})
	return &lost
}

// A source whose answers keep getting lost after it froze the buckets
// (failing fast: not a hang the switch timeout's context cuts short)
// holds them frozen only until the moves are older than the switch
// timeout (by Config.Now): then they are aborted and the source takes
// them back.
func TestDriverAbortsAMoveFailingPastTheSwitchTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2)
	asked := c.loseFreezeAnswers(3)
	c.driveAll(c.mover(time.Minute))
	if n := asked.Load(); n != 3 {
		t.Errorf("the source was asked %d times, want 3: retried within the switch timeout, aborted past it", n)
	}
	c.checkStayed("r1", "r2", 2, 1, 2)
	if h := c.rs["r1"].history(1); !slices.Equal(h, []string{"SENDING(2)", "ACTIVE(2)"}) {
		t.Errorf("bucket 1 on the source: changes %v, want frozen then taken back", h)
	}
}

// A prepare that gets through only past the switch timeout (here the
// source's freeze answers just after it) does not switch: the source has
// refused the buckets' writes since the freeze, and the timeout bounds
// that. The moves are aborted and the source takes the buckets back.
func TestDriverAbortsAPrepareDonePastTheSwitchTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2)
	c.rs["r1"].setIntercept(func(_ context.Context, call rsCall) error {
		if call.applied && call.state == rspb.BucketState_STATE_SENDING {
			c.zero.nowMs.Add((time.Minute + time.Millisecond).Milliseconds()) // the freeze took past the timeout
		}
		return nil
	})
	c.driveAll(c.mover(time.Minute))
	c.checkStayed("r1", "r2", 2, 1, 2)
	if h := c.rs["r1"].history(1); !slices.Equal(h, []string{"SENDING(2)", "ACTIVE(2)"}) {
		t.Errorf("bucket 1 on the source: changes %v, want frozen then taken back", h)
	}
	for b, ps := range phasesProposed(c.zero.takeProposals()) {
		if slices.Contains(ps, metapb.Move_PHASE_COPY) {
			t.Errorf("bucket %d was switched past the switch timeout: phases proposed %v", b, ps)
		}
	}
}

// A new leader resumes an abort recorded by the old one (ABORTING in
// group 0, the replicasets not told yet): the source takes the bucket
// back, once.
func TestDriverResumesAnAbortUnderANewLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 10, 1, 1)
	c.start("r2", 3, 4)
	// The source freezes the buckets, its answer is lost, and the switch
	// timeout passes: the old leader records the abort and loses group 0.
	c.loseFreezeAnswers(1)
	c.zero.setAfter(func(cmd *metapb.Command, _ meta.Result) error {
		for _, s := range cmd.GetMoveSteps().GetSteps() {
			if s.GetSetMovePhase().GetPhase() == metapb.Move_PHASE_ABORTING {
				c.zero.leads.Store(false)
				return unavailable
			}
		}
		return nil
	})
	c.driveAll(c.mover(0))
	for _, b := range []uint32{3, 4} {
		if mv := c.zero.State().Moves[b]; mv.GetPhase() != metapb.Move_PHASE_ABORTING {
			t.Fatalf("bucket %d after the old leader: move %v, want ABORTING", b, mv)
		}
		if r := c.rs["r1"].record(b); r.GetState() != rspb.BucketState_STATE_SENDING {
			t.Fatalf("bucket %d on the source after the old leader: %s, want SENDING", b, describe(r))
		}
	}
	c.zero.setAfter(nil)
	c.rs["r1"].setIntercept(nil)
	c.zero.leads.Store(true)
	c.driveAll(c.mover(0))
	c.checkStayed("r1", "r2", 2, 3, 4)
	for _, b := range []uint32{3, 4} {
		if h := c.rs["r1"].history(b); !slices.Equal(h, []string{"SENDING(2)", "ACTIVE(2)"}) {
			t.Errorf("bucket %d on the source: changes %v", b, h)
		}
	}
}

// A PREPARE step whose call failed can still be in its replicaset's log
// and be applied after the move was aborted (its leader was stopped with
// the entry proposed; the next leader commits it). The abort fences both
// sides at the move's generation, so the late step is refused: the
// destination never holds a RECEIVING record of an aborted move (which
// refused every later move of the bucket there), the source never a
// SENDING one (a bucket frozen for good). A robustness run with moves
// and kill -9 found the destination's case (2026-11-23).
func TestDriverAbortFencesAPrepareStepAppliedLate(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"destination", "source"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 20, 1, 1)
			c.start("r2", 1, 2)
			rsID, state := "r2", rspb.BucketState_STATE_RECEIVING
			if side == "source" {
				rsID, state = "r1", rspb.BucketState_STATE_SENDING
			}
			var late []*rspb.SetBucket
			var asked atomic.Int64
			c.rs[rsID].setIntercept(func(_ context.Context, call rsCall) error {
				if call.applied || call.state != state {
					return nil
				}
				if asked.Add(1) == 1 {
					c.zero.nowMs.Add((time.Minute + time.Millisecond).Milliseconds()) // the switch timeout passes
				}
				return unavailable
			})
			c.driveAll(c.mover(time.Minute))
			c.checkStayed("r1", "r2", 2, 1, 2)
			// What the failed call asked for, as its log would still hold
			// it, applied now.
			for _, b := range []uint32{1, 2} {
				peer := "r1"
				if side == "source" {
					peer = "r2"
				}
				late = append(late, &rspb.SetBucket{Bucket: b, State: state, Generation: 2, Peer: peer})
			}
			c.rs[rsID].setIntercept(nil)
			resp, err := c.rs[rsID].SetBuckets(t.Context(), &rspb.SetBucketsRequest{ReplicasetId: rsID, Steps: late})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range resp.GetResults() {
				if r.GetRefused() == "" {
					t.Errorf("bucket %d: the late %s step was applied after the abort: %s", late[i].GetBucket(), stateName(state), describe(r.GetRecord()))
				}
			}
			for _, b := range []uint32{1, 2} {
				src, dst := c.rs["r1"].record(b), c.rs["r2"].record(b)
				if src.GetState() != rspb.BucketState_STATE_ACTIVE || dst.GetState() != rspb.BucketState_STATE_GARBAGE || dst.GetGeneration() != 2 {
					t.Errorf("bucket %d: source %s, destination %s; want ACTIVE and the fence GARBAGE(2)", b, describe(src), describe(dst))
				}
			}
			// The next move of the bucket goes through.
			c.zero.takeProposals()
			c.start("r2", 1)
			c.driveAll(c.mover(time.Minute))
			c.checkMoved("r1", "r2", 3, 1)
		})
	}
}

// An abort gives the bucket back to its source before it fences the
// destination: a destination that does not answer keeps the move in
// ABORTING, not the bucket frozen.
func TestDriverAbortUnfreezesTheSourceWhileTheDestinationIsDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.start("r2", 1, 2)
	var asked, fenceAsked atomic.Int64
	var unfrozen atomic.Bool
	c.rs["r2"].setIntercept(func(_ context.Context, call rsCall) error {
		if call.applied {
			return nil
		}
		switch call.state {
		case rspb.BucketState_STATE_RECEIVING:
			if asked.Add(1) == 1 {
				c.zero.nowMs.Add((time.Minute + time.Millisecond).Milliseconds()) // the switch timeout passes
			}
			return unavailable
		case rspb.BucketState_STATE_GARBAGE:
			if fenceAsked.Add(1) < 3 {
				if r := c.rs["r1"].record(1); r.GetState() == rspb.BucketState_STATE_ACTIVE {
					unfrozen.Store(true)
				}
				return unavailable
			}
		}
		return nil
	})
	c.driveAll(c.mover(time.Minute))
	if !unfrozen.Load() {
		t.Error("the source stayed frozen while the destination did not answer the abort")
	}
	c.checkStayed("r1", "r2", 2, 1, 2)
	for _, b := range []uint32{1, 2} {
		if r := c.rs["r2"].record(b); r.GetState() != rspb.BucketState_STATE_GARBAGE || r.GetGeneration() != 2 {
			t.Errorf("bucket %d on the destination: %s, want the fence GARBAGE(2)", b, describe(r))
		}
	}
}
