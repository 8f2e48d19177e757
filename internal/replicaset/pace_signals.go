package replicaset

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// writeDelay is the signal an elasticPace watches: how long this
// replicaset's leader takes to log and apply a client's write (from its
// proposal to its applied result). A window's value is the
// writeDelayQuantile of its writes' delays; its target is
// writeDelayFactor times the base, at least writeDelayFloor. The base is
// the same quantile of the writes that met no copy entry (none was
// proposed and not yet applied while the write was: copyInLog), the
// median of the last writeDelayCleanBases windows that had enough of
// them: the writes' delay at the load of now without the copy, which
// follows the load as it grows (a destination taking a scale out's
// buckets serves more writes with each). Before any window had enough
// such writes, the base is the least value of the last writeDelayBases
// windows (as LEDBAT takes the least delay of its recent past). A window
// with fewer than writeDelaySamples writes tells nothing.
//
// A copy's entries share the writes' log, raft rounds and apply, and on a
// machine short of CPU, its cores: a write's delay is what the clients
// lose to the copy, where the copy's own entries' delay (tried before)
// is mostly the other processes' CPU and their size.
type writeDelay struct {
	mu          sync.Mutex
	all, clean  delayRing
	values      []time.Duration // the last windows' values, oldest first
	cleanValues []time.Duration // the last windows' clean quantiles
}

// delayRing keeps a window's last writeDelayKept delays.
type delayRing struct {
	d    []time.Duration
	seen int
}

func (r *delayRing) add(d time.Duration) {
	if len(r.d) < writeDelayKept {
		r.d = append(r.d, d)
	} else {
		r.d[r.seen%writeDelayKept] = d
	}
	r.seen++
}

// take returns the ring's quantile q and how many it holds, and empties it.
func (r *delayRing) take(q float64) (time.Duration, int) {
	n := len(r.d)
	var v time.Duration
	if n > 0 {
		slices.Sort(r.d)
		v = r.d[int(float64(n-1)*q)]
	}
	r.d, r.seen = r.d[:0], 0
	return v, n
}

const (
	// writeDelayFloor is the least base: a write's round on a quiet
	// replicaset of three members with its fsync.
	writeDelayFloor = 2 * time.Millisecond
	// writeDelayFactor is how far above its base the writes' delay may
	// go while a copy runs.
	writeDelayFactor = 1.5
	// writeDelayQuantile is the quantile of a window's delays its value
	// is: the tail the clients see, not one stalled write (a window
	// holds hundreds of writes under load).
	writeDelayQuantile = 0.9
	// writeDelayBases is how many windows the fallback base is the least
	// of (10 s of paceWindow).
	writeDelayBases = 50
	// writeDelayCleanBases is how many windows' clean quantiles the base
	// is the median of (2 s of paceWindow).
	writeDelayCleanBases = 10
	// writeDelaySamples is the fewest writes of a window that tell
	// anything, and the fewest clean ones that set the base.
	writeDelaySamples = 8
	// writeDelayKept bounds the writes a window keeps: its last ones (a
	// window read after a long time without a copy is the recent writes',
	// not the first after the last read).
	writeDelayKept = 4096
)

// observe counts a client write that took d from its proposal to its
// result; clean: no copy entry was in the log meanwhile.
func (w *writeDelay) observe(d time.Duration, clean bool) {
	w.mu.Lock()
	w.all.add(d)
	if clean {
		w.clean.add(d)
	}
	w.mu.Unlock()
}

// window implements paceSignal.
func (w *writeDelay) window() (value, target time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	value, n := w.all.take(writeDelayQuantile)
	if cv, m := w.clean.take(writeDelayQuantile); m >= writeDelaySamples {
		w.cleanValues = pushLast(w.cleanValues, cv, writeDelayCleanBases)
	}
	base := writeDelayFloor
	switch {
	case len(w.cleanValues) > 0:
		base = max(median(w.cleanValues), writeDelayFloor)
	case len(w.values) > 0:
		base = max(slices.Min(w.values), writeDelayFloor)
	}
	target = time.Duration(float64(base) * writeDelayFactor)
	if n < writeDelaySamples {
		return 0, target, false
	}
	w.values = pushLast(w.values, value, writeDelayBases)
	return value, target, true
}

// pushLast appends v to s, keeping its last n.
func pushLast(s []time.Duration, v time.Duration, n int) []time.Duration {
	if len(s) == n {
		s = s[1:]
	}
	return append(s, v)
}

func median(s []time.Duration) time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	return c[len(c)/2]
}

// copyInLog counts the copy's entries proposed into this replicaset's
// log and those answered, so that a write can tell whether it met one
// (writeDelay's clean writes).
type copyInLog struct{ proposed, answered atomic.Uint64 }

// mark is taken when a write is proposed; clean then reports whether no
// copy entry was in flight at the mark and none was proposed since.
func (c *copyInLog) mark() uint64 {
	p := c.proposed.Load()
	if c.answered.Load() != p {
		return math.MaxUint64 // one in flight
	}
	return p
}

func (c *copyInLog) clean(mark uint64) bool {
	return mark != math.MaxUint64 && c.proposed.Load() == mark
}
