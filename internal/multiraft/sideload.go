package multiraft

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

// sideloadStore keeps the data of one group's large log entries as files
// of their own (doc.go, "Sideloaded entries"): one file per entry, named by
// its index and term, in the group's directory under Config.SideloadDir.
// Like the logStore that owns it, it is used only under the group's mutex.
type sideloadStore struct {
	fs  vfs.FS
	dir string // this group's directory
	min int    // the fewest bytes of data an entry's file holds

	files    []logPosition // the files this store knows of, by index then term
	pending  []logPosition // written by the round's stageAppend, not yet durable in the log
	unsynced []vfs.File    // written by the round's stageAppend, not yet synced
	scratch  []byte        // what write gives a file (its Write may change it)
	madeDir  bool
}

func newSideloadStore(fs vfs.FS, root string, g GroupID, minBytes int) *sideloadStore {
	return &sideloadStore{fs: fs, dir: fs.PathJoin(root, strconv.FormatUint(uint64(g), 10)), min: minBytes}
}

// sideloads says whether e's data goes to a file of its own.
func (s *sideloadStore) sideloads(e *raftpb.Entry) bool {
	return s != nil && len(e.GetData()) >= s.min
}

func sideloadName(p logPosition) string {
	return fmt.Sprintf("i%d.t%d", p.Index, p.Term)
}

// parseSideloadName reads a file's name back (ok false: not one of ours).
func parseSideloadName(name string) (logPosition, bool) {
	is, ts, ok := strings.Cut(name, ".")
	if !ok || !strings.HasPrefix(is, "i") || !strings.HasPrefix(ts, "t") {
		return logPosition{}, false
	}
	i, err1 := strconv.ParseUint(is[1:], 10, 64)
	t, err2 := strconv.ParseUint(ts[1:], 10, 64)
	if err1 != nil || err2 != nil {
		return logPosition{}, false
	}
	return logPosition{Index: i, Term: t}, true
}

func comparePositions(a, b logPosition) int {
	return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Term, b.Term))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// open lists the group's files and removes those the log cannot hold: at
// or below the truncated index, or above the last index (a round that
// wrote them and then failed before its batch committed).
func (s *sideloadStore) open(truncated, last uint64) error {
	names, err := s.fs.List(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("multiraft: list sideloaded entries: %w", err)
	}
	s.madeDir = true
	for _, name := range names {
		p, ok := parseSideloadName(name)
		if !ok {
			continue
		}
		if p.Index <= truncated || p.Index > last {
			s.remove(p)
			continue
		}
		s.files = append(s.files, p)
	}
	slices.SortFunc(s.files, comparePositions)
	return nil
}

// write stores e's data in its file, to be synced by sync, and returns
// the data's checksum (CRC-32C).
func (s *sideloadStore) write(e *raftpb.Entry) (uint32, error) {
	if !s.madeDir {
		if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
			return 0, fmt.Errorf("multiraft: sideloaded entries' directory: %w", err)
		}
		if err := syncDir(s.fs, s.fs.PathDir(s.dir)); err != nil {
			return 0, fmt.Errorf("multiraft: sideloaded entries' directory: %w", err)
		}
		s.madeDir = true
	}
	p := logPosition{Index: e.GetIndex(), Term: e.GetTerm()}
	f, err := s.fs.Create(s.fs.PathJoin(s.dir, sideloadName(p)), "raft-sideload")
	if err != nil {
		return 0, fmt.Errorf("multiraft: sideload entry %d: %w", p.Index, err)
	}
	s.unsynced = append(s.unsynced, f)
	s.pending = append(s.pending, p)
	// A vfs.File's Write may change the bytes it is given (Pebble's
	// in-memory one does under its invariants): it gets a copy, not the
	// entry's data, which raft and the entry cache still hold.
	s.scratch = append(s.scratch[:0], e.GetData()...)
	if _, err := f.Write(s.scratch); err != nil {
		return 0, fmt.Errorf("multiraft: sideload entry %d: %w", p.Index, err)
	}
	return crc32.Checksum(e.GetData(), castagnoli), nil
}

// sync makes the files write wrote durable, and their names: each file
// and the directory are synced at once (a file system commits its journal
// once for them all), and the files closed.
func (s *sideloadStore) sync() error {
	errs := make([]error, len(s.unsynced)+1)
	var wg sync.WaitGroup
	for i, f := range s.unsynced {
		wg.Go(func() {
			errs[i] = f.Sync()
			if err := f.Close(); errs[i] == nil {
				errs[i] = err
			}
		})
	}
	errs[len(s.unsynced)] = syncDir(s.fs, s.dir)
	wg.Wait()
	s.unsynced = s.unsynced[:0]
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("multiraft: sync sideloaded entries: %w", err)
	}
	return nil
}

// read returns the data of the entry at p, which the log says holds size
// bytes with checksum crc. An error means the file is lost or damaged
// (the caller reports it as ErrCorruptState).
func (s *sideloadStore) read(p logPosition, size uint64, crc uint32) ([]byte, error) {
	f, err := s.fs.Open(s.fs.PathJoin(s.dir, sideloadName(p)))
	if err != nil {
		return nil, fmt.Errorf("sideloaded entry %d (term %d): %w", p.Index, p.Term, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sideloaded entry %d (term %d): %w", p.Index, p.Term, err)
	}
	if uint64(st.Size()) != size {
		return nil, fmt.Errorf("sideloaded entry %d (term %d): its file holds %d bytes, the log says %d", p.Index, p.Term, st.Size(), size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("sideloaded entry %d (term %d) of %d bytes: %w", p.Index, p.Term, size, err)
	}
	if got := crc32.Checksum(data, castagnoli); got != crc {
		return nil, fmt.Errorf("sideloaded entry %d (term %d): its file's checksum is %08x, the log says %08x", p.Index, p.Term, got, crc)
	}
	return data, nil
}

// committed makes the round's files known once its batch is durable: the
// entries from first on replaced whatever the log held there, so the files
// of replaced entries are removed (unless a new entry has the same name:
// the same index and term, the same entry).
func (s *sideloadStore) committed(first uint64) {
	if s == nil {
		return
	}
	keep := s.files[:0]
	for _, p := range s.files {
		switch {
		case p.Index < first:
			keep = append(keep, p)
		case !slices.Contains(s.pending, p):
			s.remove(p)
		}
	}
	s.files = append(keep, s.pending...)
	s.pending = s.pending[:0]
	slices.SortFunc(s.files, comparePositions)
	s.files = slices.Compact(s.files)
}

// truncated removes the files of the entries through index.
func (s *sideloadStore) truncated(index uint64) {
	if s == nil {
		return
	}
	n := 0
	for n < len(s.files) && s.files[n].Index <= index {
		s.remove(s.files[n])
		n++
	}
	s.files = append(s.files[:0], s.files[n:]...)
}

// reset removes every file of the log a snapshot replaced, but not those
// the same round wrote for the entries after it.
func (s *sideloadStore) reset() {
	if s == nil {
		return
	}
	for _, p := range s.files {
		if !slices.Contains(s.pending, p) {
			s.remove(p)
		}
	}
	s.files = s.files[:0]
}

// destroy removes the group's directory.
func (s *sideloadStore) destroy() error {
	if s == nil {
		return nil
	}
	s.files, s.pending = nil, nil
	if err := s.fs.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("multiraft: remove sideloaded entries: %w", err)
	}
	return nil
}

// remove deletes one file. A failure leaves an orphan, which nothing
// reads (the log no longer names it) and open removes at the next start
// once the log is truncated past it.
func (s *sideloadStore) remove(p logPosition) {
	_ = s.fs.Remove(s.fs.PathJoin(s.dir, sideloadName(p)))
}

// The stored value of a sideloaded entry: sideloadedMark, then the data's
// length (uvarint) and CRC-32C (4 bytes, big-endian), then the entry's
// protobuf encoding without its data. A protobuf encoding never starts
// with a zero byte (field number 0 does not exist), so the mark tells the
// two kinds of value apart.
const sideloadedMark = 0x00

// sideloadedValueSize is the length of the stored value of e, sideloaded.
func sideloadedValueSize(e *raftpb.Entry) int {
	return 1 + varintLen(uint64(len(e.GetData()))) + 4 + entrySizeWithout(e, true)
}

// appendSideloadedValue appends the stored value of e, sideloaded with
// data of checksum crc.
func appendSideloadedValue(b []byte, e *raftpb.Entry, crc uint32) []byte {
	b = append(b, sideloadedMark)
	b = binary.AppendUvarint(b, uint64(len(e.GetData())))
	b = binary.BigEndian.AppendUint32(b, crc)
	return appendEntryWithout(b, e, true)
}

func varintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}

// sideloadRef is what a stored value says of a sideloaded entry's data.
type sideloadRef struct {
	size uint64
	crc  uint32
}

// decodeStoredEntry decodes a stored log value: the entry, and for a
// sideloaded one what its file holds; the entry's data is then nil until
// read from the file. An error says what is wrong with the value (the
// caller reports it as ErrCorruptState).
func decodeStoredEntry(v []byte) (e *raftpb.Entry, ref sideloadRef, sideloaded bool, err error) {
	e = &raftpb.Entry{}
	if len(v) > 0 && v[0] == sideloadedMark {
		size, n := binary.Uvarint(v[1:])
		if n <= 0 {
			return nil, ref, false, errors.New("a sideloaded entry's size is not a varint")
		}
		rest := v[1+n:]
		if len(rest) < 4 {
			return nil, ref, false, fmt.Errorf("a sideloaded entry's checksum is cut short (%d bytes)", len(rest))
		}
		ref = sideloadRef{size: size, crc: binary.BigEndian.Uint32(rest)}
		if err := unmarshalEntry(rest[4:], e); err != nil {
			return nil, ref, false, err
		}
		if e.Data != nil {
			return nil, ref, false, fmt.Errorf("sideloaded entry %d carries data in the log too", e.GetIndex())
		}
		return e, ref, true, nil
	}
	if err := unmarshalEntry(v, e); err != nil {
		return nil, ref, false, err
	}
	return e, ref, false, nil
}
