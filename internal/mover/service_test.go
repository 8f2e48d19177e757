package mover

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/sharding"
)

// wantStatus checks that err is a status of code whose message has every
// one of parts.
func wantStatus(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	s, _ := status.FromError(err)
	if err == nil || s.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(s.Message(), p) {
			t.Errorf("%s: %q does not say %q", what, s.Message(), p)
		}
	}
}

func TestRebalanceStatusBeforeTheBoot(t *testing.T) {
	t.Parallel()
	s := NewService(New(Config{GroupZero: newFakeZero(t)}), nil)
	_, err := s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	wantStatus(t, "status before the boot", err, codes.Unavailable, "not bootstrapped")
}

func TestRebalanceStatus(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 40, 1, 1, 1)
	c.moveInZero("r2", span(3, 12)...)
	c.moveInZero("r3", 13, 14)
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r3", Weight: new(uint32(0))}}})
	c.pin(1)
	c.pin(2)
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 250, MaxSending: 9})
	c.start("r2", 16, 15)
	c.zero.nowMs.Add(1500)
	refreshed := 0
	s := NewService(c.mover(0), func(context.Context) error { refreshed++; return nil })
	got, err := s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// r1 holds 28 (26 once its two moves switch), r2 10 (12), r3 2 at
	// weight 0: targets 20, 20, 0; r3's disbalance is infinite, shown as
	// the largest double.
	want := &datav1.RebalanceStatusResponse{
		BucketCount: 40,
		Settings:    &datav1.RebalancerSettings{ThresholdPercent: 2.5, MaxSending: 9, MaxReceiving: DefaultMaxReceiving},
		Replicasets: []*datav1.ReplicasetBalance{
			{ReplicasetId: "r1", Weight: 1, Buckets: 28, Target: 20, DisbalancePercent: sharding.Disbalance(26, 20), Pinned: 2, Sending: 2, Available: true,
				PinnedBuckets: []uint32{1, 2}},
			{ReplicasetId: "r2", Weight: 1, Buckets: 10, Target: 20, DisbalancePercent: sharding.Disbalance(12, 20), Receiving: 2, Available: true},
			{ReplicasetId: "r3", Buckets: 2, DisbalancePercent: math.MaxFloat64, Available: true},
		},
		MaxDisbalancePercent: math.MaxFloat64,
		BucketsToMove:        8,
		Moves: []*datav1.MoveInfo{
			{Bucket: 15, From: "r1", To: "r2", Generation: 2, Phase: "prepare", AgeMs: 1500, Reason: "test"},
			{Bucket: 16, From: "r1", To: "r2", Generation: 2, Phase: "prepare", AgeMs: 1500, Reason: "test"},
		},
	}
	if !proto.Equal(got, want) {
		t.Errorf("status\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
	if refreshed != 1 {
		t.Errorf("the view of group 0 refreshed %d times, want once", refreshed)
	}
	// r3 locked: it keeps its 2, and is shown so.
	c.lock("r3")
	got, err = s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r3 := got.GetReplicasets()[2]; !r3.GetLocked() || r3.GetTarget() != 2 || r3.GetDisbalancePercent() != 0 {
		t.Errorf("r3 locked: %v", r3)
	}
	c.setGrade("i2", meta.Offline)
	got, err = s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r2 := got.GetReplicasets()[1]; r2.GetAvailable() {
		t.Errorf("r2 with its instance Offline: %v", r2)
	}
}

// A pinned bucket on a replicaset of weight 0 stays there (the targets
// count it as staying, so nothing is left "to move"): the drain moves the
// others and then waits for it for good. The status says so, naming the
// command that unpins it; unpinned, it drains too.
func TestRebalanceStatusSaysADrainWaitsForPinnedBuckets(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 30, 1, 1)
	c.moveInZero("r2", span(16, 30)...)
	for b := uint32(16); b <= 30; b++ { // the data follows group 0's map
		c.rs["r2"].records[b], c.rs["r2"].tuples[b] = c.rs["r1"].records[b], c.rs["r1"].tuples[b]
		delete(c.rs["r1"].records, b)
		delete(c.rs["r1"].tuples, b)
	}
	c.pin(20)
	c.pin(5)
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Weight: new(uint32(0))}}})
	m := c.mover(0)
	s := NewService(m, nil)
	status := func() *datav1.RebalanceStatusResponse {
		t.Helper()
		got, err := s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	drain := func() {
		t.Helper()
		for range 10 {
			if len(c.rebalanceRound(m)) == 0 {
				return
			}
			c.driveAll(m)
		}
		t.Fatal("the drain did not end in 10 rounds")
	}
	drain()
	st := c.zero.State()
	if n := st.BucketCounts()["r2"]; n != 1 || st.Buckets[19] != "r2" {
		t.Fatalf("after the drain r2 holds %d buckets (bucket 20 on %s): want bucket 20 alone", n, st.Buckets[19])
	}
	got := status()
	r1, r2 := got.GetReplicasets()[0], got.GetReplicasets()[1]
	if got.GetBucketsToMove() != 0 || r2.GetPinned() != 1 || !slices.Equal(r2.GetPinnedBuckets(), []uint32{20}) {
		t.Errorf("status after the drain: to move %d, r2 %v", got.GetBucketsToMove(), r2)
	}
	if want := "the drain of r2 (weight 0) waits for its 1 pinned bucket, which the rebalancer never moves: unpin it (shardkit bucket unpin 20)"; r2.GetDrainWaits() != want {
		t.Errorf("r2's drain_waits %q, want %q", r2.GetDrainWaits(), want)
	}
	// r1's pin is no drain's: its weight is not 0.
	if !slices.Equal(r1.GetPinnedBuckets(), []uint32{5}) || r1.GetDrainWaits() != "" {
		t.Errorf("r1: %v", r1)
	}
	c.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 20}}})
	drain()
	if n := c.zero.State().BucketCounts()["r2"]; n != 0 {
		t.Errorf("unpinned, r2 still holds %d buckets", n)
	}
	if r2 := status().GetReplicasets()[1]; r2.GetDrainWaits() != "" || len(r2.GetPinnedBuckets()) != 0 {
		t.Errorf("r2 drained: %v", r2)
	}
	// Many pins: the command names the first 20 and says how many more.
	if got := drainWaits("r3", 0, span(1, 25)); !strings.HasSuffix(got,
		"waits for its 25 pinned buckets, which the rebalancer never moves: unpin them (shardkit bucket unpin 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20, then the 5 more pinned buckets that `shardkit rebalance status --format json` lists as pinned_buckets)") {
		t.Errorf("25 pins: %q", got)
	}
}

// An instance that cannot confirm its view of group 0 still answers, from
// the view it has, and says that the answer is stale and why.
func TestRebalanceStatusWithoutALeaderIsMarkedStale(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 10, 1, 1)
	s := NewService(c.mover(0), func(context.Context) error { return errors.New("no leader of group 0 at term 7") })
	got, err := s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetStale() || !strings.Contains(got.GetStaleReason(), "no leader of group 0 at term 7") ||
		!strings.Contains(got.GetStaleReason(), "could not confirm") {
		t.Errorf("stale %v, reason %q: want stale, saying why", got.GetStale(), got.GetStaleReason())
	}
	if got.GetBucketCount() != 10 || len(got.GetReplicasets()) != 2 || got.GetReplicasets()[0].GetBuckets() != 10 {
		t.Errorf("the stale answer lost the instance's view: %v", got)
	}
	s = NewService(c.mover(0), func(context.Context) error { return nil })
	if got, err = s.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{}); err != nil || got.GetStale() || got.GetStaleReason() != "" {
		t.Errorf("confirmed view: stale %v (%q), err %v", got.GetStale(), got.GetStaleReason(), err)
	}
}

func TestSetRebalancer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 10, 1, 1)
	s := NewService(c.mover(0), nil)
	set := func(in *datav1.RebalancerSettings) error {
		_, err := s.SetRebalancer(t.Context(), &datav1.SetRebalancerRequest{Settings: in})
		return err
	}
	if err := set(&datav1.RebalancerSettings{Disabled: true, ThresholdPercent: 2.5, MaxSending: 7, MaxReceiving: 9}); err != nil {
		t.Fatal(err)
	}
	want := &metapb.Rebalancer{Disabled: true, ThresholdCentiPercent: 250, MaxSending: 7, MaxReceiving: 9}
	if got := c.zero.State().Props.GetRebalancer(); !proto.Equal(got, want) {
		t.Fatalf("settings %v, want %v", got, want)
	}
	for _, bad := range []float64{-1, 100.01, math.Inf(1), math.Inf(-1), math.NaN()} {
		c.zero.takeProposals()
		wantStatus(t, fmt.Sprintf("threshold %v", bad), set(&datav1.RebalancerSettings{ThresholdPercent: bad}), codes.InvalidArgument, "threshold", "[0, 100]")
		if p := c.zero.takeProposals(); len(p) != 0 {
			t.Errorf("threshold %v: proposed %v", bad, p)
		}
	}
	if got := c.zero.State().Props.GetRebalancer(); !proto.Equal(got, want) {
		t.Errorf("after the refusals: settings %v, want %v", got, want)
	}
	// 0 and 100 are in range; 0 is the default.
	for _, ok := range []float64{0, 100} {
		if err := set(&datav1.RebalancerSettings{ThresholdPercent: ok}); err != nil {
			t.Errorf("threshold %v: %v", ok, err)
		}
	}

	// Named fields change those alone, merged into what is in force when
	// group 0 applies them: the others stand, zero values included.
	if err := set(&datav1.RebalancerSettings{Disabled: true, ThresholdPercent: 2.5, MaxSending: 7, MaxReceiving: 9}); err != nil {
		t.Fatal(err)
	}
	setFields := func(in *datav1.RebalancerSettings, fields ...string) error {
		_, err := s.SetRebalancer(t.Context(), &datav1.SetRebalancerRequest{Settings: in, Fields: fields})
		return err
	}
	c.zero.takeProposals()
	if err := setFields(&datav1.RebalancerSettings{CopyBytesPerS: 4 << 20, ThresholdPercent: math.NaN()}, "copy_bytes_per_s"); err != nil {
		t.Fatalf("a copy rate alone (the threshold not named, not checked): %v", err)
	}
	want = &metapb.Rebalancer{Disabled: true, ThresholdCentiPercent: 250, MaxSending: 7, MaxReceiving: 9, CopyBytesPerS: 4 << 20}
	if got := c.zero.State().Props.GetRebalancer(); !proto.Equal(got, want) {
		t.Fatalf("after a copy rate alone: %v, want %v (still disabled, every other setting kept)", got, want)
	}
	// Beside the names goes the whole of what the proposer saw with them
	// set: a member of a build before the names takes that whole.
	if p := c.zero.takeProposals(); len(p) != 1 || !proto.Equal(p[0].GetSetRebalancer().GetRebalancer(), want) {
		t.Fatalf("proposed %v, want the settings in force with the copy rate set, %v", p, want)
	}
	if err := setFields(&datav1.RebalancerSettings{MaxSending: 0, ThresholdPercent: 3}, "max_sending", "threshold_percent", "max_sending"); err != nil {
		t.Fatal(err)
	}
	want = &metapb.Rebalancer{Disabled: true, ThresholdCentiPercent: 300, MaxReceiving: 9, CopyBytesPerS: 4 << 20}
	if got := c.zero.State().Props.GetRebalancer(); !proto.Equal(got, want) {
		t.Fatalf("after max_sending 0 and a threshold: %v, want %v", got, want)
	}
	c.zero.takeProposals()
	wantStatus(t, "an unknown setting", setFields(&datav1.RebalancerSettings{}, "copy_rate"), codes.InvalidArgument, `unknown rebalancer setting "copy_rate"`, "copy_bytes_per_s")
	wantStatus(t, "a bad threshold named", setFields(&datav1.RebalancerSettings{ThresholdPercent: 101}, "threshold_percent"), codes.InvalidArgument, "threshold", "[0, 100]")
	if p := c.zero.takeProposals(); len(p) != 0 {
		t.Errorf("refused settings proposed %v", p)
	}
}

// MoveBucket starts a move through group 0, which refuses what it does
// not allow (each refusal saying why); a refused one records nothing.
func TestMoveBucketAndPinBucket(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 10, 1, 1, 1)
	c.lock("r3")
	s := NewService(c.mover(0), nil)
	move := func(b uint32, to string) (*datav1.MoveBucketResponse, error) {
		return s.MoveBucket(t.Context(), &datav1.MoveBucketRequest{Bucket: b, To: to})
	}
	pin := func(b uint32, pinned bool) error {
		_, err := s.PinBucket(t.Context(), &datav1.PinBucketRequest{Bucket: b, Pinned: pinned})
		return err
	}
	if err := pin(4, true); err != nil {
		t.Fatal(err)
	}
	resp, err := move(2, "r2")
	if err != nil {
		t.Fatal(err)
	}
	want := &datav1.MoveInfo{Bucket: 2, From: "r1", To: "r2", Generation: 2, Phase: "prepare", Reason: "manual"}
	if !proto.Equal(resp.GetMove(), want) {
		t.Errorf("move %v, want %v", resp.GetMove(), want)
	}
	for _, tc := range []struct {
		bucket uint32
		to     string
		code   codes.Code
		says   string
	}{
		{2, "r2", codes.FailedPrecondition, "bucket 2 is already moving from r1 to r2"},
		{4, "r2", codes.FailedPrecondition, "bucket 4 is pinned to r1"},
		{4, "r1", codes.InvalidArgument, "bucket 4 is on r1 already"}, // pinned, but not what is wrong
		{5, "r3", codes.FailedPrecondition, "replicaset r3 is locked"},
		{5, "r9", codes.NotFound, `no replicaset "r9"`},
		{5, "r1", codes.InvalidArgument, "bucket 5 is on r1 already"},
		{0, "r2", codes.InvalidArgument, "bucket 0 is outside [1, 10]"},
		{11, "r2", codes.InvalidArgument, "bucket 11 is outside [1, 10]"},
	} {
		_, err := move(tc.bucket, tc.to)
		wantStatus(t, fmt.Sprintf("move bucket %d to %s", tc.bucket, tc.to), err, tc.code, tc.says)
	}
	// r2's one member stops: r2 has no quorum, and a move to it is
	// refused before anything is recorded.
	c.setGrade("i2", meta.Offline)
	_, err = move(6, "r2")
	wantStatus(t, "move bucket 6 to r2 without a quorum", err, codes.FailedPrecondition, "replicaset r2 has no quorum", "a move of bucket 6 would abort")
	c.setGrade("i2", meta.Online)
	if n := len(c.zero.State().Moves); n != 1 {
		t.Errorf("%d moves recorded, want the one allowed", n)
	}
	wantStatus(t, "pin bucket 11", pin(11, true), codes.InvalidArgument, "bucket 11 is outside [1, 10]")
	if err := pin(4, false); err != nil {
		t.Fatal(err)
	}
	if _, err := move(4, "r2"); err != nil {
		t.Errorf("an unpinned bucket: %v", err)
	}
}

// The operator's procedure, step by step against the fakes: plan changes
// nothing; start switches every planned bucket (the driver does it, and
// leaves them to the operator); finish before copy is refused; copy,
// finish and cleanup move the data and count it by space, every space
// (one with no rows counts 0, as the seed lists it); the rebalancer is on
// again at the end.
func TestReshardSteps(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	for _, name := range []string{"first", "second", "third"} {
		c.must(&metapb.Command{Op: &metapb.Command_CreateSpace{CreateSpace: &metapb.CreateSpace{Space: &metapb.Space{
			Name: name, Format: []*metapb.Field{{Name: "id", Type: "unsigned"}}, PrimaryKey: []uint32{0}, ShardingKey: []uint32{0}}}}})
	}
	// On, but the 100% disbalance is within its threshold: it moves
	// nothing by itself, and start turns it off, cleanup on again.
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 10000, MaxSending: 7})
	step := c.reshardService(t)
	moved := span(1, 10)
	buckets := func(r *datav1.ReshardResponse) []uint32 {
		var out []uint32
		for _, mv := range r.GetMoves() {
			out = append(out, mv.GetBucket())
		}
		return out
	}

	plan, err := step(datav1.ReshardStep_RESHARD_STEP_PLAN)
	if err != nil {
		t.Fatal(err)
	}
	if got := buckets(plan); !slices.Equal(got, moved) || plan.GetMoves()[0].GetTo() != "r2" || !plan.GetMoves()[0].GetOperator() {
		t.Fatalf("plan: %v (%s)", plan.GetMoves(), plan.GetSummary())
	}
	if n := len(c.zero.State().Moves); n != 0 {
		t.Fatalf("the plan started %d moves", n)
	}

	start, err := step(datav1.ReshardStep_RESHARD_STEP_START)
	if err != nil {
		t.Fatal(err)
	}
	if got := buckets(start); !slices.Equal(got, moved) || start.GetMoves()[0].GetPhase() != "copy" {
		t.Fatalf("start: %v (%s)", start.GetMoves(), start.GetSummary())
	}
	st := c.zero.State()
	if r := st.Props.GetRebalancer(); !r.GetDisabled() || !r.GetPausedByReshard() || r.GetMaxSending() != 7 {
		t.Errorf("the rebalancer during the reshard: %v, want disabled by the reshard, its quota kept", r)
	}
	for _, b := range moved {
		if st.Buckets[b-1] != "r2" || st.Moves[b].GetPhase() != metapb.Move_PHASE_COPY {
			t.Errorf("bucket %d after start: on %s, move %v", b, st.Buckets[b-1], st.Moves[b])
		}
	}
	_, err = step(datav1.ReshardStep_RESHARD_STEP_START)
	wantStatus(t, "start again", err, codes.FailedPrecondition, "a reshard is under way (10 buckets switched)")
	// An operator paces the copy mid-reshard, naming the copy rate alone
	// (as the CLI does), or sending every setting back as read (the
	// rebalancer off): the cleanup still turns it on.
	svc := NewService(c.mover(0), nil)
	if _, err := svc.SetRebalancer(t.Context(), &datav1.SetRebalancerRequest{Settings: &datav1.RebalancerSettings{CopyBytesPerS: 32 << 20},
		Fields: []string{"copy_bytes_per_s"}}); err != nil {
		t.Fatal(err)
	}
	if r := c.zero.State().Props.GetRebalancer(); !r.GetPausedByReshard() || !r.GetDisabled() || r.GetCopyBytesPerS() != 32<<20 {
		t.Errorf("the rebalancer after a copy rate named mid-reshard: %v, want still off and marked paused by the reshard", r)
	}
	if _, err := svc.SetRebalancer(t.Context(), &datav1.SetRebalancerRequest{Settings: &datav1.RebalancerSettings{
		Disabled: true, ThresholdPercent: 100, MaxSending: 7, CopyBytesPerS: 64 << 20, PausedByReshard: true}}); err != nil {
		t.Fatal(err)
	}
	if r := c.zero.State().Props.GetRebalancer(); !r.GetPausedByReshard() || r.GetCopyBytesPerS() != 64<<20 {
		t.Errorf("the rebalancer after a copy rate set mid-reshard: %v, want still marked paused by the reshard", r)
	}
	_, err = step(datav1.ReshardStep_RESHARD_STEP_FINISH)
	wantStatus(t, "finish before copy", err, codes.FailedPrecondition, "reshard copy")

	copied, err := step(datav1.ReshardStep_RESHARD_STEP_COPY)
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := seedCounts(moved...)
	wantSpaces := []*datav1.SpaceCount{{Space: "first", Count: wantCounts[1]}, {Space: "second", Count: wantCounts[2]}, {Space: "third"}}
	if got := buckets(copied); !slices.Equal(got, moved) || !countsEqual(copied.GetCounts(), wantSpaces) {
		t.Errorf("copy: %v, counts %v; want counts %v", got, copied.GetCounts(), wantSpaces)
	}
	// The driver leaves an operator's switched moves alone.
	for _, b := range moved {
		if r := c.rs["r2"].record(b); r.GetState() != rspb.BucketState_STATE_RECEIVING || !r.GetCopied() {
			t.Errorf("bucket %d on r2 after copy: %v, want RECEIVING and copied", b, r)
		}
	}

	finished, err := step(datav1.ReshardStep_RESHARD_STEP_FINISH)
	if err != nil {
		t.Fatal(err)
	}
	if got := buckets(finished); !slices.Equal(got, moved) {
		t.Errorf("finish: %v", got)
	}
	cleaned, err := step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	if err != nil {
		t.Fatal(err)
	}
	if got := buckets(cleaned); !slices.Equal(got, moved) || !countsEqual(cleaned.GetCounts(), wantSpaces) {
		t.Errorf("cleanup: %v, counts %v; want counts %v", got, cleaned.GetCounts(), wantSpaces)
	}
	c.checkMoved("r1", "r2", 2, moved...)
	if r := c.zero.State().Props.GetRebalancer(); r.GetDisabled() || r.GetPausedByReshard() || r.GetMaxSending() != 7 || r.GetThresholdCentiPercent() != 10000 || r.GetCopyBytesPerS() != 64<<20 {
		t.Errorf("the rebalancer after the cleanup: %v, want on, its settings kept", r)
	}
	if !strings.Contains(cleaned.GetSummary(), "the rebalancer is on again") {
		t.Errorf("cleanup's summary %q does not say the rebalancer is on again", cleaned.GetSummary())
	}
	_, err = step(datav1.ReshardStep_RESHARD_STEP_UNSPECIFIED)
	wantStatus(t, "an unknown step", err, codes.InvalidArgument, "unknown reshard step")
}

// An expelled replicaset takes no operator weight or lock; the refusal
// names the replicasets in service.
func TestAnExpelledReplicasetTakesNoWeightOrLock(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 10, 1, 1)
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Expelled: new(true)}}})
	s := NewService(c.mover(0), nil)
	_, err := s.SetWeight(t.Context(), &datav1.SetWeightRequest{ReplicasetId: "r2", Weight: 1})
	wantStatus(t, "weight of an expelled replicaset", err, codes.FailedPrecondition, "replicaset r2 is expelled: it takes no weight or lock (replicasets in service: r1)")
	_, err = s.SetLocked(t.Context(), &datav1.SetLockedRequest{ReplicasetId: "r2", Locked: true})
	wantStatus(t, "lock of an expelled replicaset", err, codes.FailedPrecondition, "replicaset r2 is expelled")
	if rs := c.zero.State().Replicasets["r2"]; rs.GetLocked() || rs.GetWeight() != 1 || rs.GetWeightByOperator() {
		t.Errorf("the expelled replicaset after refused changes: %v", rs)
	}
	if _, err := s.SetWeight(t.Context(), &datav1.SetWeightRequest{ReplicasetId: "r1", Weight: 2}); err != nil {
		t.Errorf("weight of a replicaset in service: %v", err)
	}
}

// An operator's own --disable during a reshard (the mark sent as false)
// stands: the cleanup leaves the rebalancer off. And a copy whose
// destination's receive quota is full waits for room instead of failing.
func TestAReshardKeepsAnOperatorsDisableAndWaitsForTheQuota(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.setRebalancer(&metapb.Rebalancer{ThresholdCentiPercent: 10000})
	step := c.reshardService(t)
	if _, err := step(datav1.ReshardStep_RESHARD_STEP_START); err != nil {
		t.Fatal(err)
	}
	if r := c.zero.State().Props.GetRebalancer(); !r.GetPausedByReshard() {
		t.Fatalf("after start: %v, want paused by the reshard", r)
	}
	svc := NewService(c.mover(0), nil)
	if _, err := svc.SetRebalancer(t.Context(), &datav1.SetRebalancerRequest{Settings: &datav1.RebalancerSettings{
		Disabled: true, ThresholdPercent: 100}}); err != nil {
		t.Fatal(err)
	}
	if r := c.zero.State().Props.GetRebalancer(); !r.GetDisabled() || r.GetPausedByReshard() {
		t.Fatalf("after the operator's --disable: %v, want off and no longer the reshard's", r)
	}
	st, err := svc.RebalanceStatus(t.Context(), &datav1.RebalanceStatusRequest{})
	if err != nil || st.GetSettings().GetPausedByReshard() {
		t.Fatalf("status after the operator's --disable: %v, %v", st.GetSettings(), err)
	}

	// r2's receive quota is full for its first two asks.
	var asked atomic.Int32
	c.rs["r2"].setIntercept(func(_ context.Context, call rsCall) error {
		if call.method == "ReceiveBuckets" && !call.applied && asked.Add(1) <= 2 {
			return status.Error(codes.ResourceExhausted, "replicaset r2 cannot receive 10 more buckets now: its quota is 100 at once; retry")
		}
		return nil
	})
	copied, err := step(datav1.ReshardStep_RESHARD_STEP_COPY)
	if err != nil || len(copied.GetMoves()) != 10 || asked.Load() < 3 {
		t.Fatalf("copy with the quota full twice: %v, %v (%d asks)", copied, err, asked.Load())
	}
	c.rs["r2"].setIntercept(nil)
	if _, err := step(datav1.ReshardStep_RESHARD_STEP_FINISH); err != nil {
		t.Fatal(err)
	}
	cleaned, err := step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	if err != nil || !strings.Contains(cleaned.GetSummary(), "the rebalancer is off") {
		t.Fatalf("cleanup: %v, %v", cleaned, err)
	}
	if r := c.zero.State().Props.GetRebalancer(); !r.GetDisabled() {
		t.Errorf("after the cleanup: %v, want off, as the operator set it", r)
	}
}

func TestQuotaOnly(t *testing.T) {
	full := status.Error(codes.ResourceExhausted, "quota")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{full, true},
		{fmt.Errorf("copy of buckets 1-50: %w", full), true},
		{errors.Join(fmt.Errorf("copy of buckets 1-50: %w", full), fmt.Errorf("copy of buckets 51-100: %w", full)), true},
		{errors.Join(fmt.Errorf("copy: %w", full), errors.New("copy: r2 refused 1 of 50 buckets: bucket 3 is ACTIVE on r2")), false},
		{status.Error(codes.Unavailable, "no leader"), false},
	} {
		if got := quotaOnly(c.err); got != c.want {
			t.Errorf("quotaOnly(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// reshardService runs the mover and returns a call of one reshard step.
func (c *cluster) reshardService(t *testing.T) func(datav1.ReshardStep) (*datav1.ReshardResponse, error) {
	t.Helper()
	m := c.mover(0)
	s := NewService(m, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return func(st datav1.ReshardStep) (*datav1.ReshardResponse, error) {
		return s.Reshard(ctx, &datav1.ReshardRequest{Step: st})
	}
}

// An operator's steps out of order, or with no reshard under way, are
// refused and change nothing; a rebalancer that was off before start
// stays off after cleanup.
func TestReshardStepsOutOfOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 0)
	off := &metapb.Rebalancer{Disabled: true, MaxSending: 7}
	c.setRebalancer(off)
	step := c.reshardService(t)
	rebalancerIs := func(what string, want *metapb.Rebalancer) {
		t.Helper()
		if got := c.zero.State().Props.GetRebalancer(); !proto.Equal(got, want) {
			t.Errorf("the rebalancer %s: %v, want %v", what, got, want)
		}
	}
	const none = "no reshard is under way"
	for _, st := range []datav1.ReshardStep{datav1.ReshardStep_RESHARD_STEP_COPY, datav1.ReshardStep_RESHARD_STEP_FINISH, datav1.ReshardStep_RESHARD_STEP_CLEANUP} {
		_, err := step(st)
		wantStatus(t, st.String()+" with no reshard", err, codes.FailedPrecondition, none)
	}
	rebalancerIs("after steps with no reshard", off)

	// r2 has weight 0: nothing to move.
	start, err := step(datav1.ReshardStep_RESHARD_STEP_START)
	if err != nil || len(start.GetMoves()) != 0 || !strings.Contains(start.GetSummary(), "nothing to move") {
		t.Fatalf("start with nothing to move: %v, %v", start, err)
	}
	rebalancerIs("after a start with nothing to move", off)
	if n := len(c.zero.State().Moves); n != 0 {
		t.Fatalf("a start with nothing to move started %d moves", n)
	}

	w := uint32(1)
	c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Weight: &w, WeightByOperator: true}}})
	if start, err = step(datav1.ReshardStep_RESHARD_STEP_START); err != nil || len(start.GetMoves()) != 10 {
		t.Fatalf("start: %v, %v", start, err)
	}
	rebalancerIs("during a reshard it did not turn off", off)
	_, err = step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	wantStatus(t, "cleanup before copy", err, codes.FailedPrecondition, "10 buckets of the reshard are not finished", "reshard copy", "reshard finish")
	if _, err := step(datav1.ReshardStep_RESHARD_STEP_COPY); err != nil {
		t.Fatal(err)
	}
	_, err = step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	wantStatus(t, "cleanup before finish", err, codes.FailedPrecondition, "not finished")
	if _, err := step(datav1.ReshardStep_RESHARD_STEP_FINISH); err != nil {
		t.Fatal(err)
	}
	_, err = step(datav1.ReshardStep_RESHARD_STEP_COPY)
	wantStatus(t, "copy after finish", err, codes.FailedPrecondition, "nothing to copy", "10 buckets are copied and finished", "reshard cleanup")
	_, err = step(datav1.ReshardStep_RESHARD_STEP_FINISH)
	wantStatus(t, "finish again", err, codes.FailedPrecondition, "nothing to finish")
	cleaned, err := step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	if err != nil || len(cleaned.GetMoves()) != 10 || !strings.Contains(cleaned.GetSummary(), "the rebalancer is off (shardkit rebalance config --enable turns it on)") {
		t.Fatalf("cleanup: %v, %v", cleaned, err)
	}
	rebalancerIs("after the cleanup", off)
	c.checkMoved("r1", "r2", 2, span(1, 10)...)
	_, err = step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	wantStatus(t, "cleanup again", err, codes.FailedPrecondition, none)
}

// A reshard's buckets still switching (a start that ran out of time) hold
// back every later step; start, run again, waits for them.
func TestReshardStepsWaitForSwitchingBuckets(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 20, 1, 1)
	c.setRebalancer(&metapb.Rebalancer{Disabled: true})
	s := NewService(c.mover(0), nil) // no mover running: the move stays in PREPARE
	c.must(&metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{Bucket: 3, To: "r2", Reason: "reshard", Operator: true}}})
	for _, st := range []datav1.ReshardStep{datav1.ReshardStep_RESHARD_STEP_COPY, datav1.ReshardStep_RESHARD_STEP_FINISH, datav1.ReshardStep_RESHARD_STEP_CLEANUP} {
		_, err := s.Reshard(t.Context(), &datav1.ReshardRequest{Step: st})
		wantStatus(t, st.String()+" while a bucket switches", err, codes.FailedPrecondition,
			"1 bucket of the reshard is still switching: run `reshard start` again to wait for it")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := s.Reshard(ctx, &datav1.ReshardRequest{Step: datav1.ReshardStep_RESHARD_STEP_START})
	wantStatus(t, "start again, the switch not done in time", err, codes.DeadlineExceeded, "1 bucket is still switching; rerun `reshard start` to wait again")
	if n := len(c.zero.State().Moves); n != 1 {
		t.Errorf("a start run again recorded more moves: %d, want the 1 switching", n)
	}
}

func countsEqual(a, b []*datav1.SpaceCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
