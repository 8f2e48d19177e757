package meta

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// twoReplicasets boots a cluster of r1 (every bucket) and r2.
func twoReplicasets(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	f.must(joinCmd(joinReq("b", "", nil)))
	f.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}})
	if f.sm.State().Replicasets["r2"] == nil {
		t.Fatal("the second instance did not get a replicaset of its own")
	}
	return f
}

func moveCmd(b uint32, to string) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{Bucket: b, To: to, Reason: "test"}}}
}

func phaseCmd(b uint32, gen uint64, p metapb.Move_Phase) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{Bucket: b, Generation: gen, Phase: p}}}
}

func finishCmd(b uint32, gen uint64) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_FinishMove{FinishMove: &metapb.FinishMove{Bucket: b, Generation: gen}}}
}

func TestAMoveSwitchesTheBucketOnlyAtCopy(t *testing.T) {
	f := twoReplicasets(t)
	mv := f.must(moveCmd(7, "r2")).Move
	if mv.GetFrom() != "r1" || mv.GetGeneration() != 2 || mv.GetPhase() != metapb.Move_PHASE_PREPARE {
		t.Fatalf("started %v", mv)
	}
	if f.sm.State().Buckets[6] != "r1" {
		t.Fatal("the bucket switched at PREPARE")
	}
	f.refused(moveCmd(7, "r2"), "already moving")
	v := f.sm.State().Props.GetShardingVersion()
	f.must(phaseCmd(7, 2, metapb.Move_PHASE_COPY))
	if st := f.sm.State(); st.Buckets[6] != "r2" || st.Props.GetShardingVersion() != v+1 {
		t.Fatalf("after COPY: bucket on %s, sharding version %d", st.Buckets[6], st.Props.GetShardingVersion())
	}
	// Once switched, the move can no longer be aborted.
	f.refused(phaseCmd(7, 2, metapb.Move_PHASE_ABORTING), "cannot go to PHASE_ABORTING")
	f.refused(finishCmd(7, 2), "not finished")
	f.must(phaseCmd(7, 2, metapb.Move_PHASE_CLEANUP))
	f.must(phaseCmd(7, 2, metapb.Move_PHASE_CLEANUP)) // repeated: no-op
	f.must(finishCmd(7, 2))
	if st := f.sm.State(); st.Moves[7] != nil || st.Generation(7) != 2 {
		t.Fatalf("after finish: move %v, generation %d", st.Moves[7], st.Generation(7))
	}
	// The next move of the bucket goes one generation up.
	if mv := f.must(moveCmd(7, "r1")).Move; mv.GetGeneration() != 3 || mv.GetFrom() != "r2" {
		t.Fatalf("second move %v", mv)
	}
}

func TestAnAbortedMoveUsesItsGenerationUp(t *testing.T) {
	f := twoReplicasets(t)
	f.must(moveCmd(9, "r2"))
	f.must(phaseCmd(9, 2, metapb.Move_PHASE_ABORTING))
	f.refused(phaseCmd(9, 2, metapb.Move_PHASE_COPY), "cannot go to PHASE_COPY")
	f.must(finishCmd(9, 2))
	st := f.sm.State()
	if st.Buckets[8] != "r1" || st.Generation(9) != 2 {
		t.Fatalf("after abort: bucket on %s, generation %d", st.Buckets[8], st.Generation(9))
	}
}

func TestMovesRespectPinsAndLocks(t *testing.T) {
	f := twoReplicasets(t)
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 3, Pinned: true}}})
	f.refused(moveCmd(3, "r2"), "pinned to r1")
	// Asked to stay where it is, a pinned bucket is refused for that.
	f.refused(moveCmd(3, "r1"), "bucket 3 is on r1 already")
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 3}}})
	locked := true
	f.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Locked: &locked}}})
	f.refused(moveCmd(3, "r2"), "r2 is locked")
	f.refused(moveCmd(3, "r1"), "on r1 already")
	f.refused(moveCmd(3, "r9"), `no replicaset "r9" in service (replicasets in service: r1, r2)`)
	f.refused(moveCmd(3001, "r2"), "outside [1, 3000]")
}

func TestMovesSurviveReload(t *testing.T) {
	f := twoReplicasets(t)
	f.must(moveCmd(1, "r2"))
	f.must(moveCmd(2, "r2"))
	f.must(phaseCmd(2, 2, metapb.Move_PHASE_COPY))
	f.must(phaseCmd(2, 2, metapb.Move_PHASE_CLEANUP))
	f.must(finishCmd(2, 2))
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 5, Pinned: true}}})
	re := New()
	if err := re.Load(f.db); err != nil {
		t.Fatal(err)
	}
	st := re.State()
	if st.Moves[1].GetPhase() != metapb.Move_PHASE_PREPARE || st.Generation(2) != 2 || !st.Pinned[5] || st.Buckets[1] != "r2" {
		t.Fatalf("reloaded: moves %v, gen %d, pinned %v, bucket 2 on %s", st.Moves, st.Generation(2), st.Pinned, st.Buckets[1])
	}
}

// An operator's weight is marked so that the governor leaves it alone
// (governor step 6 raises only weights no operator set).
func TestAnOperatorsWeightIsMarked(t *testing.T) {
	f := twoReplicasets(t)
	f.refused(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", WeightByOperator: true}}},
		"weight_by_operator without a weight")
	if f.sm.State().Replicasets["r2"].GetWeightByOperator() {
		t.Fatal("a weight the governor set is marked as the operator's")
	}
	f.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Weight: new(uint32(0)), WeightByOperator: true}}})
	rs := f.sm.State().Replicasets["r2"]
	if rs.GetWeight() != 0 || !rs.GetWeightByOperator() {
		t.Fatalf("after the operator's weight 0: %v", rs)
	}
	// A later governor change (no mark) keeps the mark.
	f.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Weight: new(uint32(0)), Expelled: new(true)}}})
	if !f.sm.State().Replicasets["r2"].GetWeightByOperator() {
		t.Fatal("the operator's mark was lost")
	}
	f.refused(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r9", Locked: new(true)}}},
		`no replicaset "r9" in the cluster (replicasets in service: r1)`)
}

func stepsCmd(steps ...*metapb.Command) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_MoveSteps{MoveSteps: &metapb.MoveSteps{Steps: steps}}}
}

// A batch of move steps is one entry whose steps are applied each on its
// own: a refused step has its refusal and the others go on; the state
// published before the batch is not changed by it (the batch copies what
// it changes once, not once per step).
func TestMoveStepsApplyEachStepOnItsOwn(t *testing.T) {
	f := twoReplicasets(t)
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 3, Pinned: true}}})
	before := f.sm.State()
	res := f.must(stepsCmd(moveCmd(1, "r2"), moveCmd(2, "r2"), moveCmd(3, "r2"), moveCmd(1, "r2"), phaseCmd(9, 2, metapb.Move_PHASE_COPY),
		&metapb.Command{Op: &metapb.Command_BumpSharding{BumpSharding: &metapb.BumpSharding{}}}))
	if len(res.Steps) != 6 {
		t.Fatalf("%d results for 6 steps", len(res.Steps))
	}
	for i, want := range []string{"", "", "pinned to r1", "already moving", "no move of bucket 9", "not a move step"} {
		got := ""
		if res.Steps[i].Err != nil {
			got = res.Steps[i].Err.Error()
		}
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("step %d: refusal %q, want %q", i+1, got, want)
		}
	}
	if res.Steps[0].Move.GetGeneration() != 2 || res.Steps[1].Move.GetBucket() != 2 {
		t.Fatalf("started %v and %v", res.Steps[0].Move, res.Steps[1].Move)
	}
	if len(before.Moves) != 0 {
		t.Fatalf("the state published before the batch changed: moves %v", before.Moves)
	}
	// The switch and the end of both moves, a batch each.
	v := f.sm.State().Props.GetShardingVersion()
	f.must(stepsCmd(phaseCmd(1, 2, metapb.Move_PHASE_COPY), phaseCmd(2, 2, metapb.Move_PHASE_COPY)))
	switched := f.sm.State()
	if switched.Buckets[0] != "r2" || switched.Buckets[1] != "r2" || switched.Props.GetShardingVersion() != v+2 {
		t.Fatalf("after the switch: buckets 1, 2 on %s, %s; sharding version %d (was %d)", switched.Buckets[0], switched.Buckets[1], switched.Props.GetShardingVersion(), v)
	}
	f.must(stepsCmd(phaseCmd(1, 2, metapb.Move_PHASE_CLEANUP), phaseCmd(2, 2, metapb.Move_PHASE_CLEANUP)))
	f.must(stepsCmd(finishCmd(1, 2), finishCmd(2, 2)))
	st := f.sm.State()
	if len(st.Moves) != 0 || st.Generation(1) != 2 || st.Generation(2) != 2 {
		t.Fatalf("after the batch finish: moves %v, generations %d, %d", st.Moves, st.Generation(1), st.Generation(2))
	}
	if len(switched.Moves) != 2 || len(switched.Generations) != 0 {
		t.Fatalf("an earlier state changed: moves %v, generations %v", switched.Moves, switched.Generations)
	}
	re := New()
	if err := re.Load(f.db); err != nil {
		t.Fatal(err)
	}
	if st := re.State(); st.Buckets[0] != "r2" || st.Generation(2) != 2 || len(st.Moves) != 0 {
		t.Fatalf("reloaded: bucket 1 on %s, generation of 2 %d, moves %v", st.Buckets[0], st.Generation(2), st.Moves)
	}
}

// The command that unpins buckets names each (the first 20 of many) and
// runs as printed.
func TestUnpinCommand(t *testing.T) {
	var many []uint32
	for b := uint32(1); b <= 23; b++ {
		many = append(many, b)
	}
	for _, tc := range []struct {
		buckets []uint32
		want    string
	}{
		{[]uint32{5}, "shardkit bucket unpin 5"},
		{[]uint32{4, 17, 300}, "shardkit bucket unpin 4 17 300"},
		{many, "shardkit bucket unpin 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20, then the 3 more pinned buckets that `shardkit rebalance status --format json` lists as pinned_buckets"},
	} {
		if got := UnpinCommand(tc.buckets); got != tc.want {
			t.Errorf("UnpinCommand(%v) = %q, want %q", tc.buckets, got, tc.want)
		}
	}
	if got := Count(1, "bucket") + ", " + Count(0, "bucket") + ", " + Count(uint32(2), "tuple"); got != "1 bucket, 0 buckets, 2 tuples" {
		t.Errorf("Count: %q", got)
	}
}

// PinnedOn lists a replicaset's pinned buckets, lowest first, wherever
// group 0 places them now.
func TestPinnedOn(t *testing.T) {
	f := twoReplicasets(t)
	for _, b := range []uint32{9, 2, 7} {
		f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: b, Pinned: true}}})
	}
	f.must(moveCmd(4, "r2"))
	f.must(phaseCmd(4, 2, metapb.Move_PHASE_COPY))
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 4, Pinned: true}}})
	st := f.sm.State()
	if got := st.PinnedOn("r1"); !slices.Equal(got, []uint32{2, 7, 9}) {
		t.Errorf("r1: %v", got)
	}
	if got := st.PinnedOn("r2"); !slices.Equal(got, []uint32{4}) {
		t.Errorf("r2: %v", got)
	}
}

// A SetRebalancer naming fields sets those alone on what is in force; one
// naming none replaces every setting. A reshard's pause holds only while
// the rebalancer is off, and an operator's own switch (disabled named
// without the pause) ends it.
func TestMergeRebalancer(t *testing.T) {
	cur := &metapb.Rebalancer{Disabled: true, PausedByReshard: true, ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 1 << 20}
	for _, c := range []struct {
		name string
		set  *metapb.SetRebalancer
		want *metapb.Rebalancer
	}{
		{"a copy rate alone", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{CopyBytesPerS: 4 << 20}, Fields: []string{"copy_bytes_per_s"}},
			&metapb.Rebalancer{Disabled: true, PausedByReshard: true, ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 4 << 20}},
		{"a zero named", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{MaxSending: 99}, Fields: []string{"max_sending", "copy_bytes_per_s"}},
			&metapb.Rebalancer{Disabled: true, PausedByReshard: true, ThresholdCentiPercent: 250, MaxSending: 99}},
		{"the operator's disable", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{Disabled: true, PausedByReshard: true}, Fields: []string{"disabled"}},
			&metapb.Rebalancer{Disabled: true, ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 1 << 20}},
		{"the operator's enable", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{}, Fields: []string{"disabled"}},
			&metapb.Rebalancer{ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 1 << 20}},
		{"a reshard's cleanup", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{}, Fields: []string{"disabled", "paused_by_reshard"}},
			&metapb.Rebalancer{ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 1 << 20}},
		{"a name no field has", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{MaxSending: 1}, Fields: []string{"copy_rate"}}, cur},
		{"every setting", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{MaxReceiving: 3, PausedByReshard: true}},
			&metapb.Rebalancer{MaxReceiving: 3}},
		{"a reshard's cleanup, its pause still on", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{}, Fields: []string{"disabled", "paused_by_reshard"}, OnlyIfPausedByReshard: true},
			&metapb.Rebalancer{ThresholdCentiPercent: 250, MaxSending: 7, CopyBytesPerS: 1 << 20}},
		{"a reshard's start over an operator's disable", &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{Disabled: true, PausedByReshard: true},
			Fields: []string{"disabled", "paused_by_reshard"}, OnlyIfEnabled: true}, cur},
	} {
		before := proto.CloneOf(cur)
		if got := MergeRebalancer(cur, c.set); !proto.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if !proto.Equal(cur, before) {
			t.Fatalf("%s: the settings in force were changed in place: %v", c.name, cur)
		}
	}
	// A reshard's cleanup after the operator's own disable ended the
	// pause: the operator's disable stands.
	opOff := &metapb.Rebalancer{Disabled: true, MaxSending: 7}
	cleanup := &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{}, Fields: []string{"disabled", "paused_by_reshard"}, OnlyIfPausedByReshard: true}
	if got := MergeRebalancer(opOff, cleanup); !proto.Equal(got, opOff) {
		t.Errorf("a reshard's cleanup after the operator's disable: %v, want %v", got, opOff)
	}
	// A reshard's start, from no settings at all.
	start := &metapb.SetRebalancer{Rebalancer: &metapb.Rebalancer{Disabled: true, PausedByReshard: true}, Fields: []string{"disabled", "paused_by_reshard"}}
	if got := MergeRebalancer(nil, start); !got.GetDisabled() || !got.GetPausedByReshard() {
		t.Errorf("a reshard's start from nothing: %v, want off and paused by it", got)
	}
}
