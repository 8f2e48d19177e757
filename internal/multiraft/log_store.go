package multiraft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// logStore is one group's raft.Storage over the shared Pebble database.
//
// Raft calls it only from inside RawNode methods, and the engine calls
// RawNode only with the group's mutex held, so logStore needs no lock of its
// own. It serves recent entries from an in-memory cache (a leader reads
// every entry back soon after writing it, to replicate it) and falls back to
// Pebble for older ones.
type logStore struct {
	db    *pebble.DB
	group GroupID

	hardState *raftpb.HardState // as loaded at open, for InitialState (raft asks once, in NewRawNode)
	applied   appliedState      // last persisted applied state
	truncated logPosition       // last entry removed from the log (or the snapshot's)
	lastIndex uint64

	cache entryCache
	sizes appliedSizes
	side  *sideloadStore // large entries' data (nil: none is sideloaded)
}

// appliedSizes follows the bytes of the applied entries still in the log,
// for the byte rule of log compaction (doc.go, "Log compaction"): one mark
// per applied batch, its last index and the bytes applied through it since
// the group was opened. Entries applied before the group was opened are
// not counted (their sizes are not read back at open); the count rule
// still covers them.
type appliedSizes struct {
	total uint64        // bytes applied since the group was opened
	base  uint64        // total through the last truncated batch
	marks []appliedMark // batches applied after the truncation, in order
}

type appliedMark struct{ index, total uint64 }

// applied records a batch of applied entries: its last index and bytes.
func (z *appliedSizes) applied(index, bytes uint64) {
	z.total += bytes
	z.marks = append(z.marks, appliedMark{index: index, total: z.total})
}

// inLog is the bytes of the applied entries still in the log, as counted.
func (z *appliedSizes) inLog() uint64 { return z.total - z.base }

// keepFrom is the lowest index the log may be truncated through so that
// the applied entries kept after it hold at most keep bytes: the last
// index of an applied batch, the first that leaves that little (0: no
// batch recorded). When the last batch alone holds more, it is its last
// index: no applied entry is kept.
func (z *appliedSizes) keepFrom(keep uint64) uint64 {
	var to uint64
	for _, m := range z.marks {
		to = m.index
		if z.total-m.total <= keep {
			break
		}
	}
	return to
}

// truncated forgets the batches through index.
func (z *appliedSizes) truncated(index uint64) {
	n := 0
	for n < len(z.marks) && z.marks[n].index <= index {
		z.base = z.marks[n].total
		n++
	}
	z.marks = append(z.marks[:0], z.marks[n:]...)
}

// reset forgets everything (a snapshot replaced the log).
func (z *appliedSizes) reset() { z.base, z.marks = z.total, z.marks[:0] }

var _ raft.Storage = (*logStore)(nil)

func newLogStore(db *pebble.DB, g GroupID, cacheBytes int, side *sideloadStore) *logStore {
	return &logStore{db: db, group: g, hardState: &raftpb.HardState{}, cache: entryCache{maxBytes: cacheBytes}, side: side}
}

// load reads the group's persisted raft state. A group that has none
// (found == false) has an empty log and no configuration.
func (s *logStore) load() (found bool, err error) {
	s.applied = appliedState{ConfState: &raftpb.ConfState{}}
	if v, ok, err := s.get(groupKey(s.group, suffixHardState)); err != nil {
		return false, err
	} else if ok {
		found = true
		if err := proto.Unmarshal(v, s.hardState); err != nil {
			return false, fmt.Errorf("%w: group %d hard state: %w", ErrCorruptState, s.group, err)
		}
	}
	if v, ok, err := s.get(groupKey(s.group, suffixApplied)); err != nil {
		return false, err
	} else if ok {
		found = true
		if s.applied, err = decodeApplied(v); err != nil {
			return false, fmt.Errorf("group %d applied state: %w", s.group, err)
		}
	}
	if v, ok, err := s.get(groupKey(s.group, suffixTruncated)); err != nil {
		return false, err
	} else if ok {
		found = true
		if s.truncated, _, err = decodePosition(v); err != nil {
			return false, fmt.Errorf("group %d truncated state: %w", s.group, err)
		}
	}
	// Entries already durable in the log may be applied before the round's
	// hard state (with its commit index) is synced; applied entries are
	// committed, so the commit index is at least the applied one.
	if s.applied.Index > s.hardState.GetCommit() {
		s.hardState.Commit = new(s.applied.Index)
	}
	s.lastIndex = s.truncated.Index
	last, err := s.lastStoredIndex()
	if err != nil {
		return false, err
	}
	if last > s.lastIndex {
		s.lastIndex = last
		found = true
	}
	if s.side != nil {
		if err := s.side.open(s.truncated.Index, s.lastIndex); err != nil {
			return false, err
		}
	}
	return found, nil
}

func (s *logStore) lastStoredIndex() (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: logKey(s.group, 0),
		UpperBound: logSpanEnd(s.group),
	})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	k := it.Key()
	if len(k) < 8 {
		return 0, fmt.Errorf("%w: group %d: short log key %x", ErrCorruptState, s.group, k)
	}
	return binary.BigEndian.Uint64(k[len(k)-8:]), nil
}

func (s *logStore) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, closer.Close()
}

// InitialState implements raft.Storage.
func (s *logStore) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	return proto.CloneOf(s.hardState), proto.CloneOf(s.applied.ConfState), nil
}

// FirstIndex implements raft.Storage.
func (s *logStore) FirstIndex() (uint64, error) { return s.truncated.Index + 1, nil }

// LastIndex implements raft.Storage.
func (s *logStore) LastIndex() (uint64, error) { return s.lastIndex, nil }

// Term implements raft.Storage.
func (s *logStore) Term(i uint64) (uint64, error) {
	switch {
	case i == s.truncated.Index:
		return s.truncated.Term, nil
	case i < s.truncated.Index:
		return 0, raft.ErrCompacted
	case i > s.lastIndex:
		return 0, raft.ErrUnavailable
	}
	if e, _, ok := s.cache.get(i); ok {
		return e.GetTerm(), nil
	}
	e, err := s.readEntry(i)
	if err != nil {
		return 0, err
	}
	return e.GetTerm(), nil
}

// Entries implements raft.Storage.
func (s *logStore) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	if lo <= s.truncated.Index {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex+1 {
		return nil, fmt.Errorf("multiraft: group %d: entries [%d, %d) beyond last index %d", s.group, lo, hi, s.lastIndex)
	}
	var out []*raftpb.Entry
	var size uint64
	fits := func(n int) bool {
		size += uint64(n)
		return len(out) == 0 || size <= maxSize
	}
	i := lo
	for ; i < hi; i++ {
		e, n, ok := s.cache.get(i)
		if !ok {
			break
		}
		if !fits(n) {
			return out, nil
		}
		out = append(out, e)
	}
	if i == hi {
		return out, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(s.group, i), UpperBound: logKey(s.group, hi)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		e, n, ref, err := s.decode(i, it.Value())
		if err != nil {
			return nil, err
		}
		if e.GetIndex() != i {
			return nil, fmt.Errorf("%w: group %d: expected entry %d, found %d", ErrCorruptState, s.group, i, e.GetIndex())
		}
		i++
		if !fits(n) {
			return out, nil
		}
		if ref != nil { // read only once it fits
			if e.Data, err = s.side.read(logPosition{Index: e.GetIndex(), Term: e.GetTerm()}, ref.size, ref.crc); err != nil {
				return nil, fmt.Errorf("%w: group %d: %w", ErrCorruptState, s.group, err)
			}
		}
		out = append(out, e)
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if i != hi {
		return nil, raft.ErrUnavailable
	}
	return out, nil
}

// readEntry reads entry i, without a sideloaded entry's data.
func (s *logStore) readEntry(i uint64) (*raftpb.Entry, error) {
	v, ok, err := s.get(logKey(s.group, i))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, raft.ErrUnavailable
	}
	e, _, _, err := s.decode(i, v)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// decode decodes the stored value of entry i (sideload.go) and gives the
// entry's size as raft counts it (its encoding, data included); for a
// sideloaded entry, whose data is then still in its file, also what the
// log says of the file.
func (s *logStore) decode(i uint64, v []byte) (*raftpb.Entry, int, *sideloadRef, error) {
	e, ref, sideloaded, err := decodeStoredEntry(v)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%w: group %d: log entry %d: %w", ErrCorruptState, s.group, i, err)
	}
	if !sideloaded {
		return e, len(v), nil, nil
	}
	if s.side == nil {
		return nil, 0, nil, fmt.Errorf("%w: group %d: log entry %d is sideloaded, and this host keeps no sideloaded entries (Config.SideloadDir is empty)", ErrCorruptState, s.group, i)
	}
	return e, len(v) + int(ref.size), &ref, nil
}

// Snapshot implements raft.Storage. The engine's snapshots are made on
// demand: this returns only the metadata of the applied state; the sender
// fills in the data from a consistent view of the database when it streams
// the snapshot (and may send a newer applied state than this one, which
// raft accepts: the follower simply acknowledges a higher index).
func (s *logStore) Snapshot() (*raftpb.Snapshot, error) {
	if s.applied.Index == 0 {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	return &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index:     new(s.applied.Index),
		Term:      new(s.applied.Term),
		ConfState: proto.CloneOf(s.applied.ConfState),
	}}, nil
}

// stageAppend writes entries (and deletes any stored suffix they replace)
// into b. The in-memory view changes only in commitAppend, after b is durable.
func (s *logStore) stageAppend(b *pebble.Batch, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	wrote := false
	for _, e := range ents {
		// Encoded in place in the batch (entry_codec.go): no buffer of
		// its own, no reflection. A large entry's data goes to a file of
		// its own, its header to the batch (sideload.go).
		side := s.side.sideloads(e)
		var crc uint32
		n := entrySize(e)
		if side {
			var err error
			if crc, err = s.side.write(e); err != nil {
				return err
			}
			wrote, n = true, sideloadedValueSize(e)
		}
		op := b.SetDeferred(logKeyLen, n)
		appendLogKey(op.Key[:0], s.group, e.GetIndex())
		var v []byte
		if side {
			v = appendSideloadedValue(op.Value[:0], e, crc)
		} else {
			v = appendEntry(op.Value[:0], e)
		}
		if len(v) != n {
			return fmt.Errorf("group %d entry %d: encoded in %d bytes, %d expected", s.group, e.GetIndex(), len(v), n)
		}
		if err := op.Finish(); err != nil {
			return err
		}
	}
	if wrote {
		// The files, and their names, are durable before the batch that
		// names them.
		if err := s.side.sync(); err != nil {
			return err
		}
	}
	newLast := ents[len(ents)-1].GetIndex()
	if s.lastIndex > newLast {
		if err := b.DeleteRange(logKey(s.group, newLast+1), logKey(s.group, s.lastIndex+1), nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *logStore) commitAppend(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	s.cache.append(ents)
	s.lastIndex = ents[len(ents)-1].GetIndex()
	s.side.committed(ents[0].GetIndex())
}

func (s *logStore) stageHardState(b *pebble.Batch, hs *raftpb.HardState) error {
	v, err := proto.Marshal(hs)
	if err != nil {
		return err
	}
	return b.Set(groupKey(s.group, suffixHardState), v, nil)
}

func (s *logStore) stageApplied(b *pebble.Batch, a appliedState) error {
	v, err := encodeApplied(a)
	if err != nil {
		return err
	}
	return b.Set(groupKey(s.group, suffixApplied), v, nil)
}

// stageTruncate removes log entries up to and including pos.Index.
func (s *logStore) stageTruncate(b *pebble.Batch, pos logPosition) error {
	if err := b.DeleteRange(logKey(s.group, s.truncated.Index), logKey(s.group, pos.Index+1), nil); err != nil {
		return err
	}
	return b.Set(groupKey(s.group, suffixTruncated), encodePosition(pos), nil)
}

func (s *logStore) commitTruncate(pos logPosition) {
	s.truncated = pos
	if s.lastIndex < pos.Index {
		s.lastIndex = pos.Index
	}
	s.cache.truncateFront(pos.Index + 1)
	s.sizes.truncated(pos.Index)
	s.side.truncated(pos.Index)
}

// resetToSnapshot replaces the in-memory view after a snapshot became durable.
func (s *logStore) resetToSnapshot(pos logPosition) {
	s.truncated = pos
	s.lastIndex = pos.Index
	s.cache.clear()
	s.sizes.reset()
	s.side.reset()
}
