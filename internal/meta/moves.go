package meta

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/sharding"
)

// Bucket moves, group 0's side. A move is recorded here before any
// replicaset acts on it, and group 0 alone decides its turning points: the
// switch of the bucket's curr to the destination (PREPARE -> COPY) and the
// abort (PREPARE -> ABORTING) exclude each other, so a replicaset takes
// the bucket back only when no router can send it to the destination.

func (t *txn) ownMoves() {
	if !t.s.own.moves {
		t.s.Moves = maps.Clone(t.s.Moves)
		t.s.own.moves = true
	}
}

func (t *txn) putMove(mv *metapb.Move) {
	t.ownMoves()
	t.s.Moves[mv.GetBucket()] = mv
	t.write(keyMove(mv.GetBucket()), mv)
}

func (t *txn) deleteMove(b uint32) {
	t.ownMoves()
	delete(t.s.Moves, b)
	if t.err == nil {
		t.err = t.b.Delete(keyMove(b), nil)
	}
}

func (t *txn) checkBucket(b uint32) *Refusal {
	if n := t.s.Props.GetBucketCount(); b < 1 || b > n {
		return refuse(CodeInvalid, "bucket %d is outside [1, %d]", b, n)
	}
	if !t.s.Props.GetBucketsBootstrapped() {
		return refuse(CodeUnavailable, "buckets are not bootstrapped yet; retry")
	}
	return nil
}

func (t *txn) startMove(c *metapb.StartMove) Result {
	b := c.GetBucket()
	if err := t.checkBucket(b); err != nil {
		return Result{Err: err}
	}
	if mv := t.s.Moves[b]; mv != nil {
		return Result{Err: refuse(CodeFailedPrecondition, "bucket %d is already moving from %s to %s", b, mv.GetFrom(), mv.GetTo())}
	}
	from := t.s.Buckets[b-1]
	to := c.GetTo()
	// Checked before the pin: a pinned bucket asked to stay where it is
	// is refused for what was asked, not for the pin.
	if from == to {
		return Result{Err: refuse(CodeInvalid, "bucket %d is on %s already", b, to)}
	}
	if t.s.Pinned[b] {
		return Result{Err: refuse(CodeFailedPrecondition, "bucket %d is pinned to %s; unpin it first (shardkit bucket unpin %d)", b, from, b)}
	}
	for _, id := range []string{from, to} {
		rs := t.s.Replicasets[id]
		switch {
		case rs == nil || rs.GetExpelled():
			return Result{Err: refuse(CodeNotFound, "no replicaset %q in service (%s)", id, t.s.InService())}
		case rs.GetLocked():
			return Result{Err: refuse(CodeFailedPrecondition, "replicaset %s is locked: it neither sends nor receives buckets (shardkit replicaset unlock %s)", id, id)}
		}
	}
	mv := &metapb.Move{Bucket: b, From: from, To: to, Generation: t.s.Generation(b) + 1,
		Phase: metapb.Move_PHASE_PREPARE, StartedUnixMs: t.now, Reason: c.GetReason(), Operator: c.GetOperator()}
	t.putMove(mv)
	return Result{Move: mv}
}

func (t *txn) setMovePhase(c *metapb.SetMovePhase) Result {
	b := c.GetBucket()
	mv := t.s.Moves[b]
	if mv == nil || mv.GetGeneration() != c.GetGeneration() {
		return Result{Err: refuse(CodeNotFound, "no move of bucket %d at generation %d", b, c.GetGeneration())}
	}
	if mv.GetPhase() == c.GetPhase() {
		return Result{Move: mv} // a repeated step
	}
	ok := false
	switch c.GetPhase() {
	case metapb.Move_PHASE_COPY, metapb.Move_PHASE_ABORTING:
		ok = mv.GetPhase() == metapb.Move_PHASE_PREPARE
	case metapb.Move_PHASE_CLEANUP:
		ok = mv.GetPhase() == metapb.Move_PHASE_COPY
	}
	if !ok {
		return Result{Move: mv, Err: refuse(CodeFailedPrecondition, "the move of bucket %d is in phase %s; it cannot go to %s", b, mv.GetPhase(), c.GetPhase())}
	}
	n := proto.CloneOf(mv)
	n.Phase = c.GetPhase()
	t.putMove(n)
	if c.GetPhase() == metapb.Move_PHASE_COPY {
		// The switch: routers send the bucket to its destination.
		t.putBuckets(b, b, mv.GetTo())
		p := t.s.editProps()
		p.ShardingVersion++
		t.putProps(p)
	}
	return Result{Move: n}
}

func (t *txn) finishMove(c *metapb.FinishMove) Result {
	b := c.GetBucket()
	mv := t.s.Moves[b]
	if mv == nil || mv.GetGeneration() != c.GetGeneration() {
		return Result{Err: refuse(CodeNotFound, "no move of bucket %d at generation %d", b, c.GetGeneration())}
	}
	if mv.GetPhase() != metapb.Move_PHASE_CLEANUP && mv.GetPhase() != metapb.Move_PHASE_ABORTING {
		return Result{Move: mv, Err: refuse(CodeFailedPrecondition, "the move of bucket %d is in phase %s, not finished", b, mv.GetPhase())}
	}
	t.deleteMove(b)
	// The generation is used up either way: the source may have recorded
	// it (sending, then active again after an abort).
	if !t.s.own.generations {
		t.s.Generations = maps.Clone(t.s.Generations)
		t.s.own.generations = true
	}
	t.s.Generations[b] = mv.GetGeneration()
	if t.err == nil {
		t.err = t.b.Set(keyGen(b), binary.BigEndian.AppendUint64(nil, mv.GetGeneration()), nil)
	}
	return Result{Move: mv}
}

// moveSteps applies each step on its own (MoveSteps): a refused step has
// its refusal in its own result and does not stop the others.
func (t *txn) moveSteps(c *metapb.MoveSteps) Result {
	res := Result{Steps: make([]Result, len(c.GetSteps()))}
	for i, s := range c.GetSteps() {
		switch op := s.GetOp().(type) {
		case *metapb.Command_StartMove:
			res.Steps[i] = t.startMove(op.StartMove)
		case *metapb.Command_SetMovePhase:
			res.Steps[i] = t.setMovePhase(op.SetMovePhase)
		case *metapb.Command_FinishMove:
			res.Steps[i] = t.finishMove(op.FinishMove)
		default:
			res.Steps[i] = Result{Err: refuse(CodeInvalid, "step %d of a batch of moves is a %T, not a move step", i+1, op)}
		}
		if t.err != nil {
			return Result{}
		}
	}
	return res
}

func (t *txn) pinBucket(c *metapb.PinBucket) Result {
	b := c.GetBucket()
	if err := t.checkBucket(b); err != nil {
		return Result{Err: err}
	}
	t.s.Pinned = maps.Clone(t.s.Pinned)
	if c.GetPinned() {
		t.s.Pinned[b] = true
		if t.err == nil {
			t.err = t.b.Set(keyPin(b), nil, nil)
		}
	} else {
		delete(t.s.Pinned, b)
		if t.err == nil {
			t.err = t.b.Delete(keyPin(b), nil)
		}
	}
	return Result{}
}

// PinnedOn returns the pinned buckets that group 0 places on a
// replicaset, lowest first.
func (s *State) PinnedOn(rsID string) []uint32 {
	var out []uint32
	for b := range s.Pinned {
		if b >= 1 && int(b) <= len(s.Buckets) && s.Buckets[b-1] == rsID {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// unpinListed is how many buckets UnpinCommand names at most.
const unpinListed = 20

// UnpinCommand is the command that unpins buckets (lowest first): all of
// them, or the first unpinListed and how many more there are.
func UnpinCommand(buckets []uint32) string {
	var b strings.Builder
	b.WriteString("shardkit bucket unpin")
	for _, n := range buckets[:min(len(buckets), unpinListed)] {
		fmt.Fprintf(&b, " %d", n)
	}
	if more := len(buckets) - unpinListed; more > 0 {
		fmt.Fprintf(&b, ", then the %s that `shardkit rebalance status --format json` lists as pinned_buckets", Count(more, "more pinned bucket"))
	}
	return b.String()
}

// Count is "1 bucket" or "N buckets": a count and its noun (one whose
// plural takes an s).
func Count[N ~int | ~int64 | ~uint32 | ~uint64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// BalanceGroups returns the replicasets in service as the bucket balance
// sees them: weight, buckets held (group 0's map) and pinned buckets.
func (s *State) BalanceGroups() []sharding.Group {
	counts := s.BucketCounts()
	pinned := map[string]int{}
	for b := range s.Pinned {
		if b >= 1 && int(b) <= len(s.Buckets) {
			pinned[s.Buckets[b-1]]++
		}
	}
	var out []sharding.Group
	for _, rs := range s.SortedReplicasets() {
		if rs.GetExpelled() {
			continue
		}
		id := rs.GetReplicasetId()
		out = append(out, sharding.Group{ID: id, Weight: rs.GetWeight(), Buckets: counts[id], Pinned: pinned[id]})
	}
	return out
}

// MergeRebalancer returns the rebalancer settings that set makes of cur:
// cur unchanged when set's condition does not hold (only_if_enabled,
// only_if_paused_by_reshard); else set's rebalancer whole when it names
// no fields, else cur with the named fields taken from set's rebalancer
// (a name no field has is left out: the service refuses it before
// proposing). A reshard's pause holds only while the rebalancer is
// disabled, and an operator's own enable or disable (disabled named
// without paused_by_reshard) clears it: the reshard's cleanup then leaves
// the rebalancer as the operator set it.
func MergeRebalancer(cur *metapb.Rebalancer, set *metapb.SetRebalancer) *metapb.Rebalancer {
	if set.GetOnlyIfEnabled() && cur.GetDisabled() || set.GetOnlyIfPausedByReshard() && !cur.GetPausedByReshard() {
		return cur
	}
	in := set.GetRebalancer()
	if in == nil {
		in = &metapb.Rebalancer{}
	}
	if len(set.GetFields()) == 0 {
		out := proto.CloneOf(in)
		out.PausedByReshard = out.GetPausedByReshard() && out.GetDisabled()
		return out
	}
	out := proto.CloneOf(cur)
	if out == nil {
		out = &metapb.Rebalancer{}
	}
	src, dst := in.ProtoReflect(), out.ProtoReflect()
	fds := dst.Descriptor().Fields()
	named := map[string]bool{}
	for _, name := range set.GetFields() {
		fd := fds.ByName(protoreflect.Name(name))
		if fd == nil {
			continue
		}
		named[name] = true
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
	}
	if named["disabled"] && !named["paused_by_reshard"] {
		out.PausedByReshard = false
	}
	out.PausedByReshard = out.GetPausedByReshard() && out.GetDisabled()
	return out
}
