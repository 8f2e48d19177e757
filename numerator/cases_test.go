package numerator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

// byBusiness2 places an offer on shard business_id % 2: tests choose shards.
var byBusiness2 = sharding.Scheme{ID: 50, Name: "business-mod-2", Shards: 2,
	ShardOf: func(k sharding.OfferKey) uint32 { return uint32(k.BusinessID % 2) }}

var single = sharding.Builtin()[3]

func key(b uint64, id string) sharding.OfferKey {
	return sharding.OfferKey{BusinessID: b, OfferID: id, ShopID: 10 + b, WarehouseID: 1}
}

func keys(b uint64, ids ...string) []sharding.OfferKey {
	out := make([]sharding.OfferKey, len(ids))
	for i, id := range ids {
		out[i] = key(b, id)
	}
	return out
}

// sortedKeys returns keys in the numerator's (hash, key) order: the order in
// which a rebuild numbers them and new keys take ids.
func sortedKeys(ks []sharding.OfferKey) []sharding.OfferKey {
	out := slices.Clone(ks)
	slices.SortFunc(out, func(a, b sharding.OfferKey) int {
		ra, rb := newRecord(a), newRecord(b)
		return compareRecords(&ra, &rb)
	})
	return out
}

func names(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// N9 case 1: --rebuild-state-force gives a new state whose shard sizes equal
// the input's per shard, ids dense from 0, V+1.
func TestForcedRebuild(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 1, Scheme: byBusiness2, TTL: 5}
	run1 := append(keys(1, names(6, "a")...), keys(2, names(6, "b")...)...)
	s1, _, _, _ := runMem(t, nil, run1, o)

	// Run 2: some offers gone (within TTL, so a plain run would keep them), some new.
	run2 := append(keys(1, "a00", "a01", "new1"), keys(2, names(6, "b")...)...)
	run2 = append(run2, key(2, "new2"), key(2, "new3"))
	o.ForceRebuild = true
	s2, res, newDocs, expired := runMem(t, s1, run2, o)

	wantSizes := map[uint32]int{1: 3, 0: 8} // business 1 -> shard 1, business 2 -> shard 0
	for sh, want := range wantSizes {
		var docs []uint32
		for _, r := range s2.rows {
			if r.shard == sh {
				docs = append(docs, r.doc)
			}
		}
		slices.Sort(docs)
		if len(docs) != want {
			t.Errorf("shard %d has %d docs, want %d (its input size)", sh, len(docs), want)
		}
		for i, d := range docs {
			if d != uint32(i) {
				t.Errorf("shard %d doc ids %v, want 0..%d", sh, docs, want-1)
				break
			}
		}
		if !res.Shards[sh].Rebuilt || res.Shards[sh].Holes != 0 {
			t.Errorf("shard %d stats %+v: want rebuilt with no holes", sh, res.Shards[sh])
		}
	}
	if got, want := s2.meta.Version, (Version{Type: 1, Scheme: 50, Rebuild: s1.meta.Version.Rebuild + 1}); got != want {
		t.Errorf("version %s, want %s", got, want)
	}
	if len(newDocs) != len(run2) {
		t.Errorf("new docs table has %d rows, want every row of the rebuilt state (%d)", len(newDocs), len(run2))
	}
	if got := keysOf(expired); !slices.Equal(got, sortedKeyOrder(keys(1, "a02", "a03", "a04", "a05"))) {
		t.Errorf("expired %v, want the four offers absent from the input", got)
	}
}

func sortedKeyOrder(ks []sharding.OfferKey) []sharding.OfferKey {
	out := slices.Clone(ks)
	slices.SortFunc(out, sharding.OfferKey.Compare)
	return out
}

// N9 case 2: the run counter passes TTL, nobody has expired: new documents
// get ids after the shard's maximum.
func TestTTLPassedWithNoExpiredDocs(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 1, Scheme: single, TTL: 2}
	base := keys(1, names(5, "k")...)
	s, _, _, _ := runMem(t, nil, base, o)
	for range 3 { // runs 2..4: the run counter passes TTL
		s, _, _, _ = runMem(t, s, base, o)
	}
	if s.meta.Run <= o.TTL {
		t.Fatalf("run %d has not passed TTL %d", s.meta.Run, o.TTL)
	}
	before := s.assignment()
	in := append(slices.Clone(base), key(1, "new-a"), key(1, "new-b"))
	s2, res, newDocs, expired := runMem(t, s, in, o)
	if len(expired) != 0 {
		t.Fatalf("expired %v, want none", keysOf(expired))
	}
	if got := docsOf(newDocs); !slices.Equal(got, []uint32{5, 6}) {
		t.Fatalf("new docs got ids %v, want [5 6] (after the max 4)", got)
	}
	// New keys take ids in (hash, key) order.
	order := sortedKeys(keys(1, "new-a", "new-b"))
	after := s2.assignment()
	if after[order[0]].doc != 5 || after[order[1]].doc != 6 {
		t.Errorf("new ids %v, want 5 then 6 in sort order", after)
	}
	for k, p := range before {
		if after[k] != p {
			t.Errorf("key %v moved from %v to %v", k, p, after[k])
		}
	}
	if res.Reused != 0 || res.New != 2 {
		t.Errorf("result %+v: want 2 new, none reused", res)
	}
	if s2.meta.Version.Generation != s.meta.Version.Generation+1 {
		t.Errorf("generation %d -> %d, want +1 for new doc ids", s.meta.Version.Generation, s2.meta.Version.Generation)
	}
}

// N9 case 3: TTL passed with expired documents: new documents take the
// expired ids (lowest first), then max+1. An id is not reused before TTL.
func TestTTLPassedWithExpiredDocs(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 1, Scheme: single, TTL: 1, RebuildThreshold: 1}
	all := keys(7, names(6, "k")...)
	s1, _, _, _ := runMem(t, nil, all, o)
	order := sortedKeys(all) // ids 0..5 in this order
	gone := []sharding.OfferKey{order[1], order[3]}
	stay := []sharding.OfferKey{order[0], order[2], order[4], order[5]}

	// Run 2: two offers absent for 1 run (not more than TTL): kept; a new key
	// cannot have their ids yet.
	s2, _, nd2, ex2 := runMem(t, s1, append(slices.Clone(stay), key(7, "early")), o)
	if len(ex2) != 0 || !slices.Equal(docsOf(nd2), []uint32{6}) {
		t.Fatalf("run 2: expired %v, new ids %v; want nothing expired and the new key on 6", keysOf(ex2), docsOf(nd2))
	}

	// Run 3: absent for 2 runs > TTL: expired; three new keys take 1, 3, then 7.
	in3 := append(slices.Clone(stay), key(7, "early"), key(7, "x"), key(7, "y"), key(7, "z"))
	s3, res, nd3, ex3 := runMem(t, s2, in3, o)
	if got := keysOf(ex3); !slices.Equal(got, sortedKeyOrder(gone)) {
		t.Fatalf("expired %v, want %v", got, gone)
	}
	if got := docsOf(ex3); !slices.Equal(got, []uint32{1, 3}) {
		t.Fatalf("expired ids %v, want [1 3]", got)
	}
	newOrder := sortedKeys(keys(7, "x", "y", "z"))
	got := s3.assignment()
	for i, want := range []uint32{1, 3, 7} {
		if got[newOrder[i]].doc != want {
			t.Errorf("new key %v got %d, want %d (freed ids lowest first, then max+1)", newOrder[i], got[newOrder[i]].doc, want)
		}
	}
	if len(nd3) != 3 || res.Reused != 2 || res.Expired != 2 {
		t.Errorf("result %+v, new docs %d: want 3 new, 2 reused, 2 expired", res, len(nd3))
	}
	if res.Shards[0].Holes != 0 || res.Shards[0].MaxDocID != 7 {
		t.Errorf("shard stats %+v: want no holes, max 7", res.Shards[0])
	}
	for _, r := range ex3 {
		if r.lastSeen != 1 {
			t.Errorf("expired row %v: last_seen_run %d, want 1", r.key, r.lastSeen)
		}
	}
}

// N9 case 4: the automatic rebuild: a shard whose hole ratio passes the
// threshold is renumbered like a forced rebuild; others keep their ids.
func TestAutomaticRebuild(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 3, Scheme: byBusiness2, TTL: 0, RebuildThreshold: 0.2}
	b1 := keys(1, names(10, "a")...) // shard 1
	b2 := keys(2, names(10, "b")...) // shard 0
	s1, _, _, _ := runMem(t, nil, append(slices.Clone(b1), b2...), o)

	// Shard 1 loses 3 of 10 from the middle (ratio 0.3 > 0.2); shard 0 loses
	// 1 (0.1): only shard 1 rebuilds.
	o1, o2 := sortedKeys(b1), sortedKeys(b2)
	in := append(slices.Delete(slices.Clone(o1), 3, 6), slices.Delete(slices.Clone(o2), 4, 5)...)
	s2, res, _, expired := runMem(t, s1, in, o)
	if !res.Shards[1].Rebuilt || res.Shards[0].Rebuilt || res.Rebuilt != 1 {
		t.Fatalf("rebuilt shards: 0=%v 1=%v; want only shard 1", res.Shards[0].Rebuilt, res.Shards[1].Rebuilt)
	}
	if got := docsOf(filterShard(s2.rows, 1)); !slices.Equal(got, []uint32{0, 1, 2, 3, 4, 5, 6}) {
		t.Errorf("shard 1 ids %v, want dense 0..6", got)
	}
	before, after := s1.assignment(), s2.assignment()
	for _, k := range o2 {
		if p, ok := after[k]; ok && p != before[k] {
			t.Errorf("shard 0 key %v moved %v -> %v without a rebuild of its shard", k, before[k], p)
		}
	}
	if res.Shards[0].Holes != 1 {
		t.Errorf("shard 0 holes %d, want 1", res.Shards[0].Holes)
	}
	if len(expired) != 4 {
		t.Errorf("expired %d rows, want 4", len(expired))
	}
	if v := s2.meta.Version; v.Rebuild != s1.meta.Version.Rebuild+1 || v.Generation != 0 {
		t.Errorf("version %s after an automatic rebuild of %s: want V+1, G=0", v, s1.meta.Version)
	}

	// Below RebuildMinDocs the same holes do not trigger a rebuild.
	o.RebuildMinDocs = 100
	_, res, _, _ = runMem(t, s1, in, o)
	if res.Rebuilt != 0 {
		t.Errorf("shards of 10 ids rebuilt with RebuildMinDocs 100")
	}
}

func filterShard(rs []record, sh uint32) []record {
	var out []record
	for _, r := range rs {
		if r.shard == sh {
			out = append(out, r)
		}
	}
	return out
}

// N9 case 5: the plain run: known keys keep their ids, new keys get the next
// ids after the shard's maximum, G+1; a run without new keys keeps G.
func TestPlainRun(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 1, Scheme: byBusiness2, TTL: 3}
	s1, _, _, _ := runMem(t, nil, append(keys(1, "a", "b", "c"), keys(2, "d", "e")...), o)
	in := append(keys(1, "a", "b", "c", "n1", "n2"), keys(2, "d", "e", "n3")...)
	s2, res, newDocs, expired := runMem(t, s1, in, o)
	before, after := s1.assignment(), s2.assignment()
	for k, p := range before {
		if after[k] != p {
			t.Errorf("key %v moved %v -> %v", k, p, after[k])
		}
	}
	n12 := sortedKeys(keys(1, "n1", "n2"))
	if after[n12[0]] != (pos{1, 3}) || after[n12[1]] != (pos{1, 4}) || after[key(2, "n3")] != (pos{0, 2}) {
		t.Errorf("new ids %v %v %v; want (1,3) (1,4) (0,2)", after[n12[0]], after[n12[1]], after[key(2, "n3")])
	}
	if len(newDocs) != 3 || len(expired) != 0 || res.Rebuilt != 0 {
		t.Errorf("new %d expired %d rebuilt %d; want 3, 0, 0", len(newDocs), len(expired), res.Rebuilt)
	}
	v1, v2 := s1.meta.Version, s2.meta.Version
	if v2.Rebuild != v1.Rebuild || v2.Generation != v1.Generation+1 {
		t.Errorf("version %s -> %s, want G+1", v1, v2)
	}
	for _, r := range s2.rows {
		if r.lastSeen != 2 {
			t.Errorf("row %v last_seen_run %d, want 2", r.key, r.lastSeen)
		}
	}
	// Same offers again: nothing new, G stays.
	s3, _, nd, _ := runMem(t, s2, in, o)
	if len(nd) != 0 || s3.meta.Version != v2 || s3.meta.Run != 3 {
		t.Errorf("repeat run: %d new docs, version %s run %d; want none, %s, run 3", len(nd), s3.meta.Version, s3.meta.Run, v2)
	}
}
