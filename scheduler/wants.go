package scheduler

import (
	"sync"
	"time"
)

// shardWants is the held shards one of the runner's loops has to look at
// (a stage's queue, its pending AfterSave calls, the changed-offer marks):
// those a wake-up named since the loop last looked, all of them after a
// wake-up for every shard or a poll, and, for a stage's queue, those whose
// earliest later entry has come due. An idle runner thus reads nothing
// until the store wakes it (or PollInterval passes), and a wake-up for
// one shard makes its loop read that shard alone.
//
// A loop takes the set before it reads, so a wake-up that comes while it
// reads is kept for its next round, and puts back the shards it could not
// finish (no free slot for their entries).
type shardWants struct {
	// wake is signalled by add: the loop waits on it.
	wake chan struct{}

	mu  sync.Mutex
	all bool
	set map[int]bool
	// due is when each shard is to be read again: its earliest later
	// entry (a stage's queue) or a retry after a failed read.
	due map[int]time.Time
}

func newShardWants() *shardWants {
	// At first every shard is wanted.
	return &shardWants{wake: make(chan struct{}, 1), all: true, set: map[int]bool{}, due: map[int]time.Time{}}
}

// add wants shard (-1: every shard) and wakes the loop.
func (w *shardWants) add(shard int) {
	w.putBack(shard)
	signal(w.wake)
}

// putBack wants shard (-1: every shard) without waking the loop: its next
// round, whatever starts it, reads the shard.
func (w *shardWants) putBack(shard int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if shard < 0 {
		w.all = true
	} else {
		w.set[shard] = true
	}
}

// take returns the leases of held that are wanted or due by now, and
// forgets them (and every shard not held).
func (w *shardWants) take(held []Lease, now time.Time) []Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Lease
	for _, l := range held {
		due, ok := w.due[l.Shard]
		if w.all || w.set[l.Shard] || ok && !due.After(now) {
			out = append(out, l)
			delete(w.due, l.Shard)
		}
	}
	w.all = false
	clear(w.set)
	if len(w.due) > 0 {
		isHeld := make(map[int]bool, len(held))
		for _, l := range held {
			isHeld[l.Shard] = true
		}
		for sh := range w.due {
			if !isHeld[sh] {
				delete(w.due, sh)
			}
		}
	}
	return out
}

// setDue reads the shard again at at (zero: not for a time).
func (w *shardWants) setDue(shard int, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.IsZero() {
		delete(w.due, shard)
	} else {
		w.due[shard] = at
	}
}

// earliest is the earliest due time of the shards of held (zero: none).
func (w *shardWants) earliest(held []Lease) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	for _, l := range held {
		if at, ok := w.due[l.Shard]; ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}
