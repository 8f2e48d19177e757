package robustness

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardkit/shardkit/client"
)

// watcher follows every bucket with client.Watch through the whole run,
// the nemesis' faults and the bucket moves included, and is itself
// stopped every few seconds and resumed from the cursor it last saved (a
// consumer killed and restarted): events after the saved cursor come
// again. check then asks of what it saw (docs/changes.md's guarantees):
// each bucket's revisions follow one another with no gap, an event seen
// twice is the same event, every acknowledged write is among the changes,
// and every change is a write that was acknowledged or whose outcome is
// unknown (nothing that failed as not applied, nothing never written).
type watcher struct {
	addrs   []string
	seed    uint64
	buckets []uint32 // the buckets of the clients' keys, watched from their first revision

	mu       sync.Mutex
	seen     map[uint32]map[uint64]string // bucket -> revision -> the event, described
	last     map[uint32]uint64            // bucket -> the last revision seen
	values   map[string]bool              // the values the changes carried
	deletes  map[uint64]bool              // the versions deletes carried
	gaps     []string
	restarts int
	errs     []string
}

func newWatcher(addrs []string, seed uint64, buckets []uint32) *watcher {
	return &watcher{addrs: addrs, seed: seed, buckets: buckets, seen: map[uint32]map[uint64]string{}, last: map[uint32]uint64{},
		values: map[string]bool{}, deletes: map[uint64]bool{}}
}

// run watches until ctx ends.
func (w *watcher) run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(w.seed, 7))
	from := map[uint32]uint64{}
	for _, b := range w.buckets {
		from[b] = 0
	}
	first := client.NewCursor(from)
	saved := &first
	for ctx.Err() == nil {
		c, err := client.New(ctx, client.Config{Peers: w.addrs})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, time.Duration(2+rng.IntN(6))*time.Second)
		wt, err := c.Watch(wctx, client.WatchOptions{Spaces: []string{spaceName}, Buckets: w.buckets, From: saved})
		if err != nil {
			cancel()
			c.Close()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		n := 0
		for ev, err := range wt.Events() {
			if err != nil {
				w.mu.Lock()
				w.errs = append(w.errs, err.Error())
				w.mu.Unlock()
				break
			}
			w.observe(ev)
			if n++; n%20 == 0 {
				cur := wt.Cursor()
				saved = &cur
			}
		}
		wt.Close()
		cancel()
		c.Close()
		w.mu.Lock()
		w.restarts++
		w.mu.Unlock()
	}
}

func (w *watcher) observe(ev client.Event) {
	desc := fmt.Sprint(ev.Changes)
	w.mu.Lock()
	defer w.mu.Unlock()
	revs := w.seen[ev.Bucket]
	if revs == nil {
		revs = map[uint64]string{}
		w.seen[ev.Bucket] = revs
	}
	if before, ok := revs[ev.Revision]; ok {
		if before != desc {
			w.gaps = append(w.gaps, fmt.Sprintf("bucket %d revision %d seen twice, different: %s then %s", ev.Bucket, ev.Revision, before, desc))
		}
		return
	}
	if last, ok := w.last[ev.Bucket]; ok && ev.Revision != last+1 {
		w.gaps = append(w.gaps, fmt.Sprintf("bucket %d: revision %d after %d", ev.Bucket, ev.Revision, last))
	}
	revs[ev.Revision] = desc
	w.last[ev.Bucket] = max(w.last[ev.Bucket], ev.Revision)
	for _, ch := range ev.Changes {
		if ch.Kind == client.ChangeDelete {
			w.deletes[ch.Version] = true
			continue
		}
		if v, ok := ch.Tuple[1].AsString(); ok {
			w.values[v] = true
		}
	}
}

// dump is what the watch saw, for a failed run's report: each bucket's
// revisions in order, each with its event.
func (w *watcher) dump() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, bucket := range slices.Sorted(maps.Keys(w.seen)) {
		revs := w.seen[bucket]
		fmt.Fprintf(&b, "bucket %d: %d revisions, the last %d\n", bucket, len(revs), w.last[bucket])
		for _, rev := range slices.Sorted(maps.Keys(revs)) {
			fmt.Fprintf(&b, "  %d %s\n", rev, revs[rev])
		}
	}
	return []byte(b.String())
}

// missing returns the acknowledged writes the watch has not shown yet.
func (w *watcher) missing(recs []record) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range recs {
		if r.Class != clsDone || r.Out.Result != resOK || !r.In.Kind.isWrite() || r.In.Key == 0 {
			continue
		}
		switch {
		case r.In.Kind == opDelete:
			if r.Out.Found && !w.deletes[r.Out.Version] {
				out = append(out, r.describe())
			}
		case !w.values[r.In.Value]:
			out = append(out, r.describe())
		}
	}
	return out
}

// check reports what the watch saw that it must not have.
func (w *watcher) check(recs []record) []string {
	allowed := map[string]bool{"probe": true}
	for _, r := range recs {
		if r.In.Kind.isWrite() && r.In.Value != "" && (r.Class == clsUnknown || r.Class == clsDone && r.Out.Result == resOK) {
			allowed[r.In.Value] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.gaps)
	for v := range w.values {
		if !allowed[v] {
			out = append(out, fmt.Sprintf("the watch showed the value %q, which no acknowledged or unknown write wrote", v))
		}
	}
	for _, e := range w.errs {
		out = append(out, "the watch failed: "+e)
	}
	return out
}
