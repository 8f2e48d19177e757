package replicaset

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// The copy as files (docs/design/moves.md, "The copy as files"): the
// tuples of a copy entry travel through the destination's log as Pebble
// sstables of the destination's own tuple keys, one or more per bucket
// (CopyChunks.tables), which every member writes to files beside its
// database and ingests together, instead of applying each tuple through
// the apply batch.
//
// A table holds one bucket's keys and none its leader held (a tuple or a
// tombstone: writes made during the copy), and is cut at each held key,
// so that its bounds hold none of the memtable's keys in the common case:
// Pebble then places it in the lowest level with nothing in its range
// (the bottom one, for a bucket arriving here), with no flush and no
// compaction.
//
// An ingest is durable when it returns, before the apply batch of its
// entry commits, so it must be repeatable: a member that crashes in
// between applies the entry again after its restart, and a snapshot taken
// in between holds the ingested rows under an applied index before the
// entry. Both hold because an ingest never writes a key the member holds
// a tuple or a tombstone of (those keys are left out of the file, as the
// tuple path skips them): a repeated ingest finds every key and ingests
// nothing, and the writes of the entries before it (which the batch holds
// and commits above the ingest) left their keys out of it. The bucket's
// counts, which a repeated ingest cannot tell it changed, are counted
// again from its rows when its copy completes (the copied mark).

// copyTableFormat is the sstable format of copied chunks: the newest one
// the oldest database format Pebble opens (FormatMinSupported) ingests,
// so any member can ingest what any leader builds.
var copyTableFormat = pebble.FormatMinSupported.MaxTableFormat()

// copyFilterBits is the Bloom filter of a copied sstable: as the
// database's own tables (storage.Open), so an insert's look for an
// absent key skips an ingested table.
const copyFilterBits = 10

// memWritable is an objstorage.Writable into memory.
type memWritable struct{ buf bytes.Buffer }

func (w *memWritable) Write(p []byte) error { _, err := w.buf.Write(p); return err }
func (w *memWritable) Finish() error        { return nil }
func (w *memWritable) Abort()               {}

// copyTable writes sorted (strictly increasing) keys and their values as
// an sstable.
type copyTable struct {
	out *memWritable
	w   *sstable.Writer
	n   int
}

func newCopyTable() *copyTable {
	out := &memWritable{}
	return &copyTable{out: out, w: sstable.NewWriter(out, sstable.WriterOptions{
		TableFormat:  copyTableFormat,
		FilterPolicy: bloom.FilterPolicy(copyFilterBits),
	})}
}

func (t *copyTable) set(k, v []byte) error {
	t.n++
	return t.w.Set(k, v)
}

// finish returns the table's bytes (nil when it holds no key).
func (t *copyTable) finish() ([]byte, error) {
	if err := t.w.Close(); err != nil {
		return nil, err
	}
	if t.n == 0 {
		return nil, nil
	}
	return t.out.buf.Bytes(), nil
}

// CopyTables builds the tables of a copy entry (CopyChunks.tables) from
// its chunks' tuples, in this replicaset's key layout, and takes the
// tuples out of the chunks. It leaves out the keys r (this member's
// database) holds a tuple or a tombstone of (none when r is nil), and
// cuts a bucket's table at each of them: every member leaves them out
// again at apply, and a table without them is ingested as it is. The
// tuples may come in any order; of two of the same key the first is kept.
func (sm *SM) CopyTables(r pebble.Reader, chunks []*rspb.CopyChunk) ([][]byte, error) {
	type row struct {
		b    uint32
		k, v []byte
	}
	var rows []row
	for _, c := range chunks {
		for _, t := range c.GetTuples() {
			rows = append(rows, row{c.GetBucket(), sm.k.tuple(c.GetBucket(), t.GetSpaceId(), t.GetKey()), encodeStored(t.GetVersion(), t.GetTuple())})
		}
		c.Tuples = nil
	}
	slices.SortStableFunc(rows, func(x, y row) int { return bytes.Compare(x.k, y.k) })
	rows = slices.CompactFunc(rows, func(x, y row) bool { return bytes.Equal(x.k, y.k) })
	var out [][]byte
	var t *copyTable
	cut := func() error {
		if t == nil {
			return nil
		}
		sst, err := t.finish()
		if sst != nil {
			out = append(out, sst)
		}
		t = nil
		return err
	}
	for len(rows) > 0 {
		// One bucket's rows (its keys are contiguous).
		n := 1
		for n < len(rows) && rows[n].b == rows[0].b {
			n++
		}
		var held map[string]struct{}
		if r != nil {
			var err error
			if held, err = heldKeys(r, sm.k, rows[0].k, rows[n-1].k); err != nil {
				return nil, err
			}
		}
		for _, r := range rows[:n] {
			if _, h := held[string(r.k)]; h {
				if err := cut(); err != nil {
					return nil, err
				}
				continue
			}
			if t == nil {
				t = newCopyTable()
			}
			if err := t.set(r.k, r.v); err != nil {
				return nil, fmt.Errorf("replicaset: a copy table: %w", err)
			}
		}
		if err := cut(); err != nil {
			return nil, err
		}
		rows = rows[n:]
	}
	return out, nil
}

// copySST is one table of a copy entry, checked: every key a tuple key
// of one bucket the entry copies, under this group's prefix, with a space
// id, every value a stored tuple, nothing but plain sets.
type copySST struct {
	r           *sstable.Reader
	sst         []byte
	bucket      uint32
	first, last []byte         // its smallest and largest keys
	bySpace     map[uint32]int // keys per space id
	n           int
}

// errCopySST: a copy entry's table is not what a copy may ingest.
var errCopySST = errors.New("replicaset: copy table refused")

// openCopySST reads and checks a table of a copy entry, whose keys may be
// of one of the buckets named. The caller closes it.
func openCopySST(k keys, named map[uint32]bool, sst []byte) (_ *copySST, err error) {
	r, err := sstable.NewMemReader(sst, sstable.ReaderOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCopySST, err)
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if f, err := r.TableFormat(); err != nil {
		return nil, fmt.Errorf("%w: %w", errCopySST, err)
	} else if f > copyTableFormat {
		return nil, fmt.Errorf("%w: table format %v (at most %v)", errCopySST, f, copyTableFormat)
	}
	dels, err := r.NewRawRangeDelIter(context.Background(), sstable.NoFragmentTransforms, sstable.NoReadEnv)
	if dels != nil {
		dels.Close()
		return nil, fmt.Errorf("%w: it has range deletions (only tuples are copied)", errCopySST)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCopySST, err)
	}
	rks, err := r.NewRawRangeKeyIter(context.Background(), sstable.NoFragmentTransforms, sstable.NoReadEnv)
	if rks != nil {
		rks.Close()
		return nil, fmt.Errorf("%w: it has range keys (only tuples are copied)", errCopySST)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCopySST, err)
	}
	c := &copySST{r: r, sst: sst, bySpace: map[uint32]int{}}
	prefix := k.sub(storage.DataTuple, 0)
	err = c.each(func(key, v []byte) error {
		if len(key) < len(prefix)+8 || !bytes.HasPrefix(key, prefix) {
			return fmt.Errorf("%w: key %q is not a tuple key of this replicaset", errCopySST, key)
		}
		b := binary.BigEndian.Uint32(key[len(prefix):])
		switch {
		case c.n == 0 && !named[b]:
			return fmt.Errorf("%w: key %q is of bucket %d, which the entry does not copy", errCopySST, key, b)
		case c.n > 0 && b != c.bucket:
			return fmt.Errorf("%w: key %q is of bucket %d, the table's first of bucket %d", errCopySST, key, b, c.bucket)
		}
		if len(v) < 8 {
			return fmt.Errorf("%w: key %q: a stored tuple of %d bytes", errCopySST, key, len(v))
		}
		if c.n == 0 {
			c.bucket, c.first = b, bytes.Clone(key)
		}
		c.last = append(c.last[:0], key...)
		c.bySpace[binary.BigEndian.Uint32(key[len(prefix)+4:])]++
		c.n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c.n == 0 {
		return nil, fmt.Errorf("%w: no key", errCopySST)
	}
	return c, nil
}

// each calls fn with every key and value in order (valid during the
// call); a key of a kind other than a set is refused.
func (c *copySST) each(fn func(k, v []byte) error) error {
	it, err := c.r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		return fmt.Errorf("%w: %w", errCopySST, err)
	}
	var buf []byte
	for kv := it.First(); kv != nil; kv = it.Next() {
		if kv.K.Kind() != pebble.InternalKeyKindSet {
			_ = it.Close()
			return fmt.Errorf("%w: key %q of kind %v (only sets are copied)", errCopySST, kv.K.UserKey, kv.K.Kind())
		}
		v, _, err := kv.Value(buf[:0])
		if err == nil {
			err = fn(kv.K.UserKey, v)
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: %w", errCopySST, err)
	}
	return nil
}

func (c *copySST) close() { _ = c.r.Close() }

// SetIngestDir gives the state machine a directory of fs, beside its
// database and on the same file system, for the copy tables it ingests;
// files left there by an earlier run are removed. Without one a member
// applies a copy table's rows through its apply batch (the same rows, at
// the tuples' cost). Call it before the group applies anything, as New's
// caller.
func (sm *SM) SetIngestDir(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("replicaset: the copy tables' directory: %w", err)
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("replicaset: the copy tables' directory: %w", err)
	}
	own := fmt.Sprintf("copy-%d-", sm.group)
	for _, n := range names {
		if strings.HasPrefix(n, own) && strings.HasSuffix(n, ".sst") {
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
				return fmt.Errorf("replicaset: a copy table left in %s: %w", dir, err)
			}
		}
	}
	sm.ingestFS, sm.ingestDir = fs, dir
	return nil
}

// ingest makes the tables' rows the database's, durably, at once.
func (a *applier) ingest(tables [][]byte) {
	if a.err != nil || len(tables) == 0 {
		return
	}
	sm := a.sm
	var paths []string
	defer func() {
		// Pebble linked (or copied) them into the database's directory.
		for _, p := range paths {
			_ = sm.ingestFS.Remove(p)
		}
	}()
	for i, t := range tables {
		p := sm.ingestFS.PathJoin(sm.ingestDir, fmt.Sprintf("copy-%d-%d-%d.sst", sm.group, a.index, i))
		if a.err = writeSynced(sm.ingestFS, p, t); a.err != nil {
			return
		}
		paths = append(paths, p)
	}
	if err := sm.db.Ingest(context.Background(), paths); err != nil {
		a.err = fmt.Errorf("replicaset: ingesting %d copy tables (%s...): %w", len(paths), filepath.Base(paths[0]), err)
	}
}

func writeSynced(fs vfs.FS, path string, data []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// tableCopied is what a copy table brought one bucket.
type tableCopied struct {
	sent, copied int
	bySpace      map[uint32]uint64
}

// copyTables applies the tables of a copy entry: their rows but those of
// the buckets not received here at the generation of one of their chunks,
// of keys this member holds a tuple or a tombstone of, or of a space it
// does not know (dropped meanwhile), ingested together (or, without an
// ingest directory, written into the apply batch). It returns per bucket
// what the tables brought, or why they are refused, all of them.
func (a *applier) copyTables(chunks []*rspb.CopyChunk, tables [][]byte) (map[uint32]*tableCopied, error) {
	gens := map[uint32]map[uint64]bool{} // bucket -> its chunks' generations
	named := map[uint32]bool{}
	for _, c := range chunks {
		if gens[c.GetBucket()] == nil {
			gens[c.GetBucket()] = map[uint64]bool{}
		}
		gens[c.GetBucket()][c.GetGeneration()] = true
		named[c.GetBucket()] = true
	}
	var ts []*copySST
	defer func() {
		for _, c := range ts {
			c.close()
		}
	}()
	for i, sst := range tables {
		c, err := openCopySST(a.sm.k, named, sst)
		if err != nil {
			return nil, fmt.Errorf("table %d of %d: %w", i+1, len(tables), err)
		}
		ts = append(ts, c)
		if i > 0 && bytes.Compare(ts[i-1].last, c.first) >= 0 {
			return nil, fmt.Errorf("%w: table %d of %d begins at %q, within or before the one before it (to %q)", errCopySST, i+1, len(tables), c.first, ts[i-1].last)
		}
	}
	schema := a.sm.Schema()
	prefix := len(a.sm.k.sub(storage.DataTuple, 0))
	out := map[uint32]*tableCopied{}
	var ingest [][]byte
	for _, c := range ts {
		b := c.bucket
		o := out[b]
		if o == nil {
			o = &tableCopied{bySpace: map[uint32]uint64{}}
			out[b] = o
		}
		o.sent += c.n
		if st := a.bucket(b); st.GetState() != rspb.BucketState_STATE_RECEIVING || !gens[b][st.GetGeneration()] {
			continue // the bucket's chunks are refused
		}
		held, err := heldKeys(a.b, a.sm.k, c.first, c.last)
		if err != nil {
			a.err = err
			return nil, nil
		}
		whole := len(held) == 0
		for sp := range c.bySpace {
			if schema.ByID(sp) == nil {
				whole = false
			}
		}
		a.sm.rows.dropBucket(a.sm.k, b)
		keep := func(k []byte) bool {
			_, h := held[string(k)]
			return !h && schema.ByID(binary.BigEndian.Uint32(k[prefix+4:])) != nil
		}
		switch {
		case whole && a.sm.ingestFS != nil:
			ingest = append(ingest, c.sst)
			o.copied += c.n
			for sp, n := range c.bySpace {
				o.bySpace[sp] += uint64(n)
			}
		case a.sm.ingestFS != nil:
			t := newCopyTable()
			err := c.each(func(k, v []byte) error {
				if !keep(k) {
					return nil
				}
				o.copied++
				o.bySpace[binary.BigEndian.Uint32(k[prefix+4:])]++
				return t.set(k, v)
			})
			var rest []byte
			if err == nil {
				rest, err = t.finish()
			}
			if err != nil {
				a.err = fmt.Errorf("replicaset: a copy table without the keys held here: %w", err)
				return nil, nil
			}
			if rest != nil {
				ingest = append(ingest, rest)
			}
		default:
			err := c.each(func(k, v []byte) error {
				if !keep(k) {
					return nil
				}
				o.copied++
				o.bySpace[binary.BigEndian.Uint32(k[prefix+4:])]++
				a.setUncached(bytes.Clone(k), bytes.Clone(v))
				return a.err
			})
			if err != nil && a.err == nil {
				a.err = fmt.Errorf("replicaset: a copy table: %w", err)
			}
		}
		// The rows are in the database without the filters seeing them:
		// the bucket's filter goes (a receiving bucket has none; the
		// invariant holds either way), and its copy cursor moves past
		// them.
		a.sm.filters.drop(b)
		if cc := a.sm.copies[b]; cc != nil && bytes.Compare(c.last, cc.high) > 0 {
			cc.high = append(cc.high[:0], c.last...)
		}
	}
	a.ingest(ingest)
	return out, nil
}

// heldKeys returns the tuple keys in [first, last] (of one bucket) that r
// holds a tuple or a tombstone of.
func heldKeys(r pebble.Reader, k keys, first, last []byte) (map[string]struct{}, error) {
	held := map[string]struct{}{}
	tuples := len(k.sub(storage.DataTuple, 0))
	err := eachKey(r, first, append(bytes.Clone(last), 0), func(key []byte) { held[string(key)] = struct{}{} })
	if err != nil {
		return nil, err
	}
	// The same keys as tombstones: x/ instead of t/.
	tp, xp := k.sub(storage.DataTuple, 0), k.sub(storage.DataTombstone, 0)
	from := append(bytes.Clone(xp), first[tuples:]...)
	to := append(append(bytes.Clone(xp), last[tuples:]...), 0)
	err = eachKey(r, from, to, func(key []byte) {
		held[string(append(bytes.Clone(tp), key[len(xp):]...))] = struct{}{}
	})
	return held, err
}

// eachKey calls fn with every key in [from, to) r holds.
func eachKey(r pebble.Reader, from, to []byte, fn func(k []byte)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		fn(it.Key())
	}
	return errors.Join(it.Error(), it.Close())
}

// recount sets bucket b's counts to the tuples it holds, as the apply
// batch sees them.
func (a *applier) recount(b uint32) {
	if a.err != nil {
		return
	}
	prefix := a.sm.k.bucketTuples(b)
	n := map[uint32]int64{}
	a.err = eachKey(a.b, prefix, storage.PrefixEnd(prefix), func(key []byte) {
		if len(key) >= len(prefix)+4 {
			n[binary.BigEndian.Uint32(key[len(prefix):])]++
		}
	})
	if a.err != nil {
		return
	}
	for sp, c := range a.sm.counts[b] {
		if _, ok := n[sp]; !ok {
			a.addCount(b, sp, -c)
		}
	}
	for sp, c := range n {
		a.addCount(b, sp, c-a.sm.counts[b][sp])
	}
}
