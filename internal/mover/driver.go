package mover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/retry"
)

// The driver steps moves through their phases in batches: the moves of
// one route (same source, same destination) that are in the same phase
// take each step together, as one entry in group 0 or in a replicaset's
// log and one RPC for all of them (MoveSteps, SetBuckets, ReceiveBuckets).
// A move's steps and their checks are those of a move alone: each bucket's
// step is applied and answered on its own, so a bucket refused at a step
// goes its own way (abort, or retry) without holding the others back, and
// a batch of one is a single move.
//
// The steps of a batch, in order (each durable before the next; a crash
// anywhere resumes from the phases recorded in group 0):
//
//	PREPARE:  1. destination: -> RECEIVING      (SetBuckets)
//	          2. source: ACTIVE -> SENDING      (SetBuckets; writes refused from here)
//	          3. group 0: PREPARE -> COPY       (MoveSteps; the switch, writes go to the destination)
//	          (past Config.SwitchTimeout, or refused at 1 or 2: PREPARE -> ABORTING)
//	COPY:     4. destination copies from source (ReceiveBuckets, one stream)
//	          5. destination: RECEIVING -> ACTIVE
//	          6. group 0: COPY -> CLEANUP
//	CLEANUP:  7. source: SENDING -> GARBAGE     (its tuples deleted)
//	          8. group 0: the moves are forgotten (FinishMove)
//	ABORTING: source -> ACTIVE, destination -> GARBAGE, at the move's
//	          generation (fences against a PREPARE step applied late), forgotten.

// MaxBatch bounds the moves one driver steps together.
const MaxBatch = 1024

// startDrivers starts a driver for every batch of recorded moves not
// driven yet, a batch per route.
func (m *Mover) startDrivers(ctx context.Context) {
	st := m.cfg.GroupZero.State()
	routes := map[[2]string][]uint32{}
	m.mu.Lock()
	for b, mv := range st.Moves {
		if m.active[b] || operatorDone(mv) {
			continue
		}
		m.active[b] = true
		k := [2]string{mv.GetFrom(), mv.GetTo()}
		routes[k] = append(routes[k], b)
	}
	m.mu.Unlock()
	for _, bs := range routes {
		slices.Sort(bs)
		for part := range slices.Chunk(bs, MaxBatch) {
			m.wg.Go(func() { m.drive(ctx, part) })
		}
	}
}

// operatorDone: an operator's move past the switch is the operator's
// reshard steps' to finish, not the driver's.
func operatorDone(mv *metapb.Move) bool {
	return mv.GetOperator() && (mv.GetPhase() == metapb.Move_PHASE_COPY || mv.GetPhase() == metapb.Move_PHASE_CLEANUP)
}

// drive steps the moves of buckets to their ends (or until this instance
// stops leading group 0), a phase at a time.
func (m *Mover) drive(ctx context.Context, buckets []uint32) {
	left := map[uint32]bool{}
	for _, b := range buckets {
		left[b] = true
	}
	release := func(b uint32) {
		delete(left, b)
		m.mu.Lock()
		delete(m.active, b)
		m.mu.Unlock()
	}
	defer func() {
		for b := range left {
			release(b)
		}
	}()
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil && m.cfg.GroupZero.Leads() {
		st := m.cfg.GroupZero.State()
		type key struct {
			phase    metapb.Move_Phase
			from, to string
		}
		groups := map[key][]*metapb.Move{}
		for b := range left {
			mv := st.Moves[b]
			if mv == nil || operatorDone(mv) {
				release(b)
				continue
			}
			k := key{mv.GetPhase(), mv.GetFrom(), mv.GetTo()}
			groups[k] = append(groups[k], mv)
		}
		if len(left) == 0 {
			return
		}
		keys := make([]key, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b key) int {
			return cmp.Or(cmp.Compare(a.phase, b.phase), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
		})
		var failed error
		for _, k := range keys {
			mvs := groups[k]
			slices.SortFunc(mvs, func(a, b *metapb.Move) int { return cmp.Compare(a.GetBucket(), b.GetBucket()) })
			if err := m.step(ctx, mvs); err != nil {
				if ctx.Err() != nil {
					return
				}
				lvl := slog.LevelWarn
				if status.Code(err) == codes.ResourceExhausted {
					lvl = slog.LevelDebug
				}
				m.log.Log(ctx, lvl, "bucket move step failed; will retry", "buckets", describeBuckets(mvs), "from", k.from, "to", k.to,
					"phase", k.phase.String(), "err", err)
				failed = err
			}
		}
		if failed == nil {
			backoff.Reset()
			continue
		}
		_ = retry.Sleep(ctx, backoff.Next()) // the loop ends with ctx
	}
}

// describeBuckets names the buckets of moves for a log line: all of them
// when few, else the first ones and how many.
func describeBuckets(mvs []*metapb.Move) string {
	const shown = 8
	var bs []uint32
	for _, mv := range mvs[:min(len(mvs), shown)] {
		bs = append(bs, mv.GetBucket())
	}
	if len(mvs) <= shown {
		return fmt.Sprint(bs)
	}
	return fmt.Sprintf("%v and %d more", bs, len(mvs)-shown)
}

// step does the work of one phase for moves of one route, all in that
// phase, and records the next phase of each that did it. It returns an
// error when any of them did not get through (they are stepped again).
func (m *Mover) step(ctx context.Context, mvs []*metapb.Move) error {
	from, to := mvs[0].GetFrom(), mvs[0].GetTo()
	switch mvs[0].GetPhase() {
	case metapb.Move_PHASE_PREPARE:
		pctx, cancel := context.WithTimeout(ctx, m.cfg.SwitchTimeout)
		ready, refused, err := m.prepare(pctx, mvs)
		// Past the switch timeout: this attempt's, or the moves' own (a
		// replicaset failing fast, attempt after attempt, while the source
		// may have frozen the buckets). Checked before cancel, which
		// would end pctx too.
		expired := pctx.Err() != nil || m.cfg.Now().Sub(startedAt(mvs)) > m.cfg.SwitchTimeout
		cancel()
		if expired && ctx.Err() == nil && (err != nil || len(ready) > 0) {
			// Past the switch timeout none of them switches, even those
			// prepared (late, after retries): the source has refused
			// their writes since its freeze, and the timeout is what
			// bounds that. Each is aborted instead.
			why := err
			if why == nil {
				why = fmt.Errorf("prepared %v after the moves started", m.cfg.Now().Sub(startedAt(mvs)).Round(time.Millisecond))
			}
			m.log.Warn("aborting bucket moves: not prepared within the switch timeout", "buckets", describeBuckets(mvs),
				"from", from, "to", to, "switch_timeout", m.cfg.SwitchTimeout, "why", why)
			ready, refused, err = nil, mvs, nil
		}
		if err != nil {
			return err
		}
		var errs []error
		if len(refused) > 0 {
			if _, err := m.phases(ctx, refused, metapb.Move_PHASE_ABORTING); err != nil {
				errs = append(errs, err)
			}
		}
		if len(ready) > 0 {
			if _, err := m.phases(ctx, ready, metapb.Move_PHASE_COPY); err != nil {
				errs = append(errs, err)
			} else if err := m.cfg.Failpoints.Eval(FailpointSwitched); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	case metapb.Move_PHASE_COPY:
		copied, err := m.receive(ctx, mvs, nil)
		if len(copied) == 0 {
			return err
		}
		if ferr := m.cfg.Failpoints.Eval(FailpointCopied); ferr != nil {
			return ferr
		}
		active, aerr := m.setBuckets(ctx, to, copied, rspb.BucketState_STATE_ACTIVE, "", rspb.BucketState_STATE_RECEIVING, nil)
		err = errors.Join(err, aerr)
		if len(active) == 0 {
			return err
		}
		if ferr := m.cfg.Failpoints.Eval(FailpointDestinationActive); ferr != nil {
			return ferr
		}
		if _, perr := m.phases(ctx, active, metapb.Move_PHASE_CLEANUP); perr != nil {
			return errors.Join(err, perr)
		}
		return errors.Join(err, m.cfg.Failpoints.Eval(FailpointCleanupMarked))
	case metapb.Move_PHASE_CLEANUP:
		garbage, err := m.setBuckets(ctx, from, mvs, rspb.BucketState_STATE_GARBAGE, "", rspb.BucketState_STATE_SENDING, nil)
		if len(garbage) == 0 {
			return err
		}
		if ferr := m.cfg.Failpoints.Eval(FailpointSourceGarbage); ferr != nil {
			return ferr
		}
		_, ferr := m.finishes(ctx, garbage)
		return errors.Join(err, ferr)
	case metapb.Move_PHASE_ABORTING:
		// Undo what PREPARE may have done, and fence what it has not done
		// yet: a PREPARE step whose call timed out can still be in its
		// replicaset's log and be applied after the abort. The source
		// takes ACTIVE at the move's generation (a SENDING of it that
		// comes later is refused), the destination GARBAGE at it whatever
		// it holds of the move (a late RECEIVING is refused). The source
		// goes first: the bucket takes writes again even while the
		// destination does not answer (the switch never happened, so no
		// router sends it anything, and a receiving bucket serves nothing
		// without its source frozen). A step refused (the bucket is
		// elsewhere in its life) is fine.
		if _, err := m.setBuckets(ctx, from, mvs, rspb.BucketState_STATE_ACTIVE, "", rspb.BucketState_STATE_UNSPECIFIED, nil); err != nil && !isRefused(err) {
			return err
		}
		if _, err := m.setBuckets(ctx, to, mvs, rspb.BucketState_STATE_GARBAGE, "", rspb.BucketState_STATE_UNSPECIFIED, nil); err != nil && !isRefused(err) {
			return err
		}
		_, err := m.finishes(ctx, mvs)
		return err
	}
	return fmt.Errorf("buckets %s: moves in an unknown phase %v", describeBuckets(mvs), mvs[0].GetPhase())
}

// startedAt returns when the oldest of the moves was started.
func startedAt(mvs []*metapb.Move) time.Time {
	ms := mvs[0].GetStartedUnixMs()
	for _, mv := range mvs {
		ms = min(ms, mv.GetStartedUnixMs())
	}
	return time.UnixMilli(ms)
}

// prepare readies the destination, then freezes the buckets on the
// source. It returns the moves ready to switch and those refused by either
// (to be aborted); an error when the steps could not be done (nothing to
// abort).
//
// The destination goes first so that a bucket refuses writes (from its
// source's SENDING to group 0's switch) for two consensus steps, not
// three: the destination's RECEIVING is recorded while the source still
// serves the bucket. That is safe because a receiving bucket serves
// nothing without its source frozen: every write to it needs the
// source's prev facts, every read of a key it lacks and its copy read
// the source, and the source answers them only while it sends the bucket
// at the move's generation (Storage.readFrozen, SendBuckets); before the
// switch no router sends the destination anything anyway.
func (m *Mover) prepare(ctx context.Context, mvs []*metapb.Move) (ready, refused []*metapb.Move, err error) {
	from, to := mvs[0].GetFrom(), mvs[0].GetTo()
	receiving, err := m.setBuckets(ctx, to, mvs, rspb.BucketState_STATE_RECEIVING, from, rspb.BucketState_STATE_UNSPECIFIED, nil)
	if err != nil && !isRefused(err) {
		return nil, nil, err
	}
	refused = without(mvs, receiving)
	if len(receiving) == 0 {
		return nil, refused, nil
	}
	if err := m.cfg.Failpoints.Eval(FailpointDestinationReceiving); err != nil {
		return nil, nil, err
	}
	ready, err = m.setBuckets(ctx, from, receiving, rspb.BucketState_STATE_SENDING, to, rspb.BucketState_STATE_ACTIVE, nil)
	if err != nil && !isRefused(err) {
		return nil, nil, err
	}
	refused = append(refused, without(receiving, ready)...)
	if len(ready) > 0 {
		if err := m.cfg.Failpoints.Eval(FailpointSourceSending); err != nil {
			return nil, nil, err
		}
	}
	return ready, refused, nil
}

// without returns the moves of all that are not in some.
func without(all, some []*metapb.Move) []*metapb.Move {
	in := map[uint32]bool{}
	for _, mv := range some {
		in[mv.GetBucket()] = true
	}
	var out []*metapb.Move
	for _, mv := range all {
		if !in[mv.GetBucket()] {
			out = append(out, mv)
		}
	}
	return out
}

// setBuckets takes the moves' buckets to state on replicaset rsID, in one
// entry, each only from state from (UNSPECIFIED: any). It returns the
// moves whose bucket is in state now (moved now or before), and a
// *refusedError naming those refused, or another error when the call
// failed as a whole (then none moved).
// deleted, when not nil, adds up the tuples a GARBAGE step deleted, by space.
func (m *Mover) setBuckets(ctx context.Context, rsID string, mvs []*metapb.Move, state rspb.BucketState_State, peer string, from rspb.BucketState_State, deleted map[uint32]uint64) ([]*metapb.Move, error) {
	steps := make([]*rspb.SetBucket, len(mvs))
	for i, mv := range mvs {
		steps[i] = &rspb.SetBucket{Bucket: mv.GetBucket(), State: state, Generation: mv.GetGeneration(), Peer: peer, From: from}
	}
	var resp *rspb.SetBucketsResponse
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StepTimeout)
	defer cancel()
	err := m.onLeader(ctx, rsID, func(ctx context.Context, c rspb.BucketServiceClient) error {
		var err error
		resp, err = c.SetBuckets(ctx, &rspb.SetBucketsRequest{ReplicasetId: rsID, Steps: steps})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replicaset %s: buckets %s to %s: %w", rsID, describeBuckets(mvs), state, err)
	}
	if len(resp.GetResults()) != len(mvs) {
		return nil, fmt.Errorf("replicaset %s: %d results for %d bucket steps", rsID, len(resp.GetResults()), len(mvs))
	}
	var done []*metapb.Move
	var why []string
	for i, r := range resp.GetResults() {
		if r.GetRefused() != "" {
			why = append(why, r.GetRefused())
			continue
		}
		done = append(done, mvs[i])
		if deleted != nil {
			for sp, n := range r.GetDeletedBySpace() {
				deleted[sp] += n
			}
		}
	}
	if len(why) > 0 {
		return done, &refusedError{err: fmt.Errorf("replicaset %s refused %d of %d bucket steps to %s: %s", rsID, len(why), len(mvs), strings.TrimPrefix(state.String(), "STATE_"), summarize(why))}
	}
	return done, nil
}

// summarize joins reasons for a log line, the first few of them.
func summarize(why []string) string {
	const shown = 3
	s := strings.Join(why[:min(len(why), shown)], "; ")
	if len(why) > shown {
		s += fmt.Sprintf(" and %d more", len(why)-shown)
	}
	return s
}

// receive has the destination copy the moves' buckets from the source,
// as concurrent streams of at most CopyStreamBuckets buckets, together at
// most the smaller quota. It returns the moves copied (now or before), in
// bucket order, and an error naming those that were not; copied, when not
// nil, adds up the tuples inserted, by space.
func (m *Mover) receive(ctx context.Context, mvs []*metapb.Move, copied map[uint32]uint64) ([]*metapb.Move, error) {
	from, to := mvs[0].GetFrom(), mvs[0].GetTo()
	_, maxSend, maxRecv, _ := Settings(m.cfg.GroupZero.State().Props.GetRebalancer())
	var (
		mu   sync.Mutex
		done []*metapb.Move
		errs []error
		wg   sync.WaitGroup
	)
	quota := max(1, min(maxSend, maxRecv))
	size := min(quota, CopyStreamBuckets)
	streams := make(chan struct{}, max(1, quota/size))
	for part := range slices.Chunk(mvs, size) {
		streams <- struct{}{}
		wg.Go(func() {
			defer func() { <-streams }()
			req := &rspb.ReceiveBucketsRequest{ReplicasetId: to, From: from}
			for _, mv := range part {
				req.Buckets = append(req.Buckets, &rspb.BucketGeneration{Bucket: mv.GetBucket(), Generation: mv.GetGeneration()})
			}
			var resp *rspb.ReceiveBucketsResponse
			err := m.onLeader(ctx, to, func(ctx context.Context, c rspb.BucketServiceClient) error {
				var err error
				resp, err = c.ReceiveBuckets(ctx, req)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("copy of buckets %s: %w", describeBuckets(part), err))
				return
			}
			m.recordWindow(to, resp.GetWindow())
			var why []string
			for i, r := range resp.GetResults() {
				if i >= len(part) {
					break
				}
				if r.GetRefused() != "" {
					why = append(why, r.GetRefused())
					continue
				}
				done = append(done, part[i])
				if copied != nil {
					for sp, n := range r.GetCopiedBySpace() {
						copied[sp] += n
					}
				}
				m.log.Debug("bucket copied", "bucket", r.GetBucket(), "to", to, "sent", r.GetSent(), "copied", r.GetCopied())
			}
			if len(why) > 0 {
				errs = append(errs, fmt.Errorf("copy: %s refused %d of %s: %s", to, len(why), meta.Count(len(part), "bucket"), summarize(why)))
			}
		})
	}
	wg.Wait()
	slices.SortFunc(done, func(a, b *metapb.Move) int { return cmp.Compare(a.GetBucket(), b.GetBucket()) })
	return done, errors.Join(errs...)
}

// phases advances the moves in group 0, in one entry; it returns those
// that are in phase p now and an error naming the others.
func (m *Mover) phases(ctx context.Context, mvs []*metapb.Move, p metapb.Move_Phase) ([]*metapb.Move, error) {
	steps := make([]*metapb.Command, len(mvs))
	for i, mv := range mvs {
		steps[i] = &metapb.Command{Op: &metapb.Command_SetMovePhase{SetMovePhase: &metapb.SetMovePhase{
			Bucket: mv.GetBucket(), Generation: mv.GetGeneration(), Phase: p}}}
	}
	return m.moveSteps(ctx, mvs, steps, func(mv *metapb.Move) {
		m.log.Debug("bucket move", "bucket", mv.GetBucket(), "phase", p.String())
	})
}

// finishes forgets the moves in group 0 (each done or undone), in one entry.
func (m *Mover) finishes(ctx context.Context, mvs []*metapb.Move) ([]*metapb.Move, error) {
	steps := make([]*metapb.Command, len(mvs))
	for i, mv := range mvs {
		steps[i] = &metapb.Command{Op: &metapb.Command_FinishMove{FinishMove: &metapb.FinishMove{
			Bucket: mv.GetBucket(), Generation: mv.GetGeneration()}}}
	}
	return m.moveSteps(ctx, mvs, steps, func(mv *metapb.Move) {
		how := "moved"
		if mv.GetPhase() == metapb.Move_PHASE_ABORTING {
			how = "move aborted"
		}
		m.log.Debug("bucket "+how, "bucket", mv.GetBucket(), "from", mv.GetFrom(), "to", mv.GetTo(), "generation", mv.GetGeneration())
	})
}

func (m *Mover) moveSteps(ctx context.Context, mvs []*metapb.Move, steps []*metapb.Command, done func(*metapb.Move)) ([]*metapb.Move, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StepTimeout)
	defer cancel()
	res, err := m.cfg.GroupZero.Propose(ctx, &metapb.Command{Op: &metapb.Command_MoveSteps{MoveSteps: &metapb.MoveSteps{Steps: steps}}})
	if err != nil {
		return nil, fmt.Errorf("group 0: moves of buckets %s: %w", describeBuckets(mvs), err)
	}
	if len(res.Steps) != len(mvs) {
		return nil, fmt.Errorf("group 0: %d results for %d move steps", len(res.Steps), len(mvs))
	}
	var ok []*metapb.Move
	var why []string
	for i, r := range res.Steps {
		if r.Err != nil {
			why = append(why, r.Err.Error())
			continue
		}
		ok = append(ok, mvs[i])
		done(mvs[i])
	}
	if len(why) > 0 {
		return ok, fmt.Errorf("group 0 refused %d of %d move steps: %s", len(why), len(mvs), summarize(why))
	}
	return ok, nil
}
