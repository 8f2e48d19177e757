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
// rows and history of a copy entry travel through the destination's log
// as Pebble sstables of the destination's own keys (CopyChunks.tables),
// written by the source when its destination asks (sourceTables,
// SourceTables) or else by the destination's leader (CopyTables), which
// every member writes to files beside its database and ingests together,
// instead of applying each tuple through the apply batch.
//
// A table holds no key its leader held (a tuple or a tombstone: a write
// or a delete made during the copy; every member leaves them out again),
// and no key the leader holds lies within its range. A table that
// spanned one would land in level 0 over a key in the levels, or, over
// one in the memtable (a write made during the copy), make its ingest
// wait for a flush: Pebble (v2.1) ingests it as a flushable (a memtable
// rotation, the table flushed after the memtable) only while no memtable
// waits to be flushed (its queue below MemTableStopWritesThreshold, 2);
// the next overlapping ingest, arriving while that flush runs, rotates
// the memtable itself, which stalls every write ("memtable count limit
// reached") while the queued memtables' arenas (32 MiB each, however
// little they hold) reach twice the memtable size, and then waits for the
// flush with the commit pipeline held. Under a closed-loop write load
// nearly every table overlapped the memtable, and writes stalled up to
// 172 ms. So the leader ends a run of rows at every key it holds: a run
// of at least copyTableRows rows is a table of its own; shorter runs go
// together into one table, whose range holds the keys between them, and
// every member writes the rows of a table whose range holds a key it holds
// through its apply batch instead of ingesting it (as CockroachDB writes a
// small AddSSTable as a batch). A table spans as many buckets as that
// allows, because a file costs every member a create, a write and a sync
// whatever its size (0.3–0.5 ms of CPU on this project's machines).
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
// again from its rows when its copy completes (the copied mark), by a
// member that may have ingested a table twice: one that loaded its state
// since it applied the bucket's RECEIVING step (copyChunk).

// copyTableFormat is the sstable format of copied chunks: the newest one
// the oldest database format Pebble opens (FormatMinSupported) ingests,
// so any member can ingest what any leader builds.
var copyTableFormat = pebble.FormatMinSupported.MaxTableFormat()

// copyTableRows is the fewest rows a leader puts in a table of their own
// between two keys it holds: a table costs every member a file's create,
// write and sync (0.3–0.5 ms of CPU) whatever its size, and a row written
// through the apply batch instead costs about 1 µs more than an ingested
// one, so shorter runs go through the batches.
const copyTableRows = 512

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
// an sstable, and sums up what it holds (CopyTableSummary).
type copyTable struct {
	out *memWritable
	w   *sstable.Writer
	n   int
	sum *rspb.CopyTableSummary
}

func newCopyTable() *copyTable { return newCopyTableIn(&memWritable{}) }

// newCopyTableIn begins a table written into out, emptied first.
func newCopyTableIn(out *memWritable) *copyTable {
	out.buf.Reset()
	return &copyTable{out: out, sum: &rspb.CopyTableSummary{}, w: sstable.NewWriter(out, sstable.WriterOptions{
		TableFormat:  copyTableFormat,
		FilterPolicy: bloom.FilterPolicy(copyFilterBits),
	})}
}

// set writes the row of key k (of k's layout: kl) and value v, of bucket
// b, a tuple's or a history's.
func (t *copyTable) set(kl keys, b uint32, tuple bool, k, v []byte) error {
	t.n++
	var tb *rspb.CopyTableBucket
	if n := len(t.sum.Buckets); n > 0 && t.sum.Buckets[n-1].Bucket == b && t.sum.Buckets[n-1].Tuples == tuple {
		tb = t.sum.Buckets[n-1]
	} else {
		tb = &rspb.CopyTableBucket{Bucket: b, Tuples: tuple, First: bytes.Clone(k)}
		t.sum.Buckets = append(t.sum.Buckets, tb)
	}
	tb.Last = append(tb.Last[:0], k...)
	if tuple {
		if tb.BySpace == nil {
			tb.BySpace = map[uint32]uint64{}
		}
		tb.BySpace[binary.BigEndian.Uint32(k[kl.tupleSpaceAt():])]++
	}
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
// its chunks' tuples and events, in this replicaset's key layout, with
// their summaries (CopyChunks.summaries), and takes the tuples and events
// out of the chunks. It leaves out the keys r (this member's database)
// holds a tuple or a tombstone of, and cuts a table wherever r holds a
// key of a bucket other than those around it (nil r: none). The tuples
// may come in any order; of two of the same key the first is kept.
func (sm *SM) CopyTables(r pebble.Reader, chunks []*rspb.CopyChunk) ([][]byte, []*rspb.CopyTableSummary, error) {
	var tuples, events []copyRow
	for _, c := range chunks {
		b := c.GetBucket()
		for _, t := range c.GetTuples() {
			tuples = append(tuples, copyRow{b, sm.k.tuple(b, t.GetSpaceId(), t.GetKey()), encodeStored(t.GetVersion(), t.GetTuple())})
		}
		for _, v := range c.GetEvents() {
			_, rev, err := eventStamp(v) // as the source stored it, checked (checkedCopy)
			if err != nil {
				return nil, nil, fmt.Errorf("bucket %d: a copied event: %w", b, err)
			}
			events = append(events, copyRow{b, sm.k.event(b, rev), v})
		}
		c.Tuples, c.Events = nil, nil
	}
	// The history's keys (e/) sort before the tuples' (t/), each in
	// tables of their own.
	var out entryTables
	if err := sm.copyTablesOf(r, events, false, &out); err != nil {
		return nil, nil, err
	}
	err := sm.copyTablesOf(r, tuples, true, &out)
	return out.tables, out.sums, err
}

// SourceTables checks the tables a source wrote of chunks
// (SendBucketsResponse.tables) as every member would (openCopySST), and
// every event in them whole, and returns the entry's tables and their
// summaries: each as it came where r (this member's database) holds no
// key in its range and no tombstone of one of its tuples, else its rows
// in tables cut as CopyTables cuts them. size is the bytes of the rows.
// A table refused is an errCopySST naming what is wrong.
func (sm *SM) SourceTables(r pebble.Reader, chunks []*rspb.CopyChunk, tables [][]byte) (_ [][]byte, _ []*rspb.CopyTableSummary, size int, err error) {
	named := map[uint32]bool{}
	for _, c := range chunks {
		if len(c.GetTuples()) > 0 || len(c.GetEvents()) > 0 {
			return nil, nil, 0, fmt.Errorf("%w: bucket %d's chunk carries tuples or events beside the source's tables", errCopySST, c.GetBucket())
		}
		named[c.GetBucket()] = true
	}
	var out entryTables
	var last []byte
	for i, sst := range tables {
		c, err := openCopySST(sm.k, named, sst, true)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("table %d of %d: %w", i+1, len(tables), err)
		}
		size += c.size
		if last != nil && bytes.Compare(last, c.first) >= 0 {
			c.close()
			return nil, nil, 0, fmt.Errorf("%w: table %d of %d begins at %q, within or before the one before it (to %q)", errCopySST, i+1, len(tables), c.first, last)
		}
		last = c.last
		held, err := holdsAny(r, c.first, append(bytes.Clone(c.last), 0))
		if from, to, ok := c.tupleRange(); ok && err == nil && !held {
			err = eachTombstone(r, sm.k, from, to, func([]byte) { held = true })
		}
		if err == nil && !held {
			out.tables, out.sums = append(out.tables, sst), append(out.sums, c.summary())
			c.close()
			continue
		}
		// This member holds keys in the table's range: its rows are cut
		// there, as the tables of tuples are.
		var tuples, events []copyRow
		if err == nil {
			err = c.each(func(k, v []byte) error {
				row := copyRow{binary.BigEndian.Uint32(k[sm.k.bucketAt():]), bytes.Clone(k), bytes.Clone(v)}
				if sm.k.isTuple(k) {
					tuples = append(tuples, row)
				} else {
					events = append(events, row)
				}
				return nil
			})
		}
		c.close()
		if err == nil {
			err = sm.copyTablesOf(r, events, false, &out)
		}
		if err == nil {
			err = sm.copyTablesOf(r, tuples, true, &out)
		}
		if err != nil {
			return nil, nil, 0, err
		}
	}
	return out.tables, out.sums, size, nil
}

// entryTables are a copy entry's tables and their summaries, one each.
type entryTables struct {
	tables [][]byte
	sums   []*rspb.CopyTableSummary
}

// add finishes t and adds it, unless it holds nothing.
func (e *entryTables) add(t *copyTable) error {
	sst, err := t.finish()
	if sst != nil {
		e.tables, e.sums = append(e.tables, sst), append(e.sums, t.sum)
	}
	return err
}

// copyRow is a key and value of a copy table, of bucket b.
type copyRow struct {
	b    uint32
	k, v []byte
}

// copyTablesOf adds the tables of rows, all tuples or all events, to out,
// as CopyTables says.
func (sm *SM) copyTablesOf(r pebble.Reader, rows []copyRow, tuples bool, out *entryTables) error {
	if len(rows) == 0 {
		return nil
	}
	slices.SortStableFunc(rows, func(x, y copyRow) int { return bytes.Compare(x.k, y.k) })
	rows = slices.CompactFunc(rows, func(x, y copyRow) bool { return bytes.Equal(x.k, y.k) })
	// The keys r holds in the rows' range, and the tuple keys of the
	// tombstones of the rows' buckets (a delete made here also deleted
	// the tuple key, which no iterator shows), in order.
	var held [][]byte
	if r != nil {
		for i := 0; tuples && i < len(rows); {
			n := i + 1
			for n < len(rows) && rows[n].b == rows[i].b {
				n++
			}
			if err := eachTombstone(r, sm.k, rows[i].k, rows[n-1].k, func(k []byte) { held = append(held, k) }); err != nil {
				return err
			}
			i = n
		}
		if err := eachKey(r, rows[0].k, append(bytes.Clone(rows[len(rows)-1].k), 0), func(k []byte) { held = append(held, bytes.Clone(k)) }); err != nil {
			return err
		}
		slices.SortFunc(held, bytes.Compare)
	}
	var t *copyTable  // the table being written
	var run []copyRow // the rows since the last key held
	cut := func() error {
		if t == nil {
			return nil
		}
		err := out.add(t)
		t = nil
		return err
	}
	// A run of at least copyTableRows goes in a table of its own, which no
	// key held here overlaps; shorter runs go together into one table,
	// whose range holds the keys held between them, and which the members
	// therefore write through their apply batches (copyTables).
	endRun := func() error {
		if len(run) >= copyTableRows {
			if err := cut(); err != nil {
				return err
			}
		}
		for _, row := range run {
			if t == nil {
				t = newCopyTable()
			}
			if err := t.set(sm.k, row.b, tuples, row.k, row.v); err != nil {
				return fmt.Errorf("replicaset: a copy table: %w", err)
			}
		}
		if len(run) >= copyTableRows {
			if err := cut(); err != nil {
				return err
			}
		}
		run = run[:0]
		return nil
	}
	for _, row := range rows {
		// A key held below or at this row ends the run before it; one
		// equal to it leaves the row out.
		skip := false
		for len(held) > 0 && bytes.Compare(held[0], row.k) <= 0 {
			skip = skip || bytes.Equal(held[0], row.k)
			if err := endRun(); err != nil {
				return err
			}
			held = held[1:]
		}
		if !skip {
			run = append(run, row)
		}
	}
	if err := endRun(); err != nil {
		return err
	}
	return cut()
}

// copySST is one table of a copy entry, checked: every key a tuple's
// (with a space id, its value a stored tuple) or a history's (an event's
// revision) of a bucket the entry copies, under this group's prefix,
// nothing but plain sets. Taken from its summary (summedCopySST), it is
// read only when rows are left out of it (each).
type copySST struct {
	r           *sstable.Reader // nil until read
	sst         []byte
	first, last []byte         // its smallest and largest keys
	buckets     []*tableBucket // in key order
	size        int            // its keys' and values' bytes, where read whole
}

// tableBucket is what a copy table holds of one bucket: its tuples, or
// its history (events).
type tableBucket struct {
	bucket      uint32
	tuples      bool
	first, last []byte         // its smallest and largest keys in the table
	bySpace     map[uint32]int // tuples per space id
	n           int            // tuples
}

// errCopySST: a copy entry's table is not what a copy may ingest.
var errCopySST = errors.New("replicaset: copy table refused")

// openCopySST reads and checks a table of a copy entry, whose keys may be
// of the buckets named; with events, it decodes every event whole and
// checks it is of its key's bucket and revision (a source's table, read
// by the leader: SourceTables). The caller closes it.
func openCopySST(k keys, named map[uint32]bool, sst []byte, events bool) (_ *copySST, err error) {
	c := &copySST{sst: sst}
	if err := c.open(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	r := c.r
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
	tp, ep := k.sub(storage.DataTuple, 0), k.sub(storage.DataEvent, 0)
	var tb *tableBucket
	err = c.each(func(key, v []byte) error {
		c.size += len(key) + len(v)
		tuple := bytes.HasPrefix(key, tp)
		switch {
		case tuple && len(key) < len(tp)+8:
			return fmt.Errorf("%w: tuple key %q has no space id", errCopySST, key)
		case tuple && len(v) < 8:
			return fmt.Errorf("%w: key %q: a stored tuple of %d bytes", errCopySST, key, len(v))
		case !tuple && (!bytes.HasPrefix(key, ep) || len(key) != len(ep)+12):
			return fmt.Errorf("%w: key %q is neither a tuple's nor a history's of this replicaset", errCopySST, key)
		}
		b := binary.BigEndian.Uint32(key[k.bucketAt():])
		if !named[b] {
			return fmt.Errorf("%w: key %q is of bucket %d, which the entry does not copy", errCopySST, key, b)
		}
		if !tuple && events {
			ev := &rspb.Event{}
			rev := binary.BigEndian.Uint64(key[len(ep)+4:])
			if err := ev.UnmarshalVT(v); err != nil {
				return fmt.Errorf("%w: bucket %d's event %d is not an Event: %w", errCopySST, b, rev, err)
			}
			if ev.GetBucket() != b || ev.GetRevision() != rev || rev == 0 {
				return fmt.Errorf("%w: the event at bucket %d's revision %d is of bucket %d, revision %d", errCopySST, b, rev, ev.GetBucket(), ev.GetRevision())
			}
		}
		if tb == nil || tb.bucket != b || tb.tuples != tuple {
			tb = &tableBucket{bucket: b, tuples: tuple, first: bytes.Clone(key), bySpace: map[uint32]int{}}
			c.buckets = append(c.buckets, tb)
		}
		tb.last = append(tb.last[:0], key...)
		if tuple {
			tb.bySpace[binary.BigEndian.Uint32(key[k.tupleSpaceAt():])]++
			tb.n++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(c.buckets) == 0 {
		return nil, fmt.Errorf("%w: no key", errCopySST)
	}
	c.first, c.last = c.buckets[0].first, c.buckets[len(c.buckets)-1].last
	return c, nil
}

// summedCopySST is a table of a copy entry as its summary says, unread:
// the leader read or wrote it (SourceTables, CopyTables) and logged what
// it holds, so a member takes that instead of reading every key. The
// summary is checked as openCopySST checks a table's keys: its buckets
// named, in key order, each range under its bucket's prefix.
func summedCopySST(k keys, named map[uint32]bool, sst []byte, sum *rspb.CopyTableSummary) (*copySST, error) {
	c := &copySST{sst: sst}
	for _, sb := range sum.GetBuckets() {
		b := sb.GetBucket()
		tb := &tableBucket{bucket: b, tuples: sb.GetTuples(), first: sb.GetFirst(), last: sb.GetLast(), bySpace: map[uint32]int{}}
		prefix := k.bucketTuples(b)
		if !tb.tuples {
			prefix = binary.BigEndian.AppendUint32(k.sub(storage.DataEvent, 4), b)
		}
		switch {
		case !named[b]:
			return nil, fmt.Errorf("%w: its summary names bucket %d, which the entry does not copy", errCopySST, b)
		case !tb.tuples && len(sb.GetBySpace()) > 0:
			return nil, fmt.Errorf("%w: its summary counts tuples in bucket %d's history", errCopySST, b)
		case !bytes.HasPrefix(tb.first, prefix) || !bytes.HasPrefix(tb.last, prefix) || bytes.Compare(tb.first, tb.last) > 0:
			return nil, fmt.Errorf("%w: its summary gives bucket %d the keys %q to %q, not a range of the bucket's", errCopySST, b, tb.first, tb.last)
		case c.last != nil && bytes.Compare(c.last, tb.first) >= 0:
			return nil, fmt.Errorf("%w: its summary gives bucket %d keys from %q, within or before the bucket before it (to %q)", errCopySST, b, tb.first, c.last)
		}
		for sp, n := range sb.GetBySpace() {
			tb.bySpace[sp] += int(n)
			tb.n += int(n)
		}
		if c.first == nil {
			c.first = tb.first
		}
		c.last = tb.last
		c.buckets = append(c.buckets, tb)
	}
	if len(c.buckets) == 0 {
		return nil, fmt.Errorf("%w: its summary names no bucket", errCopySST)
	}
	return c, nil
}

// tupleRange is the range of the table's tuples: the first of its first
// bucket of tuples to the last of its last (ok: it has tuples).
func (c *copySST) tupleRange() (first, last []byte, ok bool) {
	for _, tb := range c.buckets {
		if !tb.tuples {
			continue
		}
		if first == nil {
			first = tb.first
		}
		last = tb.last
	}
	return first, last, first != nil
}

// summary is what the table holds, as an entry logs it.
func (c *copySST) summary() *rspb.CopyTableSummary {
	s := &rspb.CopyTableSummary{}
	for _, tb := range c.buckets {
		sb := &rspb.CopyTableBucket{Bucket: tb.bucket, Tuples: tb.tuples, First: tb.first, Last: tb.last}
		if tb.tuples {
			sb.BySpace = map[uint32]uint64{}
			for sp, n := range tb.bySpace {
				sb.BySpace[sp] = uint64(n)
			}
		}
		s.Buckets = append(s.Buckets, sb)
	}
	return s
}

func (c *copySST) open() error {
	if c.r != nil {
		return nil
	}
	r, err := sstable.NewMemReader(c.sst, sstable.ReaderOptions{})
	if err != nil {
		return fmt.Errorf("%w: %w", errCopySST, err)
	}
	c.r = r
	return nil
}

// each calls fn with every key and value in order (valid during the
// call); a key of a kind other than a set is refused.
func (c *copySST) each(fn func(k, v []byte) error) error {
	if err := c.open(); err != nil {
		return err
	}
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

func (c *copySST) close() {
	if c.r != nil {
		_ = c.r.Close()
	}
}

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
// the buckets that would refuse their chunks (copyChunk),
// of keys this member holds a tuple or a tombstone of, or of a space it
// does not know (dropped meanwhile), ingested together (or, without an
// ingest directory, written into the apply batch). It returns per bucket
// what the tables brought, or why they are refused, all of them.
func (a *applier) copyTables(chunks []*rspb.CopyChunk, tables [][]byte, sums []*rspb.CopyTableSummary) (map[uint32]*tableCopied, error) {
	if len(sums) > 0 && len(sums) != len(tables) {
		return nil, fmt.Errorf("%w: %d summaries of %d tables", errCopySST, len(sums), len(tables))
	}
	gens := map[uint32]map[uint64]bool{} // bucket -> its chunks' generations
	named := map[uint32]bool{}
	restore := map[uint32]bool{} // buckets restored from a backup
	for _, c := range chunks {
		if gens[c.GetBucket()] == nil {
			gens[c.GetBucket()] = map[uint64]bool{}
		}
		gens[c.GetBucket()][c.GetGeneration()] = true
		named[c.GetBucket()] = true
		restore[c.GetBucket()] = restore[c.GetBucket()] || c.GetRestore()
	}
	// A bucket takes the tables' rows where one of its chunks would be
	// applied (copyChunk).
	takes := func(b uint32) bool {
		st := a.bucket(b)
		for gen := range gens[b] {
			if copyTakes(st, restore[b], gen) {
				return true
			}
		}
		return false
	}
	var ts []*copySST
	defer func() {
		for _, c := range ts {
			c.close()
		}
	}()
	for i, sst := range tables {
		var c *copySST
		var err error
		if len(sums) > 0 {
			c, err = summedCopySST(a.sm.k, named, sst, sums[i])
		} else {
			c, err = openCopySST(a.sm.k, named, sst, false)
		}
		if err != nil {
			return nil, fmt.Errorf("table %d of %d: %w", i+1, len(tables), err)
		}
		ts = append(ts, c)
		if i > 0 && bytes.Compare(ts[i-1].last, c.first) >= 0 {
			return nil, fmt.Errorf("%w: table %d of %d begins at %q, within or before the one before it (to %q)", errCopySST, i+1, len(tables), c.first, ts[i-1].last)
		}
	}
	schema := a.sm.Schema()
	k := a.sm.k
	bucketOf := func(key []byte) uint32 { return binary.BigEndian.Uint32(key[k.bucketAt():]) }
	spaceOf := func(key []byte) uint32 { return binary.BigEndian.Uint32(key[k.tupleSpaceAt():]) }
	out := map[uint32]*tableCopied{}
	skip := map[uint32]bool{}     // buckets not received here
	held := map[string]struct{}{} // keys held here
	var ingest [][]byte
	for _, c := range ts {
		// A key held in the table's range: the table would overlap it,
		// and one in the memtable makes its ingest wait for a flush
		// (copyTablesOf). Only the keys within its buckets' ranges can
		// be rows of it to leave out.
		overlaps, err := holdsAny(a.b, c.first, append(bytes.Clone(c.last), 0))
		if err != nil {
			a.err = err
			return nil, nil
		}
		// The tuple keys of the tombstones in the range of its tuples, in
		// order, in one look: those within a bucket's range are its rows
		// to leave out.
		var tombs [][]byte
		if from, to, ok := c.tupleRange(); ok {
			if err := eachTombstone(a.b, a.sm.k, from, to, func(k []byte) { tombs = append(tombs, k) }); err != nil {
				a.err = err
				return nil, nil
			}
		}
		whole := !overlaps
		// A key or range this run's batch deletes (a cleanup of a bucket
		// given away earlier in the run, a history cut short, a tuple
		// deleted before a restore's table) would take an ingested
		// table's rows with it when the batch commits, after the ingest
		// (no iterator of the batch shows such a key to leave out): the
		// rows go through the batch, after the deletion.
		viaBatch := a.sm.deletedWithin(c.first, c.last)
		for _, tb := range c.buckets {
			b := tb.bucket
			o := out[b]
			if o == nil {
				o = &tableCopied{bySpace: map[uint32]uint64{}}
				out[b] = o
			}
			o.sent += tb.n
			if !takes(b) {
				skip[b], whole = true, false // the bucket's chunks are refused
				continue
			}
			n := len(held)
			if overlaps { // else nothing is held in the table's range
				if err := eachKey(a.b, tb.first, append(bytes.Clone(tb.last), 0), func(k []byte) { held[string(k)] = struct{}{} }); err != nil {
					a.err = err
					return nil, nil
				}
			}
			if !tb.tuples {
				// The history is read again when the bucket is next
				// written (recordEvent).
				delete(a.sm.hist, b)
			} else {
				i, _ := slices.BinarySearchFunc(tombs, tb.first, bytes.Compare)
				for ; i < len(tombs) && bytes.Compare(tombs[i], tb.last) <= 0; i++ {
					held[string(tombs[i])] = struct{}{}
				}
			}
			if len(held) > n {
				// A key written here, or a tuple key deleted here (whose
				// deletion no iterator shows).
				whole, overlaps = false, true
			}
			for sp := range tb.bySpace {
				if schema.ByID(sp) == nil {
					whole = false
				}
			}
			a.sm.rows.dropBucket(a.sm.k, b)
		}
		keep := func(key []byte) bool {
			if skip[bucketOf(key)] {
				return false
			}
			_, h := held[string(key)]
			return !h && (!k.isTuple(key) || schema.ByID(spaceOf(key)) != nil)
		}
		count := func(key []byte) {
			if !k.isTuple(key) {
				return
			}
			o := out[bucketOf(key)]
			o.copied++
			o.bySpace[spaceOf(key)]++
		}
		switch {
		case whole && a.sm.ingestFS != nil && !viaBatch:
			ingest = append(ingest, c.sst)
			for _, tb := range c.buckets {
				o := out[tb.bucket]
				o.copied += tb.n
				for sp, n := range tb.bySpace {
					o.bySpace[sp] += uint64(n)
				}
			}
		case a.sm.ingestFS != nil && !overlaps && !viaBatch:
			t := newCopyTable()
			err := c.each(func(key, v []byte) error {
				if !keep(key) {
					return nil
				}
				count(key)
				return t.set(k, bucketOf(key), k.isTuple(key), key, v)
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
			err := c.each(func(key, v []byte) error {
				if !keep(key) {
					return nil
				}
				count(key)
				a.setUncached(bytes.Clone(key), bytes.Clone(v))
				return a.err
			})
			if err != nil && a.err == nil {
				a.err = fmt.Errorf("replicaset: a copy table: %w", err)
			}
		}
		// The rows are in the database without the filters seeing them:
		// the buckets' filters go (a receiving bucket has none; the
		// invariant holds either way), and their copy cursors move past
		// them.
		for _, tb := range c.buckets {
			if skip[tb.bucket] || !tb.tuples {
				continue
			}
			a.sm.filters.drop(tb.bucket)
			if cc := a.sm.copies[tb.bucket]; cc != nil && bytes.Compare(tb.last, cc.high) > 0 {
				cc.high = append(cc.high[:0], tb.last...)
			}
		}
	}
	a.ingest(ingest)
	return out, nil
}

// eachTombstone calls fn with the tuple key of every tombstone r holds
// of a tuple key in [first, last] (keys of one bucket).
func eachTombstone(r pebble.Reader, k keys, first, last []byte, fn func(k []byte)) error {
	tp, xp := k.sub(storage.DataTuple, 0), k.sub(storage.DataTombstone, 0)
	from := append(bytes.Clone(xp), first[len(tp):]...)
	to := append(append(bytes.Clone(xp), last[len(tp):]...), 0)
	return eachKey(r, from, to, func(key []byte) {
		fn(append(bytes.Clone(tp), key[len(xp):]...))
	})
}

// holdsAny tells whether r holds a key in [from, to).
func holdsAny(r pebble.Reader, from, to []byte) (bool, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return false, err
	}
	ok := it.First()
	return ok, errors.Join(it.Error(), it.Close())
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
