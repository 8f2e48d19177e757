package replicaset

import (
	"slices"
	"sync"
	"time"
)

// writeDelay is the signal an elasticPace watches: how long this
// replicaset's leader takes to log and apply a client's write (from its
// proposal to its applied result), the median of a window (a mean is one
// stalled write's), against the least window median of the last
// writeDelayBases windows (the base: the
// writes' delay with the least copy, as LEDBAT takes the least delay of
// its recent past), and at least writeDelayFloor. The target is
// writeDelayFactor times the base. A replicaset with no writes yet has
// the floor as its base; a window with fewer than writeDelaySamples
// writes tells nothing.
//
// A copy's entries share the writes' log, raft rounds and apply, and on a
// machine short of CPU, its cores: a write's delay is what the clients
// lose to the copy, where the copy's own entries' delay (tried before)
// is mostly the other processes' CPU and their size.
type writeDelay struct {
	mu      sync.Mutex
	samples []time.Duration // the window's last writeDelayKept, a ring once full
	seen    int             // writes observed in the window
	medians []time.Duration // the last windows', oldest first
}

const (
	// writeDelayFloor is the least base: a write's round on a quiet
	// replicaset of three members with its fsync.
	writeDelayFloor = 2 * time.Millisecond
	// writeDelayFactor is how far above its base the writes' delay may
	// go while a copy runs.
	writeDelayFactor = 1.5
	// writeDelayBases is how many windows the base is the least of (10 s
	// of paceWindow): long enough to hold a window of the copy held
	// back, short enough to follow the load.
	writeDelayBases = 50
	// writeDelaySamples is the fewest writes of a window that tell
	// anything.
	writeDelaySamples = 8
	// writeDelayKept bounds the writes a window keeps: its last ones (a
	// window read after a long time without a copy is the recent writes',
	// not the first after the last read).
	writeDelayKept = 4096
)

// observe counts a client write that took d from its proposal to its
// result.
func (w *writeDelay) observe(d time.Duration) {
	w.mu.Lock()
	if len(w.samples) < writeDelayKept {
		w.samples = append(w.samples, d)
	} else {
		w.samples[w.seen%writeDelayKept] = d
	}
	w.seen++
	w.mu.Unlock()
}

// window implements paceSignal.
func (w *writeDelay) window() (value, target time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	base := writeDelayFloor
	if len(w.medians) > 0 {
		base = max(slices.Min(w.medians), writeDelayFloor)
	}
	target = time.Duration(float64(base) * writeDelayFactor)
	n := len(w.samples)
	w.seen = 0
	if n < writeDelaySamples {
		w.samples = w.samples[:0]
		return 0, target, false
	}
	slices.Sort(w.samples)
	value = w.samples[n/2]
	w.samples = w.samples[:0]
	if len(w.medians) == writeDelayBases {
		w.medians = w.medians[1:]
	}
	w.medians = append(w.medians, value)
	return value, target, true
}
