package mover

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/retry"
)

// Service serves ShardingService on every instance; the server routes the
// calls that change something to the group-0 leader.
type Service struct {
	datav1.UnimplementedShardingServiceServer
	m *Mover
	// refresh catches this instance's view of group 0 up with the leader.
	refresh func(context.Context) error
}

// NewService returns the service of a mover.
func NewService(m *Mover, refresh func(context.Context) error) *Service {
	return &Service{m: m, refresh: refresh}
}

func moveInfo(mv *metapb.Move, now time.Time) *datav1.MoveInfo {
	phase := map[metapb.Move_Phase]string{metapb.Move_PHASE_PREPARE: "prepare", metapb.Move_PHASE_COPY: "copy",
		metapb.Move_PHASE_CLEANUP: "cleanup", metapb.Move_PHASE_ABORTING: "aborting"}[mv.GetPhase()]
	return &datav1.MoveInfo{Bucket: mv.GetBucket(), From: mv.GetFrom(), To: mv.GetTo(), Generation: mv.GetGeneration(), Phase: phase,
		AgeMs: max(0, now.UnixMilli()-mv.GetStartedUnixMs()), Reason: mv.GetReason(), Operator: mv.GetOperator()}
}

func sortedMoves(st *meta.State) []*metapb.Move {
	var out []*metapb.Move
	for _, mv := range st.Moves {
		out = append(out, mv)
	}
	slices.SortFunc(out, func(a, b *metapb.Move) int { return int(a.GetBucket()) - int(b.GetBucket()) })
	return out
}

// statusRefreshTimeout bounds how long RebalanceStatus waits to confirm
// this instance's view of group 0 with the leader before it answers from
// the view it has, marked stale.
const statusRefreshTimeout = 2 * time.Second

// RebalanceStatus implements ShardingService.
func (s *Service) RebalanceStatus(ctx context.Context, _ *datav1.RebalanceStatusRequest) (*datav1.RebalanceStatusResponse, error) {
	var staleReason string
	if s.refresh != nil {
		rctx, cancel := context.WithTimeout(ctx, statusRefreshTimeout)
		if err := s.refresh(rctx); err != nil {
			// Without a leader: answer from what this instance has, and
			// say that it is not confirmed.
			staleReason = fmt.Sprintf("this instance could not confirm its view of group 0 with the leader (waited at most %v): %v", statusRefreshTimeout, err)
		}
		cancel()
	}
	st := s.m.cfg.GroupZero.State()
	if !st.Booted() {
		return nil, status.Error(codes.Unavailable, "the cluster is not bootstrapped yet")
	}
	p := MakePlan(st)
	threshold, maxSend, maxRecv, disabled := Settings(st.Props.GetRebalancer())
	resp := &datav1.RebalanceStatusResponse{
		BucketCount: st.Props.GetBucketCount(),
		Settings: &datav1.RebalancerSettings{Disabled: disabled, ThresholdPercent: threshold,
			MaxSending: uint32(maxSend), MaxReceiving: uint32(maxRecv),
			CopyBytesPerS:   st.Props.GetRebalancer().GetCopyBytesPerS(),
			CopyPaceOff:     st.Props.GetRebalancer().GetCopyPaceOff(),
			PausedByReshard: st.Props.GetRebalancer().GetPausedByReshard()},
		MaxDisbalancePercent: p.MaxDisbalance,
		Stale:                staleReason != "",
		StaleReason:          staleReason,
	}
	counts := st.BucketCounts()
	for _, g := range p.Groups {
		rs := st.Replicasets[g.ID]
		pinned := st.PinnedOn(g.ID)
		resp.Replicasets = append(resp.Replicasets, &datav1.ReplicasetBalance{
			ReplicasetId: g.ID, Weight: rs.GetWeight(), Locked: rs.GetLocked(), Buckets: uint32(counts[g.ID]),
			Target: uint32(p.Targets[g.ID]), DisbalancePercent: p.Disbalance[g.ID], Pinned: uint32(len(pinned)),
			Sending: uint32(p.Sending[g.ID]), Receiving: uint32(p.Receiving[g.ID]), Available: available(st, g.ID),
			PinnedBuckets: pinned, DrainWaits: drainWaits(g.ID, rs.GetWeight(), pinned),
		})
	}
	for _, r := range p.Routes {
		resp.BucketsToMove += uint32(r.Count)
	}
	now := s.m.cfg.Now()
	for _, mv := range sortedMoves(st) {
		resp.Moves = append(resp.Moves, moveInfo(mv, now))
	}
	if math.IsInf(resp.MaxDisbalancePercent, 1) {
		resp.MaxDisbalancePercent = math.MaxFloat64 // JSON has no infinity
	}
	for _, r := range resp.Replicasets {
		if math.IsInf(r.DisbalancePercent, 1) {
			r.DisbalancePercent = math.MaxFloat64
		}
	}
	return resp, nil
}

// drainWaits says what the drain of a replicaset of weight 0 waits for
// when pinned buckets stay on it (the targets count pinned buckets as
// staying, so nothing else shows that the drain cannot end), and the
// command that unpins them; "" when nothing.
func drainWaits(rsID string, weight uint32, pinned []uint32) string {
	if weight != 0 || len(pinned) == 0 {
		return ""
	}
	return fmt.Sprintf("the drain of %s (weight 0) waits for its %s, which the rebalancer never moves: unpin %s (%s)",
		rsID, meta.Count(len(pinned), "pinned bucket"), agree(len(pinned), "it", "them"), meta.UnpinCommand(pinned))
}

func (s *Service) propose(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	return s.m.cfg.GroupZero.Propose(ctx, c)
}

// checkNotExpelled refuses an operator's weight or lock for an expelled
// replicaset: accepted, it would only be shown as if it meant something.
// (Checked here, not when group 0 applies the change, so that instances
// of an older version, which apply it, cannot disagree with these.)
func (s *Service) checkNotExpelled(rsID string) error {
	st := s.m.cfg.GroupZero.State()
	if rs := st.Replicasets[rsID]; rs.GetExpelled() {
		return status.Errorf(codes.FailedPrecondition, "replicaset %s is expelled: it takes no weight or lock (%s)", rsID, st.InService())
	}
	return nil
}

// SetWeight implements ShardingService.
func (s *Service) SetWeight(ctx context.Context, req *datav1.SetWeightRequest) (*datav1.SetWeightResponse, error) {
	if err := s.checkNotExpelled(req.GetReplicasetId()); err != nil {
		return nil, err
	}
	w := req.GetWeight()
	if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{
		ReplicasetId: req.GetReplicasetId(), Weight: &w, WeightByOperator: true}}}); err != nil {
		return nil, err
	}
	s.m.log.Info("replicaset weight set", "replicaset", req.GetReplicasetId(), "weight", w)
	return &datav1.SetWeightResponse{}, nil
}

// SetLocked implements ShardingService.
func (s *Service) SetLocked(ctx context.Context, req *datav1.SetLockedRequest) (*datav1.SetLockedResponse, error) {
	if err := s.checkNotExpelled(req.GetReplicasetId()); err != nil {
		return nil, err
	}
	l := req.GetLocked()
	if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{
		ReplicasetId: req.GetReplicasetId(), Locked: &l}}}); err != nil {
		return nil, err
	}
	s.m.log.Info("replicaset lock set", "replicaset", req.GetReplicasetId(), "locked", l)
	return &datav1.SetLockedResponse{}, nil
}

// MoveBucket implements ShardingService.
func (s *Service) MoveBucket(ctx context.Context, req *datav1.MoveBucketRequest) (*datav1.MoveBucketResponse, error) {
	// A replicaset without a quorum cannot take its steps: the move would
	// wait for the switch timeout and abort. (Group 0 checks the rest.)
	st := s.m.cfg.GroupZero.State()
	if b := req.GetBucket(); b >= 1 && int(b) <= len(st.Buckets) {
		for _, id := range []string{st.Buckets[b-1], req.GetTo()} {
			if rs := st.Replicasets[id]; rs != nil && !rs.GetExpelled() && !available(st, id) {
				return nil, status.Errorf(codes.FailedPrecondition,
					"replicaset %s has no quorum (fewer than a majority of its members are Online): a move of bucket %d would abort; start its instances again first",
					id, b)
			}
		}
	}
	res, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{
		Bucket: req.GetBucket(), To: req.GetTo(), Reason: "manual"}}})
	if err != nil {
		return nil, err
	}
	s.m.log.Info("manual bucket move", "bucket", req.GetBucket(), "from", res.Move.GetFrom(), "to", req.GetTo())
	return &datav1.MoveBucketResponse{Move: moveInfo(res.Move, s.m.cfg.Now())}, nil
}

// PinBucket implements ShardingService.
func (s *Service) PinBucket(ctx context.Context, req *datav1.PinBucketRequest) (*datav1.PinBucketResponse, error) {
	if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{
		Bucket: req.GetBucket(), Pinned: req.GetPinned()}}}); err != nil {
		return nil, err
	}
	return &datav1.PinBucketResponse{}, nil
}

// SetRebalancer implements ShardingService.
func (s *Service) SetRebalancer(ctx context.Context, req *datav1.SetRebalancerRequest) (*datav1.SetRebalancerResponse, error) {
	in := req.GetSettings()
	var fields []string // metapb.Rebalancer's names of the fields to set; none: all
	named := map[string]bool{}
	for _, name := range req.GetFields() {
		f, ok := rebalancerFields[name]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "unknown rebalancer setting %q: want one of %s", name, strings.Join(slices.Sorted(maps.Keys(rebalancerFields)), ", "))
		}
		if !named[name] {
			named[name] = true
			fields = append(fields, f)
		}
	}
	all := len(fields) == 0
	if t := in.GetThresholdPercent(); (all || named["threshold_percent"]) && !(t >= 0 && t <= 100) { // NaN too
		return nil, status.Errorf(codes.InvalidArgument, "threshold %v%% is outside [0, 100]", t)
	}
	r := &metapb.Rebalancer{Disabled: in.GetDisabled(), ThresholdCentiPercent: uint32(math.Round(in.GetThresholdPercent() * 100)),
		MaxSending: in.GetMaxSending(), MaxReceiving: in.GetMaxReceiving(), CopyBytesPerS: in.GetCopyBytesPerS(),
		CopyPaceOff: in.GetCopyPaceOff(), PausedByReshard: in.GetPausedByReshard()}
	if !all {
		r = s.namedOver(r, fields)
	}
	// Group 0 merges the named fields into the settings in force when it
	// applies the command (meta.MergeRebalancer).
	if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_SetRebalancer{SetRebalancer: &metapb.SetRebalancer{Rebalancer: r, Fields: fields}}}); err != nil {
		return nil, err
	}
	now := s.m.cfg.GroupZero.State().Props.GetRebalancer()
	s.m.log.Info("rebalancer settings", "fields", fields, "disabled", now.GetDisabled(), "threshold_centi_percent", now.GetThresholdCentiPercent(),
		"max_sending", now.GetMaxSending(), "max_receiving", now.GetMaxReceiving(), "copy_bytes_per_s", now.GetCopyBytesPerS(), "copy_pace_off", now.GetCopyPaceOff())
	return &datav1.SetRebalancerResponse{}, nil
}

// namedOver returns the settings in force here with the fields named set
// from r: what a named change sends whole beside its names, for a member
// of group 0 of a build that takes it whole (one before the names),
// which then ends up where the others do unless a change to another
// setting is applied in between. Members that know the names take only
// the named fields, from the settings in force when they apply it.
func (s *Service) namedOver(r *metapb.Rebalancer, fields []string) *metapb.Rebalancer {
	return meta.MergeRebalancer(s.m.cfg.GroupZero.State().Props.GetRebalancer(), &metapb.SetRebalancer{Rebalancer: r, Fields: fields})
}

// pauseFields are the settings a reshard sets: it turns the rebalancer
// off and marks the pause its own, and turns both back.
var pauseFields = []string{"disabled", "paused_by_reshard"}

// rebalancerFields maps the settings' names in a SetRebalancerRequest to
// group 0's (metapb.Rebalancer).
var rebalancerFields = map[string]string{
	"disabled":          "disabled",
	"threshold_percent": "threshold_centi_percent",
	"max_sending":       "max_sending",
	"max_receiving":     "max_receiving",
	"copy_bytes_per_s":  "copy_bytes_per_s",
	"paused_by_reshard": "paused_by_reshard",
	"copy_pace_off":     "copy_pace_off",
}

// Reshard implements ShardingService: the seed's procedure, step by step.
func (s *Service) Reshard(ctx context.Context, req *datav1.ReshardRequest) (*datav1.ReshardResponse, error) {
	switch req.GetStep() {
	case datav1.ReshardStep_RESHARD_STEP_PLAN:
		return s.reshardPlan()
	case datav1.ReshardStep_RESHARD_STEP_START:
		return s.reshardStart(ctx)
	case datav1.ReshardStep_RESHARD_STEP_COPY:
		return s.reshardCopy(ctx)
	case datav1.ReshardStep_RESHARD_STEP_FINISH:
		return s.reshardFinish(ctx)
	case datav1.ReshardStep_RESHARD_STEP_CLEANUP:
		return s.reshardCleanup(ctx)
	}
	return nil, status.Errorf(codes.InvalidArgument, "unknown reshard step %v: plan, start, copy, finish or cleanup", req.GetStep())
}

// planned picks the buckets the routes of a plan move (lowest numbers
// first, skipping pinned and moving ones).
func planned(st *meta.State, p Plan) []*metapb.Move {
	var out []*metapb.Move
	taken := map[uint32]bool{}
	for b := range st.Moves {
		taken[b] = true
	}
	for _, r := range p.Routes {
		n := r.Count
		for b := uint32(1); n > 0 && int(b) <= len(st.Buckets); b++ {
			if st.Buckets[b-1] != r.From || taken[b] || st.Pinned[b] {
				continue
			}
			taken[b] = true
			n--
			out = append(out, &metapb.Move{Bucket: b, From: r.From, To: r.To, Generation: st.Generation(b) + 1, Reason: "reshard", Operator: true})
		}
	}
	return out
}

func (s *Service) reshardPlan() (*datav1.ReshardResponse, error) {
	st := s.m.cfg.GroupZero.State()
	p := MakePlan(st)
	resp := &datav1.ReshardResponse{}
	now := s.m.cfg.Now()
	for _, mv := range planned(st, p) {
		mv.StartedUnixMs = now.UnixMilli()
		resp.Moves = append(resp.Moves, moveInfo(mv, now))
	}
	resp.Summary = fmt.Sprintf("%s would move (max disbalance %s)", meta.Count(len(resp.Moves), "bucket"), FormatPercent(p.MaxDisbalance))
	if _, _, _, disabled := Settings(st.Props.GetRebalancer()); !disabled && len(resp.Moves) > 0 {
		resp.Summary += "; the rebalancer is on and may move them itself before `reshard start` (shardkit rebalance config --disable keeps them for the reshard)"
	}
	return resp, nil
}

// FormatPercent shows a disbalance or a threshold: "44.53%", or "inf" for
// a weight-0 replicaset that still holds buckets (+Inf, or the MaxFloat64
// the API carries it as, JSON having no infinity).
func FormatPercent(p float64) string {
	if math.IsInf(p, 1) || p >= math.MaxFloat64/2 {
		return "inf"
	}
	return fmt.Sprintf("%.2f%%", p)
}

// errNoReshard refuses a step of the procedure when none is under way.
var errNoReshard = status.Error(codes.FailedPrecondition,
	"no reshard is under way: `reshard plan` shows what one would move, `reshard start` switches those buckets")

func (s *Service) operatorMoves(phase metapb.Move_Phase) []*metapb.Move {
	var out []*metapb.Move
	for _, mv := range sortedMoves(s.m.cfg.GroupZero.State()) {
		if mv.GetOperator() && mv.GetPhase() == phase {
			out = append(out, mv)
		}
	}
	return out
}

// switching counts the reshard's buckets not switched yet (or being
// aborted): a start that ran out of time left them to the mover.
func (s *Service) switching() int {
	return len(s.operatorMoves(metapb.Move_PHASE_PREPARE)) + len(s.operatorMoves(metapb.Move_PHASE_ABORTING))
}

func (s *Service) reshardStart(ctx context.Context) (*datav1.ReshardResponse, error) {
	var asked int // the buckets the answer accounts for
	if n := s.switching(); n > 0 {
		// A start run again to wait for the switches it left.
		asked = n + len(s.operatorMoves(metapb.Move_PHASE_COPY))
	} else {
		var err error
		if asked, err = s.startMoves(ctx); err != nil {
			return nil, err
		}
		if asked == 0 {
			return &datav1.ReshardResponse{Summary: fmt.Sprintf(
				"nothing to move: every replicaset holds its target (max disbalance %s); the rebalancer's settings are unchanged",
				FormatPercent(MakePlan(s.m.cfg.GroupZero.State()).MaxDisbalance))}, nil
		}
	}
	return s.awaitSwitches(ctx, asked)
}

// startMoves turns the rebalancer off (marked, when it was on) and records
// the plan's moves, and returns how many; nothing when the plan is empty.
func (s *Service) startMoves(ctx context.Context) (int, error) {
	st := s.m.cfg.GroupZero.State()
	if n := len(s.operatorMoves(metapb.Move_PHASE_COPY)) + len(s.operatorMoves(metapb.Move_PHASE_CLEANUP)); n > 0 {
		return 0, status.Errorf(codes.FailedPrecondition, "a reshard is under way (%s switched); copy, finish and clean it up first", meta.Count(n, "bucket"))
	}
	if len(planned(st, MakePlan(st))) == 0 {
		return 0, nil
	}
	// The rebalancer stays out of the way until the cleanup, which turns
	// it on again only if this step turned it off.
	if !st.Props.GetRebalancer().GetDisabled() {
		// Every other setting stays; an operator's disable applied first
		// stays the operator's (only_if_enabled).
		r := s.namedOver(&metapb.Rebalancer{Disabled: true, PausedByReshard: true}, pauseFields)
		if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_SetRebalancer{SetRebalancer: &metapb.SetRebalancer{
			Rebalancer: r, Fields: pauseFields, OnlyIfEnabled: true}}}); err != nil {
			return 0, err
		}
	}
	// A rebalancer round planned before the rebalancer was turned off (by
	// the step above, or by an operator just before) may still be
	// proposing its moves: wait it out, so that the plan below sees them
	// (as moving) instead of asking for the same buckets.
	s.m.round.Lock()
	s.m.round.Unlock() //nolint:staticcheck // an empty critical section: a barrier
	plan := planned(s.m.cfg.GroupZero.State(), MakePlan(s.m.cfg.GroupZero.State()))
	steps := make([]*metapb.Command, len(plan))
	for i, mv := range plan {
		steps[i] = &metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{
			Bucket: mv.GetBucket(), To: mv.GetTo(), Reason: "reshard", Operator: true}}}
	}
	if len(steps) > 0 {
		if _, err := s.m.moveSteps(ctx, plan, steps, func(*metapb.Move) {}); err != nil {
			return 0, fmt.Errorf("start the moves: %w", err)
		}
	}
	return len(plan), nil
}

// awaitSwitches waits until none of the reshard's moves is switching
// (the mover switches them, or aborts those past its switch timeout) and
// answers with those switched; asked is how many were asked.
func (s *Service) awaitSwitches(ctx context.Context, asked int) (*datav1.ReshardResponse, error) {
	for {
		ch := s.m.cfg.GroupZero.Changed()
		if s.switching() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			n := s.switching()
			return nil, status.Errorf(codes.DeadlineExceeded, "%s still switching; rerun `reshard start` to wait again", meta.Count(n, "bucket")+" "+agree(n, "is", "are"))
		case <-ch:
		case <-time.After(200 * time.Millisecond):
		}
	}
	resp := &datav1.ReshardResponse{}
	now := s.m.cfg.Now()
	for _, mv := range s.operatorMoves(metapb.Move_PHASE_COPY) {
		resp.Moves = append(resp.Moves, moveInfo(mv, now))
	}
	resp.Summary = fmt.Sprintf("%s switched (curr = new replicaset, prev = old); next: reshard copy", meta.Count(len(resp.Moves), "bucket"))
	if n := asked - len(resp.Moves); n > 0 {
		resp.Summary += fmt.Sprintf("; %d %s not (%s switch took longer than %v and was aborted: run the procedure again after cleanup)", n, agree(n, "was", "were"), agree(n, "its", "their"), s.m.cfg.SwitchTimeout)
	}
	return resp, nil
}

// spaceCounts turns counts by space id into the seed's (space, count).
func (s *Service) spaceCounts(bySpace map[uint32]uint64) []*datav1.SpaceCount {
	names := map[uint32]string{}
	var out []*datav1.SpaceCount
	for _, sp := range s.m.cfg.GroupZero.State().Spaces {
		names[sp.GetId()] = sp.GetName()
		// Every space, 0 too, as the seed's copy and cleanup list them.
		out = append(out, &datav1.SpaceCount{Space: sp.GetName(), Count: bySpace[sp.GetId()]})
	}
	for id, n := range bySpace {
		if names[id] == "" {
			out = append(out, &datav1.SpaceCount{Space: fmt.Sprintf("(dropped space %d)", id), Count: n})
		}
	}
	slices.SortFunc(out, func(a, b *datav1.SpaceCount) int { return cmp.Compare(a.GetSpace(), b.GetSpace()) })
	return out
}

// byRoute splits moves into those of each route (source, destination),
// in the order of their first move: the driver's batches.
func byRoute(mvs []*metapb.Move) [][]*metapb.Move {
	index := map[[2]string]int{}
	var out [][]*metapb.Move
	for _, mv := range mvs {
		k := [2]string{mv.GetFrom(), mv.GetTo()}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], mv)
	}
	return out
}

// checkUnderWay refuses a step of the procedure when no reshard is under
// way, or when its buckets are past the step (all finished: only the
// cleanup is left).
func (s *Service) checkUnderWay(step string) error {
	if err := s.checkNoneSwitching(); err != nil {
		return err
	}
	switch copying, finished := len(s.operatorMoves(metapb.Move_PHASE_COPY)), len(s.operatorMoves(metapb.Move_PHASE_CLEANUP)); {
	case copying > 0:
		return nil
	case finished > 0:
		return status.Errorf(codes.FailedPrecondition, "nothing to %s: the reshard's %s copied and finished; next: reshard cleanup", step, meta.Count(finished, "bucket")+" "+agree(finished, "is", "are"))
	}
	return errNoReshard
}

// quotaRetry is how long a reshard copy waits before it asks a
// destination whose receive quota was full again.
const quotaRetry = 200 * time.Millisecond

// quotaOnly reports whether every error joined in err is a full quota
// (ResourceExhausted): then the copy is only early, not refused.
func quotaOnly(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if status.Code(e) != codes.ResourceExhausted {
			return false
		}
	}
	return len(errs) > 0
}

// checkNoneSwitching refuses a later step while some of the reshard's
// buckets are still switching (a start that ran out of time).
func (s *Service) checkNoneSwitching() error {
	if n := s.switching(); n > 0 {
		return status.Errorf(codes.FailedPrecondition, "%s of the reshard %s still switching: run `reshard start` again to wait for %s", meta.Count(n, "bucket"), agree(n, "is", "are"), agree(n, "it", "them"))
	}
	return nil
}

func (s *Service) reshardCopy(ctx context.Context) (*datav1.ReshardResponse, error) {
	if err := s.checkUnderWay("copy"); err != nil {
		return nil, err
	}
	bySpace := map[uint32]uint64{}
	resp := &datav1.ReshardResponse{}
	now := s.m.cfg.Now()
	for _, mvs := range byRoute(s.operatorMoves(metapb.Move_PHASE_COPY)) {
		for left := mvs; len(left) > 0; {
			copied, err := s.m.receive(ctx, left, bySpace)
			for _, mv := range copied {
				resp.Moves = append(resp.Moves, moveInfo(mv, now))
			}
			if err == nil {
				break
			}
			if !quotaOnly(err) {
				return nil, err
			}
			// The destination's receive quota is taken (the rebalancer's
			// moves, say, started before the reshard): copy within it, as
			// the rebalancer does, when there is room again.
			left = without(left, copied)
			if retry.Sleep(ctx, quotaRetry) != nil {
				return nil, status.Errorf(codes.DeadlineExceeded, "%s still %s for room in the receive quota: %v", meta.Count(len(left), "bucket"), agree(len(left), "waits", "wait"), err)
			}
		}
	}
	resp.Counts = s.spaceCounts(bySpace)
	resp.Summary = fmt.Sprintf("%s copied; next: reshard finish", meta.Count(len(resp.Moves), "bucket"))
	return resp, nil
}

func (s *Service) reshardFinish(ctx context.Context) (*datav1.ReshardResponse, error) {
	if err := s.checkUnderWay("finish"); err != nil {
		return nil, err
	}
	resp := &datav1.ReshardResponse{}
	now := s.m.cfg.Now()
	for _, mvs := range byRoute(s.operatorMoves(metapb.Move_PHASE_COPY)) {
		active, err := s.m.setBuckets(ctx, mvs[0].GetTo(), mvs, rspb.BucketState_STATE_ACTIVE, "", rspb.BucketState_STATE_RECEIVING, nil)
		if err != nil && !isRefused(err) {
			return nil, err
		}
		if len(active) > 0 {
			if _, perr := s.m.phases(ctx, active, metapb.Move_PHASE_CLEANUP); perr != nil {
				return nil, perr
			}
		}
		for _, mv := range active {
			resp.Moves = append(resp.Moves, moveInfo(mv, now))
		}
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "%v (run `reshard copy` first)", err)
		}
	}
	resp.Summary = fmt.Sprintf("prev dropped for %s (each active on its new replicaset alone); next: reshard cleanup", meta.Count(len(resp.Moves), "bucket"))
	return resp, nil
}

func (s *Service) reshardCleanup(ctx context.Context) (*datav1.ReshardResponse, error) {
	if err := s.checkNoneSwitching(); err != nil {
		return nil, err
	}
	if n := len(s.operatorMoves(metapb.Move_PHASE_COPY)); n > 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s of the reshard %s not finished (prev still in use): run `reshard finish` first (after `reshard copy`, if it has not run)", meta.Count(n, "bucket"), agree(n, "is", "are"))
	}
	paused := s.m.cfg.GroupZero.State().Props.GetRebalancer().GetPausedByReshard()
	if len(s.operatorMoves(metapb.Move_PHASE_CLEANUP)) == 0 && !paused {
		return nil, errNoReshard
	}
	bySpace := map[uint32]uint64{}
	resp := &datav1.ReshardResponse{}
	now := s.m.cfg.Now()
	for _, mvs := range byRoute(s.operatorMoves(metapb.Move_PHASE_CLEANUP)) {
		garbage, err := s.m.setBuckets(ctx, mvs[0].GetFrom(), mvs, rspb.BucketState_STATE_GARBAGE, "", rspb.BucketState_STATE_SENDING, bySpace)
		if len(garbage) > 0 {
			if _, ferr := s.m.finishes(ctx, garbage); ferr != nil {
				return nil, ferr
			}
		}
		for _, mv := range garbage {
			resp.Moves = append(resp.Moves, moveInfo(mv, now))
		}
		if err != nil {
			return nil, fmt.Errorf("clean up: %w", err)
		}
	}
	paused = s.m.cfg.GroupZero.State().Props.GetRebalancer().GetPausedByReshard()
	if paused {
		// Only what `reshard start` turned off, every other setting kept:
		// an operator's own enable or disable applied first ended the
		// pause, and stands (only_if_paused_by_reshard).
		on := s.namedOver(&metapb.Rebalancer{}, pauseFields)
		if _, err := s.propose(ctx, &metapb.Command{Op: &metapb.Command_SetRebalancer{SetRebalancer: &metapb.SetRebalancer{
			Rebalancer: on, Fields: pauseFields, OnlyIfPausedByReshard: true}}}); err != nil {
			return nil, err
		}
	}
	after := "the rebalancer is off (shardkit rebalance config --enable turns it on)"
	switch on := !s.m.cfg.GroupZero.State().Props.GetRebalancer().GetDisabled(); {
	case on && paused:
		after = "the rebalancer is on again"
	case on:
		after = "the rebalancer is on"
	}
	resp.Counts = s.spaceCounts(bySpace)
	resp.Summary = fmt.Sprintf("%s cleaned up on %s old %s; %s", meta.Count(len(resp.Moves), "bucket"), agree(len(resp.Moves), "its", "their"), agree(len(resp.Moves), "replicaset", "replicasets"), after)
	return resp, nil
}

// agree is one for a count of 1, many for any other: the word that agrees
// with a count ("is" or "are", "its" or "their").
func agree(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
