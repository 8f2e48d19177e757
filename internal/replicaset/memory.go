package replicaset

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/storage"
)

// What the state machine keeps in memory beside its data: the request ids
// within RequestIDWindow, so that a write's id is looked up without
// reading Pebble. It is a function of the database (load builds it from
// there at open, after a snapshot is restored and after a batch was
// dropped), and Apply changes it together with the writes it puts in the
// apply batch, so every member that applied the same log holds the same.

// requestWindow holds the request ids written within the window, with the
// leader-stamped time (ms) of their write.
type requestWindow struct {
	at    map[string]int64
	order []stampedID // in time order: the clock of the log never goes back
	head  int         // order[:head] have left the window
}

type stampedID struct {
	ms int64
	id string
}

func (w *requestWindow) reset() {
	w.at = map[string]int64{}
	w.order = nil
	w.head = 0
}

func (w *requestWindow) add(id string, ms int64) {
	w.at[id] = ms
	w.order = append(w.order, stampedID{ms: ms, id: id})
}

// lookup returns when id was written, if that was at cutoff or later.
func (w *requestWindow) lookup(id []byte, cutoff int64) (int64, bool) {
	ms, ok := w.at[string(id)]
	return ms, ok && ms >= cutoff
}

// forget drops the ids written before cutoff: O(ids dropped).
func (w *requestWindow) forget(cutoff int64) {
	for w.head < len(w.order) && w.order[w.head].ms < cutoff {
		s := w.order[w.head]
		if w.at[s.id] == s.ms {
			delete(w.at, s.id)
		}
		w.order[w.head] = stampedID{}
		w.head++
	}
	if w.head > 1024 && 2*w.head > len(w.order) {
		n := copy(w.order, w.order[w.head:]) // in place: the capacity stays
		clear(w.order[n:])
		w.order = w.order[:n]
		w.head = 0
	}
}

// requestSlot is how much of the window (ms) one range deletion of expired
// request ids covers: an id stays stored up to a slot after it has left the
// window, and is never answered from after it left.
func (sm *SM) requestSlot() int64 { return max(sm.window.Milliseconds()/12, 1) }

// requestCutoff is the time (ms) of the oldest write whose request id is
// remembered at clock.
func (sm *SM) requestCutoff(clock int64) int64 { return clock - sm.window.Milliseconds() }

// requestsDroppedBefore is the time (ms) before which every request id is
// deleted, by the clock alone: so every member deletes at the same entries.
func (sm *SM) requestsDroppedBefore(clock int64) int64 {
	c := sm.requestCutoff(clock)
	if c <= 0 {
		return 0
	}
	return c - c%sm.requestSlot()
}

// expireRequests forgets the request ids that left the window at the
// applied clock; it runs at every entry. In the database, a whole slot of
// them goes at once, with one range deletion, when the clock enters the
// next slot: no id is deleted one by one, nothing is scanned.
func (sm *SM) expireRequests(b *pebble.Batch) error {
	sm.reqs.forget(sm.requestCutoff(sm.clock))
	to := sm.requestsDroppedBefore(sm.clock)
	if to <= sm.reqDropped {
		return nil
	}
	sm.reqDropped = to
	return b.DeleteRange(sm.k.requestIDs(), sm.k.requestIDsAt(to), nil)
}

// loadMemory reads the request ids in the window from r (with the clock
// already loaded).
func (sm *SM) loadMemory(r pebble.Reader) error {
	sm.reqs.reset()
	cutoff := max(sm.requestCutoff(sm.clock), 0)
	prefix := sm.k.requestIDs()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.requestIDsAt(cutoff), UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < len(prefix)+8 {
			_ = it.Close()
			return fmt.Errorf("replicaset: request id key %x", k)
		}
		sm.reqs.add(string(k[len(prefix)+8:]), int64(binary.BigEndian.Uint64(k[len(prefix):])))
	}
	if err := it.Close(); err != nil {
		return err
	}
	sm.reqDropped = sm.requestsDroppedBefore(sm.clock)
	return nil
}

// ApplyDone implements multiraft.ApplyObserver: when the apply batch was
// dropped, the state machine reloads its memory from the database.
func (sm *SM) ApplyDone(committed bool) {
	if !committed {
		sm.reloadErr = sm.load(sm.db) // Apply returns it, if any
	}
}
