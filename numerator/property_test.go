package numerator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

// TestPropertiesOverRandomHistories runs random multi-run histories (offers
// appearing, disappearing, returning; occasional forced rebuilds; random TTL
// and thresholds) and checks after every run:
//   - a key present in two consecutive runs keeps its <shard, doc> unless its
//     shard was rebuilt;
//   - no two live keys share a <shard, doc>;
//   - a freed id is reused only after its holder was unseen for more than TTL
//     runs (or by a rebuild);
//   - every input offer is in the state, and an absent key stays exactly
//     while it is within TTL (unless its shard was rebuilt);
//   - a rebuilt shard is dense from 0; holes and max ids are reported truly.
func TestPropertiesOverRandomHistories(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			checkHistory(t, seed, 0)
		})
	}
}

// TestSpillingGivesTheSameHistory runs histories with a memory budget so
// small that every shard spills many runs, and compares each run's output
// with the same run in memory.
func TestSpillingGivesTheSameHistory(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			checkHistory(t, seed, 6<<10) // two 4 KiB blocks: a spill every ~60 rows
		})
	}
}

func checkHistory(t *testing.T, seed uint64, memLimit int64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	universe := make([]sharding.OfferKey, 50+r.IntN(300))
	for i := range universe {
		universe[i] = sharding.OfferKey{BusinessID: uint64(r.IntN(20)), OfferID: fmt.Sprintf("o%d", i), ShopID: uint64(r.IntN(3)), WarehouseID: uint64(r.IntN(2))}
	}
	// Random churn empties the input or drops most of it at times: allowed.
	o := Options{StateType: 2, Scheme: byBusiness2, TTL: uint64(r.IntN(4)),
		RebuildThreshold: []float64{0.1, 0.2, 0.5, 1}[r.IntN(4)], TempDir: t.TempDir(),
		AllowDropFraction: 1, AllowEmpty: true}
	if memLimit > 0 {
		o.MemoryLimit = memLimit
	}
	present := make(map[sharding.OfferKey]bool)
	var prev *memState
	var prevOffers map[sharding.OfferKey]bool
	lastSeen := make(map[sharding.OfferKey]uint64)
	for run := uint64(1); run <= 25; run++ {
		// Churn: each key flips presence with some probability.
		churn := r.Float64() * 0.4
		for _, k := range universe {
			if r.Float64() < churn {
				present[k] = !present[k]
			}
		}
		var in []sharding.OfferKey
		offers := make(map[sharding.OfferKey]bool)
		for _, k := range universe {
			if present[k] {
				in = append(in, k)
				offers[k] = true
				if r.IntN(10) == 0 {
					in = append(in, k) // duplicates in the input are merged
				}
			}
		}
		o.ForceRebuild = r.IntN(12) == 0
		next, res, newDocs, expired := runMem(t, prev, in, o)
		if memLimit > 0 {
			// The same run without a budget must give the same rows.
			mo := o
			mo.MemoryLimit = 0
			ref, _, refNew, refExp := runMem(t, prev, in, mo)
			if fmt.Sprint(sortRows(next.rows), sortRows(newDocs), sortRows(expired)) != fmt.Sprint(sortRows(ref.rows), sortRows(refNew), sortRows(refExp)) {
				t.Fatalf("run %d: spilled run differs from the in-memory run", run)
			}
			if res.Spills == 0 && int64(len(in))*(entrySize+16) > memLimit {
				t.Fatalf("run %d: budget %d did not spill %d offers", run, memLimit, len(in))
			}
		}
		if next.meta.Run != run {
			t.Fatalf("run counter %d, want %d", next.meta.Run, run)
		}
		rebuilt := func(sh uint32) bool { return prev == nil || res.Shards[sh].Rebuilt }
		if prev != nil {
			checkVersion(t, run, prev, next, res, len(expired))
		}
		cur := next.assignment()
		if len(cur) != len(next.rows) {
			t.Fatalf("run %d: a key appears twice in the state", run)
		}
		// No two live keys share a position.
		seen := make(map[pos]sharding.OfferKey)
		for k, p := range cur {
			if other, ok := seen[p]; ok {
				t.Fatalf("run %d: %v and %v share %v", run, k, other, p)
			}
			seen[p] = k
			if want := byBusiness2.ShardOf(k); p.shard != want {
				t.Fatalf("run %d: %v on shard %d, scheme says %d", run, k, p.shard, want)
			}
		}
		for k := range offers {
			lastSeen[k] = run
			if _, ok := cur[k]; !ok {
				t.Fatalf("run %d: input offer %v missing from the state", run, k)
			}
		}
		if prev != nil {
			before := prev.assignment()
			for k, p := range before {
				np, ok := cur[k]
				switch {
				case rebuilt(p.shard):
				case prevOffers[k] && offers[k] && np != p:
					t.Fatalf("run %d: %v present in consecutive runs moved %v -> %v without a rebuild", run, k, p, np)
				case !offers[k] && run-lastSeen[k] <= o.TTL && (!ok || np != p):
					t.Fatalf("run %d: %v absent for %d runs (TTL %d) lost its id", run, k, run-lastSeen[k], o.TTL)
				case !offers[k] && run-lastSeen[k] > o.TTL && ok:
					t.Fatalf("run %d: %v absent for %d runs (TTL %d) still in the state", run, k, run-lastSeen[k], o.TTL)
				}
			}
		}
		// A freed id goes to a new key only after its holder's TTL: the
		// previous state's holder of the position must have been unseen for
		// more than TTL runs; a position that was already a hole was freed by
		// an earlier expiry, which the checks above covered.
		if prev != nil {
			holder := make(map[pos]record, len(prev.rows))
			for _, r := range prev.rows {
				holder[pos{r.shard, r.doc}] = r
			}
			for _, nd := range newDocs {
				p := pos{nd.shard, nd.doc}
				h, ok := holder[p]
				if ok && h.key != nd.key && !rebuilt(p.shard) && run-h.lastSeen <= o.TTL {
					t.Fatalf("run %d: %v reused %v of %v, unseen only %d runs (TTL %d)", run, nd.key, p, h.key, run-h.lastSeen, o.TTL)
				}
			}
		}
		for _, e := range expired {
			if _, ok := cur[e.key]; ok {
				t.Fatalf("run %d: expired %v is still in the state", run, e.key)
			}
		}
		// Stats tell the truth; rebuilt shards are dense.
		for sh, st := range res.Shards {
			rows := filterShard(next.rows, uint32(sh))
			maxDoc := int64(-1)
			for _, r := range rows {
				maxDoc = max(maxDoc, int64(r.doc))
			}
			if st.Docs != int64(len(rows)) || st.MaxDocID != maxDoc || st.Holes != maxDoc+1-int64(len(rows)) {
				t.Fatalf("run %d shard %d: stats %+v, rows %d max %d", run, sh, st, len(rows), maxDoc)
			}
			if st.Rebuilt && st.Holes != 0 {
				t.Fatalf("run %d shard %d rebuilt with %d holes", run, sh, st.Holes)
			}
			if !st.Rebuilt && o.RebuildThreshold < 1 && st.HoleRatio() > o.RebuildThreshold {
				t.Fatalf("run %d shard %d: hole ratio %.2f over threshold %.2f without a rebuild", run, sh, st.HoleRatio(), o.RebuildThreshold)
			}
		}
		prev, prevOffers = next, offers
	}
}

// checkVersion: V+1 (G 0) iff a shard was rebuilt or the run expired more
// than RenumberFraction of the state; else V stays, G grows iff some key
// got an id, and data built on the previous state stays usable (N6).
func checkVersion(t *testing.T, run uint64, prev, next *memState, res Result, expired int) {
	t.Helper()
	pv, nv := prev.meta.Version, next.meta.Version
	renumbered := res.Rebuilt == 0 && float64(expired) > DefaultRenumberFraction*float64(len(prev.rows))
	if renumbered != res.Renumbered {
		t.Fatalf("run %d: %d of %d docs expired, Renumbered=%v", run, expired, len(prev.rows), res.Renumbered)
	}
	if res.Rebuilt > 0 || renumbered {
		if nv.Rebuild != pv.Rebuild+1 || nv.Generation != 0 || Compatible(nv, pv) {
			t.Fatalf("run %d (rebuilt %d shards, renumbered %v): version %s -> %s, want V+1 and G 0", run, res.Rebuilt, renumbered, pv, nv)
		}
		return
	}
	wantG := pv.Generation
	if res.New > 0 {
		wantG++
	}
	if nv.Rebuild != pv.Rebuild || nv.Generation != wantG || !Compatible(nv, pv) {
		t.Fatalf("run %d (%d new): version %s -> %s, want the same V and G %d", run, res.New, pv, nv, wantG)
	}
}

func sortRows(rs []record) []record {
	out := append([]record(nil), rs...)
	for i := range out {
		out[i].hash = 0
	}
	slicesSortRecords(out)
	return out
}
