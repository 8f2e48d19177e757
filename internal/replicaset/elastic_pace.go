package replicaset

import (
	"cmp"
	"log/slog"
	"math"
	"sync"
	"time"
)

// elasticPace is the pace of a copy that yields to the clients by
// itself: the bytes per second the copy of moved buckets into this
// replicaset may propose, set from what the replicaset observes, with no
// operator setting (docs/design/moves.md, "A copy that yields by
// itself"). Moves are elastic work: they take what the clients' writes
// leave and step back when the writes need the cores.
//
// Its contract:
//
//   - The copy calls pace before it proposes (copyPace does, before each
//     part of a chunk) and copied with the bytes it then proposes.
//   - Time is cut into windows of paceWindow, on the clock now; pace ends
//     the window it finds over, and only then asks the signal for the
//     window's value and target.
//   - A window in which the signal told nothing (no client writes, or
//     too few to tell) sets the pace to its ceiling, whether the copy
//     proposed bytes in it or not: there is no one to yield to, and an
//     idle cluster copies (and backs up) at full speed from its first
//     window on, not after a slow start.
//   - A window in which the copy proposed bytes and the signal stayed at
//     or under its target raises the pace: it doubles up to the last pace
//     it halved to, then goes up paceStep a window (TCP's slow start and
//     congestion avoidance). It is not raised while the copy used less
//     than half of it: then the pace is not what holds the copy back.
//   - A window in which the signal went above its target halves the pace,
//     from the bytes the copy proposed in that window when fewer.
//   - The pace never goes below paceFloor (so a move always ends) nor
//     above the operator's bound (--copy-rate; 0: no bound); a bound below
//     paceFloor is the pace.
//   - Otherwise a window with no bytes copied changes nothing; after
//     paceIdle with none, the next copy starts again from paceStart.
//
// One elasticPace serves every copy into its replicaset (the
// ReceiveBuckets calls its leader runs); a copy that reads and streams
// buckets (a backup) may be paced by the same type.
type elasticPace struct {
	signal paceSignal
	now    func() time.Time
	log    *slog.Logger // nil: none

	mu       sync.Mutex
	rate     float64 // bytes per second, paceFloor..paceCeiling
	ssthresh float64 // where doubling stops
	start    time.Time
	bytes    int64     // copied in the window since start
	lastCopy time.Time // the last bytes copied
	// The last window's signal and target, and whether it told anything.
	value, target time.Duration
	measured      bool
	// bucketBytes is the bytes a copied bucket took, a moving average
	// over the copies (0: none yet), for receiveWindow.
	bucketBytes float64
	// idleSince is when the windows began telling nothing (zero while
	// they tell), and measuredRate the pace the last window that told
	// left (0: none yet): a lull in the writes is not an idle cluster
	// (receiveWindow).
	idleSince    time.Time
	measuredRate float64
	// lastUsed is the bytes per second the copy proposed in the last
	// window it copied in (0: none yet).
	lastUsed float64
}

// paceSignal is what an elasticPace watches.
type paceSignal interface {
	// window ends a window: the signal's value over it and the target
	// the value must stay under; ok is false when the window told
	// nothing.
	window() (value, target time.Duration, ok bool)
}

const (
	// paceWindow is how long the pace is held before the signal is read:
	// long enough for a destination leader to apply hundreds of client
	// writes, short enough to step back within a fraction of a second.
	paceWindow = 200 * time.Millisecond
	// paceStart is the pace of a copy that finds none under way.
	paceStart = 4 << 20
	// paceFloor is the least pace (a bucket of 100 rows every 30-60 ms):
	// a move ends however busy the clients keep the replicaset.
	paceFloor = 1 << 20
	// paceStep is how much a window under target adds past the last
	// halving.
	paceStep = 1 << 20
	// paceCeiling is the pace with no operator bound: more than a copy
	// gets through on any machine this project runs on.
	paceCeiling = 1 << 30
	// paceIdle is how long without a copy resets the pace to paceStart.
	paceIdle = 5 * time.Second
)

func newElasticPace(signal paceSignal, now func() time.Time) *elasticPace {
	if now == nil {
		now = time.Now
	}
	return &elasticPace{signal: signal, now: now, rate: paceStart, ssthresh: paceCeiling, start: now()}
}

// pace returns the bytes per second the copy may propose now, within
// bound (the operator's; 0: none), ending the window if it is over.
func (e *elasticPace) pace(bound uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.step(bound)
	r := e.rate
	if bound > 0 && float64(bound) < r {
		r = float64(bound)
	}
	return uint64(r)
}

// copied counts n bytes proposed by the copy.
func (e *elasticPace) copied(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bytes += int64(n)
	e.lastCopy = e.now()
}

// step ends the window when it is over and sets the pace from it.
func (e *elasticPace) step(bound uint64) {
	now := e.now()
	took := now.Sub(e.start)
	if took < paceWindow {
		return
	}
	copying := e.bytes > 0
	value, target, ok := e.signal.window()
	e.value, e.target, e.measured = value, target, ok
	used := float64(e.bytes) / took.Seconds()
	e.start, e.bytes = now, 0
	ceiling := float64(paceCeiling)
	if bound > 0 {
		ceiling = float64(bound)
	}
	switch {
	case !ok:
		e.rate, e.ssthresh = paceCeiling, paceCeiling
	case !copying:
		if !e.lastCopy.IsZero() && now.Sub(e.lastCopy) >= paceIdle {
			e.rate, e.ssthresh, e.lastCopy = paceStart, paceCeiling, time.Time{}
		}
	case value > target:
		e.rate = min(e.rate, used) / 2
		e.ssthresh = e.rate
	case used < e.rate/2:
		// Held back by something else (the source, the log): a higher
		// pace would only let a later burst through.
	case e.rate < e.ssthresh:
		e.rate = min(2*e.rate, e.ssthresh)
	default:
		e.rate += paceStep
	}
	e.rate = min(max(e.rate, paceFloor), ceiling) // a bound below the floor wins
	if copying {
		e.lastUsed = used
	}
	switch {
	case ok:
		e.idleSince, e.measuredRate = time.Time{}, e.rate
	case e.idleSince.IsZero():
		e.idleSince = now
	}
	if e.log != nil && copying {
		e.log.Debug("copy pace", "pace", int64(e.rate), "used", int64(used), "delay", value, "target", target, "measured", ok)
	}
}

// Receive windows: how many buckets a destination takes into its prev
// window at once (receiveWindow).
const (
	// receiveHorizon is how long the buckets of a receive window take to
	// copy at the pace: about how long each waits in its prev window,
	// every write to it asking its source first.
	receiveHorizon = 250 * time.Millisecond
	// minReceiveWindow is the least window: a move always goes on.
	minReceiveWindow = 4
	// receiveIdle is how long the pace's windows must have told nothing
	// (no client writes) before the receive window is no bound: a
	// shorter lull (clients between two bursts) keeps the window of the
	// pace before it, since moves started cannot be taken back.
	receiveIdle = time.Second
	// bucketBytesWeight is the weight of the latest copy in bucketBytes.
	bucketBytesWeight = 0.25
)

// copiedBuckets counts a copy of n buckets that took bytes in all.
func (e *elasticPace) copiedBuckets(bytes int64, n int) {
	if n <= 0 || bytes <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	per := float64(bytes) / float64(n)
	if e.bucketBytes == 0 {
		e.bucketBytes = per
		return
	}
	e.bucketBytes += bucketBytesWeight * (per - e.bucketBytes)
}

// receiveWindow returns how many buckets the copy into this replicaset
// takes at once at its pace now (within bound, the operator's; 0: none):
// what it copies in receiveHorizon, at least minReceiveWindow. It is 0
// (no bound but the quotas) while the pace is at its ceiling (no clients
// to yield to: an idle cluster moves as many at once as the quotas let)
// or no copy has told a bucket's size yet. The pace goes to its ceiling
// at the first window with too few writes to tell; the window waits for
// receiveIdle of them, keeping the last pace measured (paceStart if
// none) through a shorter lull. While writes are measured, the window is
// also at most twice what the copy got through in the last window it
// copied in (paceStart's before any): a pace that no write delay has
// halved yet is still at its ceiling, which says nothing of how many
// buckets the copy gets through. The rebalancer starts no more
// moves into the replicaset than this (docs/design/moves.md, "A copy
// that yields by itself"): the pace alone sets bytes per second, while
// every bucket switched waits in its prev window until its copy ends,
// and at the floor's pace each of a batch of a hundred waits there for
// seconds.
func (e *elasticPace) receiveWindow(bound uint64) uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.receiveWindowLocked(bound)
}

func (e *elasticPace) receiveWindowLocked(bound uint64) uint32 {
	if e.bucketBytes == 0 {
		return 0
	}
	r := e.rate
	switch idle := !e.idleSince.IsZero(); {
	case idle && e.now().Sub(e.idleSince) >= receiveIdle:
		r = paceCeiling // no clients: no bound but the operator's
	default:
		if idle {
			r = cmp.Or(e.measuredRate, paceStart) // a lull, not yet idleness
		}
		// What the copy got through, doubled (it may grow by half a
		// second's worth a round), or paceStart before it copied.
		r = min(r, cmp.Or(2*e.lastUsed, paceStart))
	}
	if bound > 0 {
		r = min(r, float64(bound))
	}
	if r >= paceCeiling {
		return 0
	}
	n := r * receiveHorizon.Seconds() / e.bucketBytes
	return uint32(min(max(n, minReceiveWindow), math.MaxUint32))
}

// PaceState is what the copy's pace into a replicaset is now.
type PaceState struct {
	// BytesPerS is the pace, within the operator's bound.
	BytesPerS uint64
	// Signal and Target are the last window's value of what the pace
	// watches and the target it must stay under; Measured is false when
	// that window told nothing (no client writes).
	Signal, Target time.Duration
	Measured       bool
	// Off: the operator turned the pace off (`rebalance config
	// --copy-pace off`); BytesPerS is the operator's bound alone.
	Off bool
	// ReceiveWindow is how many buckets the copy takes at once at the
	// pace (receiveWindow; 0: no bound but the quotas).
	ReceiveWindow uint32
}

// state reports the pace within bound, without ending a window.
func (e *elasticPace) state(bound uint64) PaceState {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := uint64(e.rate)
	if bound > 0 {
		r = min(r, bound)
	}
	return PaceState{BytesPerS: r, Signal: e.value, Target: e.target, Measured: e.measured, ReceiveWindow: e.receiveWindowLocked(bound)}
}
