package backup

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// bucketChunks is one bucket as a backup holds it: whole, unchanged, or
// its changes.
type bucketChunks []*rspb.CopyChunk

// wholeBucket is bucket b whole at revision rev, with a tuple "t<k>@rev"
// per key in space 512, in chunks of two tuples.
func wholeBucket(b uint32, rev uint64, keys ...string) bucketChunks {
	var out bucketChunks
	c := &rspb.CopyChunk{Bucket: b}
	for i, k := range keys {
		if i > 0 && i%2 == 0 {
			out = append(out, c)
			c = &rspb.CopyChunk{Bucket: b}
		}
		c.Tuples = append(c.Tuples, tupleAt(k, rev))
	}
	c.Last, c.Revision = true, rev
	c.Requests = []*rspb.CopiedRequest{{Id: []byte(fmt.Sprint("req", rev))}}
	c.Events = [][]byte{storedEvent(b, rev)}
	return append(out, c)
}

// storedEvent is an event of bucket b at revision rev as a replicaset
// stores it and a backup carries it.
func storedEvent(b uint32, rev uint64) []byte {
	v, err := (&rspb.Event{Bucket: b, Revision: rev}).MarshalVT()
	if err != nil {
		panic(err)
	}
	return v
}

func tupleAt(k string, rev uint64) *rspb.CopiedTuple {
	return &rspb.CopiedTuple{SpaceId: 512, Key: []byte(k), Version: rev, Tuple: []byte(fmt.Sprintf("t%s@%d", k, rev))}
}

// changedBucket is bucket b's changes up to revision rev since base: the
// keys written (their tuples "t<k>@rev"), then those deleted, in two
// chunks, with the history after base.
func changedBucket(b uint32, base, rev uint64, written, deleted []string) bucketChunks {
	first := &rspb.CopyChunk{Bucket: b, Changes: true}
	for _, k := range written {
		first.Tuples = append(first.Tuples, tupleAt(k, rev))
	}
	last := &rspb.CopyChunk{Bucket: b, Changes: true, Last: true, Revision: rev}
	for _, k := range deleted {
		last.Deleted = append(last.Deleted, &rspb.TupleKey{SpaceId: 512, Key: []byte(k)})
	}
	last.Requests = []*rspb.CopiedRequest{{Id: []byte(fmt.Sprint("req", rev))}}
	for r := base + 1; r <= rev; r++ {
		last.Events = append(last.Events, storedEvent(b, r))
	}
	return bucketChunks{first, last}
}

func unchangedBucket(b uint32, rev uint64) bucketChunks {
	return bucketChunks{{Bucket: b, Changes: true, Last: true, Revision: rev}}
}

// writeChain writes a backup of the buckets into a new directory under
// root: full when base is "", else incremental since the backup in base
// (named relative to it). Buckets 1 and 2 go to one file, the others to
// another.
func writeChain(t *testing.T, root, name, base string, buckets ...bucketChunks) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Format: FormatVersion, Kind: KindFull, Created: time.Unix(1700000000, 0).UTC(), BucketCount: uint32(len(buckets))}
	if base != "" {
		_, sum, err := readManifestSum(base)
		if err != nil {
			t.Fatal(err)
		}
		if m.Base, err = baseRef(dir, base, sum); err != nil {
			t.Fatal(err)
		}
		m.Kind = KindIncremental
	}
	for i, part := range [][]bucketChunks{buckets[:2], buckets[2:]} {
		fw, err := CreateFile(dir, fmt.Sprintf("rs%d-0001.data", i+1))
		if err != nil {
			t.Fatal(err)
		}
		for _, bc := range part {
			for _, c := range bc {
				if err := fw.Write(c); err != nil {
					t.Fatal(err)
				}
			}
		}
		e, err := fw.Close()
		if err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, e)
	}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// threeBackups writes a full backup of four buckets and two incrementals
// after it under root, which becomes the current directory (each names
// its base as given: relative), and returns their directories (relative:
// full, inc1, inc2) and what each
// bucket holds after the last: its tuples by key, its revision, its
// request ids and its events' revisions.
//
//   - bucket 1: changes in both (overwrites, deletes, a key added and
//     deleted again);
//   - bucket 2: unchanged in the first, changed in the second;
//   - bucket 3: whole in the first (its history did not reach back),
//     changed in the second;
//   - bucket 4: changed in the first, unchanged in the second.
func threeBackups(t *testing.T, root string) (dirs []string, want map[uint32]composed) {
	t.Helper()
	t.Chdir(root)
	full := writeChain(t, "", "full", "",
		wholeBucket(1, 10, "a", "b", "c"), wholeBucket(2, 20, "d"), wholeBucket(3, 30, "e", "f"), wholeBucket(4, 40, "g", "h"))
	inc1 := writeChain(t, "", "inc1", full,
		changedBucket(1, 10, 12, []string{"a", "w"}, []string{"b"}), unchangedBucket(2, 20),
		wholeBucket(3, 300, "e", "x"), changedBucket(4, 40, 41, nil, []string{"g"}))
	inc2 := writeChain(t, "", "inc2", inc1,
		changedBucket(1, 12, 13, []string{"c"}, []string{"w"}), changedBucket(2, 20, 22, []string{"d", "i"}, nil),
		changedBucket(3, 300, 301, []string{"y"}, []string{"e"}), unchangedBucket(4, 41))
	want = map[uint32]composed{
		1: {tuples: map[string]string{"a": "ta@12", "c": "tc@13"}, revision: 13, requests: []string{"req10", "req12", "req13"}, events: []uint64{10, 11, 12, 13}},
		2: {tuples: map[string]string{"d": "td@22", "i": "ti@22"}, revision: 22, requests: []string{"req20", "req22"}, events: []uint64{20, 21, 22}},
		3: {tuples: map[string]string{"x": "tx@300", "y": "ty@301"}, revision: 301, requests: []string{"req300", "req301"}, events: []uint64{300, 301}},
		4: {tuples: map[string]string{"h": "th@40"}, revision: 41, requests: []string{"req40", "req41"}, events: []uint64{40, 41}},
	}
	return []string{full, inc1, inc2}, want
}

// composed is what a bucket holds, composed.
type composed struct {
	tuples   map[string]string
	revision uint64
	requests []string
	events   []uint64
}

// composeChain reads dir's chain composed, checking that each bucket's
// chunks are whole chunks, contiguous, their tuples in key order.
func composeChain(t *testing.T, dir string) map[uint32]composed {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := Chain(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint32]composed{}
	var open uint32
	var lastKey string
	err = EachComposed(chain, func(c *rspb.CopyChunk) error {
		b := c.GetBucket()
		if c.GetChanges() || len(c.GetDeleted()) > 0 {
			return fmt.Errorf("bucket %d: a composed chunk is a change set", b)
		}
		if open != 0 && open != b {
			return fmt.Errorf("bucket %d's chunk inside bucket %d's", b, open)
		}
		if _, done := got[b]; done && open == 0 {
			return fmt.Errorf("bucket %d composed twice", b)
		}
		if open == 0 {
			got[b], lastKey = composed{tuples: map[string]string{}}, ""
		}
		open = b
		g := got[b]
		for _, tp := range c.GetTuples() {
			if string(tp.GetKey()) <= lastKey {
				return fmt.Errorf("bucket %d: key %q after %q", b, tp.GetKey(), lastKey)
			}
			lastKey = string(tp.GetKey())
			g.tuples[string(tp.GetKey())] = string(tp.GetTuple())
		}
		for _, r := range c.GetRequests() {
			g.requests = append(g.requests, string(r.GetId()))
		}
		for _, v := range c.GetEvents() {
			ev := &rspb.Event{}
			if err := ev.UnmarshalVT(v); err != nil {
				return err
			}
			g.events = append(g.events, ev.GetRevision())
		}
		if c.GetLast() {
			g.revision, open = c.GetRevision(), 0
		}
		got[b] = g
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestChainComposesEachBucket(t *testing.T) {
	dirs, want := threeBackups(t, t.TempDir())
	for _, d := range dirs {
		if r, err := Verify(d); err != nil || len(r.Problems) > 0 {
			t.Fatalf("%s: %v %q", d, err, r.Problems)
		}
	}
	got := composeChain(t, dirs[2])
	for b := uint32(1); b <= 4; b++ {
		g, w := got[b], want[b]
		slices.Sort(g.requests)
		if !maps.Equal(g.tuples, w.tuples) || g.revision != w.revision || !slices.Equal(g.requests, w.requests) || !slices.Equal(g.events, w.events) {
			t.Errorf("bucket %d composed: %+v\nwant %+v", b, g, w)
		}
	}
	// A chain of one: the full backup as it is.
	if got := composeChain(t, dirs[0]); got[1].revision != 10 || len(got[1].tuples) != 3 {
		t.Fatalf("the full backup alone: %+v", got[1])
	}
}

// A composed bucket larger than a chunk is cut as a full backup's: at
// most CopyChunkTuples a chunk, its revision on the last.
func TestComposeBucketCutsChunks(t *testing.T) {
	var keys []string
	for i := range replicaset.CopyChunkTuples + 10 {
		keys = append(keys, fmt.Sprintf("k%05d", i))
	}
	out, err := composeBucket(wholeBucket(1, 5, keys...), [][]*rspb.CopyChunk{changedBucket(1, 5, 6, []string{"k00000"}, []string{"k00001"})})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[0].GetTuples()) != replicaset.CopyChunkTuples || out[0].GetLast() || !out[1].GetLast() || out[1].GetRevision() != 6 {
		t.Fatalf("%d chunks: the first of %d tuples (last %v), the last's revision %d", len(out), len(out[0].GetTuples()), out[0].GetLast(), out[len(out)-1].GetRevision())
	}
	if n := len(out[0].GetTuples()) + len(out[1].GetTuples()); n != len(keys)-1 {
		t.Fatalf("%d tuples, want %d", n, len(keys)-1)
	}
}

func TestIncrementalManifestRoundTrip(t *testing.T) {
	dirs, _ := threeBackups(t, t.TempDir())
	m, err := ReadManifest(dirs[2])
	if err != nil {
		t.Fatal(err)
	}
	_, sum, _ := readManifestSum(dirs[1])
	if !m.Incremental() || m.Base.Dir != filepath.Join("..", "inc1") || m.Base.ManifestSHA256 != sum {
		t.Fatalf("base %+v, want ../inc1 of sha256 %s", m.Base, sum)
	}
	if f := m.Files[0]; !slices.Equal(f.Buckets, []uint32{1, 2}) || !slices.Equal(f.Revisions, []uint64{13, 22}) || !slices.Equal(f.Changes, []uint32{1, 2}) {
		t.Fatalf("file 0: %+v", f)
	}
	m1, _ := ReadManifest(dirs[1])
	if f := m1.Files[1]; !slices.Equal(f.Buckets, []uint32{3, 4}) || !slices.Equal(f.Revisions, []uint64{300, 41}) || !slices.Equal(f.Changes, []uint32{4}) {
		t.Fatalf("inc1's file 1: %+v", f)
	}
	chain, err := Chain(dirs[2], m)
	if err != nil || len(chain) != 3 || chain[0].Dir != "full" || chain[1].Dir != "inc1" {
		t.Fatalf("chain %+v, %v", chain, err)
	}
	// The chain moves as a whole: the relative bases hold.
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Mkdir(moved, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.Rename(d, filepath.Join(moved, d)); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := Verify(filepath.Join(moved, "inc2")); err != nil || len(r.Problems) > 0 {
		t.Fatalf("the chain moved: %v %q", err, r.Problems)
	}
}

// A manifest of format 1 (before incrementals) still parses: a full
// backup, no revisions.
func TestParseManifestFormat1(t *testing.T) {
	sha := strings.Repeat("a", 64)
	m, err := ParseManifest([]byte(`{"format":1,"bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","records":1,"buckets":[1,2]}]}`))
	if err != nil || m.Incremental() || len(m.Files[0].Revisions) != 0 {
		t.Fatalf("%+v, %v", m, err)
	}
}

func TestVerifyNamesChainProblems(t *testing.T) {
	for name, tc := range map[string]struct {
		damage func(dirs []string) error
		want   []string
	}{
		"missing base": {func(dirs []string) error { return os.RemoveAll(dirs[1]) },
			[]string{"the base inc1 of inc2: ", "inc1 is missing"}},
		"base without manifest": {func(dirs []string) error { return os.Remove(filepath.Join(dirs[0], ManifestName)) },
			[]string{"the base full of inc1: ", "incomplete backup"}},
		"damaged file of a base": {func(dirs []string) error {
			p := filepath.Join(dirs[0], "rs2-0001.data")
			b, _ := os.ReadFile(p)
			return os.WriteFile(p, flip(b, 30), 0o644)
		}, []string{"the base full: rs2-0001.data: ", "CRC32C"}},
		"base swapped": {func(dirs []string) error {
			other := writeChain(t, t.TempDir(), "other", "", wholeBucket(1, 1), wholeBucket(2, 1), wholeBucket(3, 1), wholeBucket(4, 1))
			if err := os.RemoveAll(dirs[0]); err != nil {
				return err
			}
			return os.Rename(other, dirs[0])
		}, []string{"the base full of inc1 has a manifest of sha256 ", "another backup (or one retaken) is in its place"}},
	} {
		dirs, _ := threeBackups(t, t.TempDir())
		if err := tc.damage(dirs); err != nil {
			t.Fatal(err)
		}
		r, err := Verify(dirs[2])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		all := strings.Join(r.Problems, "\n")
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: the problems %q do not say %q", name, r.Problems, w)
			}
		}
	}
}

// A chain that comes back to one of its backups, and a base of another
// bucket count, are refused, naming them.
func TestChainRefusesCycleAndBucketCount(t *testing.T) {
	root := t.TempDir()
	full := writeChain(t, root, "full", "", wholeBucket(1, 1), wholeBucket(2, 1), wholeBucket(3, 1))
	inc := writeChain(t, root, "inc", full, unchangedBucket(1, 1), unchangedBucket(2, 1), unchangedBucket(3, 1))
	m, _ := ReadManifest(inc)
	_, sum, _ := readManifestSum(inc)
	// A manifest naming its own directory as its base: the SHA-256 it
	// records is a manifest's that names another (a cycle is made by hand,
	// never by Create), so the cycle is found before the sums.
	m.Base = &BaseRef{Dir: ".", ManifestSHA256: sum}
	if _, err := Chain(inc, m); err == nil || !strings.Contains(err.Error(), "has a cycle") {
		t.Fatalf("a cycle: %v", err)
	}
	four := writeChain(t, root, "four", "", wholeBucket(1, 1), wholeBucket(2, 1), wholeBucket(3, 1), wholeBucket(4, 1))
	_, sum4, _ := readManifestSum(four)
	m.Base = &BaseRef{Dir: filepath.Join("..", "four"), ManifestSHA256: sum4}
	if _, err := Chain(inc, m); err == nil || !strings.Contains(err.Error(), "has 4 buckets") {
		t.Fatalf("another bucket count: %v", err)
	}
}

// A change set's event that is no Event (its revision unknown) is an
// error of the composition, naming the bucket, not an event dropped.
func TestComposeBucketRefusesAnEventThatIsNoEvent(t *testing.T) {
	set := changedBucket(1, 5, 6, []string{"k00000"}, nil)
	set[len(set)-1].Events = append(set[len(set)-1].Events, []byte{0x10}) // a revision's tag, no value
	if _, err := composeBucket(wholeBucket(1, 5, "k00000"), [][]*rspb.CopyChunk{set}); err == nil || !strings.Contains(err.Error(), "bucket 1") || !strings.Contains(err.Error(), "not an Event") {
		t.Fatalf("composing an event that is no Event: %v", err)
	}
}

// A restore gives the spaces a bucket names the restored cluster's ids,
// in its tuples and in its history's events (stored bytes), and refuses
// an event that is no Event, naming the bucket.
func TestRenameSpacesRenamesTuplesAndHistory(t *testing.T) {
	ev, err := (&rspb.Event{Bucket: 1, Revision: 5, Ops: []*rspb.EventOp{{SpaceId: 512, Key: []byte("k")}, {SpaceId: 513}}}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	c := &rspb.CopyChunk{Bucket: 1, Tuples: []*rspb.CopiedTuple{tupleAt("k", 5)}, Events: [][]byte{ev}}
	if err := renameSpaces(c, map[uint32]uint32{512: 600, 513: 601}); err != nil {
		t.Fatal(err)
	}
	got := &rspb.Event{}
	if err := got.UnmarshalVT(c.GetEvents()[0]); err != nil {
		t.Fatal(err)
	}
	if c.GetTuples()[0].GetSpaceId() != 600 || got.GetOps()[0].GetSpaceId() != 600 || got.GetOps()[1].GetSpaceId() != 601 || got.GetRevision() != 5 || string(got.GetOps()[0].GetKey()) != "k" {
		t.Fatalf("renamed: tuple space %d, event %+v; want spaces 600 and 601, the rest as it was", c.GetTuples()[0].GetSpaceId(), got)
	}
	bad := &rspb.CopyChunk{Bucket: 7, Events: [][]byte{{0x10}}}
	if err := renameSpaces(bad, map[uint32]uint32{}); err == nil || !strings.Contains(err.Error(), "bucket 7") {
		t.Fatalf("an event that is no Event: %v", err)
	}
}
