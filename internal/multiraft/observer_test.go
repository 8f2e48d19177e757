package multiraft_test

import (
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// roundLog records what a host's observer was told.
type roundLog struct {
	mu               sync.Mutex
	synced, unsynced int
	bytes            int
	applies          map[multiraft.GroupID]int
	negative         bool
}

func (l *roundLog) ObservePersist(d time.Duration, synced bool, bytes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if synced {
		l.synced++
	} else {
		l.unsynced++
	}
	l.bytes += bytes
	l.negative = l.negative || d < 0
}

func (l *roundLog) ObserveApply(g multiraft.GroupID, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applies[g]++
	l.negative = l.negative || d < 0
}

// Every member's observer hears of its rounds' synced persists and of its
// group's applies.
func TestTheObserverHearsOfPersistsAndApplies(t *testing.T) {
	t.Parallel()
	logs := map[multiraft.NodeID]*roundLog{}
	var mu sync.Mutex
	c := newCluster(t, 3, 3, func(cfg *multiraft.Config) {
		mu.Lock()
		defer mu.Unlock()
		l := logs[cfg.NodeID]
		if l == nil {
			l = &roundLog{applies: map[multiraft.GroupID]int{}}
			logs[cfg.NodeID] = l
		}
		cfg.Observer = l
	})
	c.addGroup(g1, 1, 2, 3)
	c.start()
	c.leader(g1)
	const n = 20
	for i := range n {
		c.mustPropose(g1, put("k", string(rune('a'+i))))
	}
	c.waitConverged(g1, 1, 2, 3)
	mu.Lock()
	defer mu.Unlock()
	for id := multiraft.NodeID(1); id <= 3; id++ {
		l := logs[id]
		if l == nil {
			t.Fatalf("node %d: no observer set", id)
		}
		l.mu.Lock()
		if l.synced == 0 || l.bytes == 0 || l.applies[g1] == 0 || l.negative {
			t.Errorf("node %d: synced persists %d, bytes %d, applies in g1 %d, a negative figure %v",
				id, l.synced, l.bytes, l.applies[g1], l.negative)
		}
		l.mu.Unlock()
	}
}
