package multiraft

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/storage"
)

// sideloadFixture is one group's log store over an in-memory file system,
// its entries of 100 bytes or more sideloaded, with no entry cache: every
// read goes to the database and the files.
type sideloadFixture struct {
	t  *testing.T
	fs vfs.FS
	db *pebble.DB
	s  *logStore
}

const fixtureGroup = GroupID(9)

func newSideloadFixture(t *testing.T) *sideloadFixture {
	t.Helper()
	fs := vfs.NewMem()
	db, err := storage.Open("db", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	f := &sideloadFixture{t: t, fs: fs, db: db}
	f.reopen()
	return f
}

// reopen loads the store again, as a restart does.
func (f *sideloadFixture) reopen() {
	f.s = newLogStore(f.db, fixtureGroup, 0, newSideloadStore(f.fs, "side", fixtureGroup, 100))
	if _, err := f.s.load(); err != nil {
		f.t.Fatal(err)
	}
}

func fixtureEntry(index, term uint64, size int) *raftpb.Entry {
	data := bytes.Repeat([]byte{byte(index), byte(term)}, size/2)
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: new(raftpb.EntryType_EntryNormal), Data: data}
}

// append writes entries as a round does: staged, committed, then served.
func (f *sideloadFixture) append(ents ...*raftpb.Entry) {
	f.t.Helper()
	b := f.db.NewBatch()
	defer b.Close()
	if err := f.s.stageAppend(b, ents); err != nil {
		f.t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		f.t.Fatal(err)
	}
	f.s.commitAppend(ents)
}

func (f *sideloadFixture) truncate(index, term uint64) {
	f.t.Helper()
	b := f.db.NewBatch()
	defer b.Close()
	pos := logPosition{Index: index, Term: term}
	if err := f.s.stageTruncate(b, pos); err != nil {
		f.t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		f.t.Fatal(err)
	}
	f.s.commitTruncate(pos)
}

// files lists the group's sideloaded files.
func (f *sideloadFixture) files() []string {
	f.t.Helper()
	names, err := f.fs.List(f.fs.PathJoin("side", "9"))
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// expect reads entries [lo, hi) back and compares them with want.
func (f *sideloadFixture) expect(lo, hi uint64, want ...*raftpb.Entry) {
	f.t.Helper()
	got, err := f.s.Entries(lo, hi, 1<<30)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(got) != len(want) {
		f.t.Fatalf("entries [%d, %d): got %d, want %d", lo, hi, len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			f.t.Fatalf("entry %d: got %v, want %v", want[i].GetIndex(), got[i], want[i])
		}
	}
}

// Large entries are stored as files and read back whole, from the files,
// after a restart too; small ones stay in the database. Truncation, a
// replaced suffix and a snapshot remove the files of the entries they
// remove, and a restart removes the files a failed round left.
func TestSideloadedEntriesAreReadBackAndRemovedWithTheirEntries(t *testing.T) {
	f := newSideloadFixture(t)
	ents := []*raftpb.Entry{fixtureEntry(1, 1, 10), fixtureEntry(2, 1, 300), fixtureEntry(3, 1, 300), fixtureEntry(4, 1, 40), fixtureEntry(5, 1, 200)}
	f.append(ents...)
	if got, want := f.files(), []string{"i2.t1", "i3.t1", "i5.t1"}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	// The database holds the large entries' headers only.
	v, _, err := f.s.get(logKey(fixtureGroup, 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 40 {
		t.Fatalf("entry 3 takes %d bytes in the database, not its header's", len(v))
	}
	f.expect(1, 6, ents...)
	if term, err := f.s.Term(3); err != nil || term != 1 {
		t.Fatalf("Term(3) = %d, %v", term, err)
	}
	f.reopen()
	f.expect(1, 6, ents...)

	// A new leader's entries replace 3 through 5 (4 and 5 at a new term;
	// 3 at the same term, the same entry).
	repl := []*raftpb.Entry{fixtureEntry(3, 1, 300), fixtureEntry(4, 2, 500)}
	f.append(repl...)
	if got, want := f.files(), []string{"i2.t1", "i3.t1", "i4.t2"}; !slices.Equal(got, want) {
		t.Fatalf("after the replaced suffix: files %v, want %v", got, want)
	}
	f.expect(1, 5, ents[0], ents[1], repl[0], repl[1])

	f.truncate(3, 1)
	if got, want := f.files(), []string{"i4.t2"}; !slices.Equal(got, want) {
		t.Fatalf("after truncating through 3: files %v, want %v", got, want)
	}
	f.expect(4, 5, repl[1])

	// A round that wrote a file and failed before its batch committed
	// leaves it behind; the next open removes it.
	b := f.db.NewBatch()
	if err := f.s.stageAppend(b, []*raftpb.Entry{fixtureEntry(5, 2, 400)}); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if got, want := f.files(), []string{"i4.t2", "i5.t2"}; !slices.Equal(got, want) {
		t.Fatalf("after the failed round: files %v, want %v", got, want)
	}
	f.reopen()
	if got, want := f.files(), []string{"i4.t2"}; !slices.Equal(got, want) {
		t.Fatalf("after the open: files %v, want %v", got, want)
	}

	// A snapshot replaces the log, but not the entries after it that the
	// same round appends.
	f.append(fixtureEntry(5, 2, 400), fixtureEntry(6, 2, 400))
	after := fixtureEntry(7, 3, 400)
	b = f.db.NewBatch()
	if err := f.s.stageAppend(b, []*raftpb.Entry{after}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.s.resetToSnapshot(logPosition{Index: 6, Term: 2})
	f.s.commitAppend([]*raftpb.Entry{after})
	if got, want := f.files(), []string{"i7.t3"}; !slices.Equal(got, want) {
		t.Fatalf("after the snapshot: files %v, want %v", got, want)
	}
	f.expect(7, 8, after)

	if err := f.s.side.destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.Stat(f.fs.PathJoin("side", "9")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the group's directory after destroy: %v", err)
	}
}

// A sideloaded entry whose file is lost, cut short, grown or changed is
// corrupt state, named as such.
func TestADamagedSideloadedEntryIsCorruptState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(fs vfs.FS, path string) error
		want   string
	}{
		{"lost", func(fs vfs.FS, path string) error { return fs.Remove(path) }, "file does not exist"},
		{"cut short", func(fs vfs.FS, path string) error {
			return rewrite(fs, path, func(b []byte) []byte { return b[:len(b)-1] })
		}, "its file holds 299 bytes, the log says 300"},
		{"grown", func(fs vfs.FS, path string) error {
			return rewrite(fs, path, func(b []byte) []byte { return append(b, 0) })
		}, "its file holds 301 bytes, the log says 300"},
		{"changed", func(fs vfs.FS, path string) error {
			return rewrite(fs, path, func(b []byte) []byte { b[7] ^= 1; return b })
		}, "its file's checksum is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSideloadFixture(t)
			f.append(fixtureEntry(1, 1, 300))
			if err := tc.damage(f.fs, f.fs.PathJoin("side", "9", "i1.t1")); err != nil {
				t.Fatal(err)
			}
			_, err := f.s.Entries(1, 2, 1<<30)
			if !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), tc.want) ||
				!strings.HasPrefix(err.Error(), "multiraft: corrupt stored raft state: group 9: sideloaded entry 1 (term 1)") {
				t.Fatalf("got %v, want ErrCorruptState naming group 9's entry 1 and saying %q", err, tc.want)
			}
			// Its term is in the log, not the file.
			if term, err := f.s.Term(1); err != nil || term != 1 {
				t.Fatalf("Term(1) = %d, %v", term, err)
			}
		})
	}
}

func rewrite(fs vfs.FS, path string, change func([]byte) []byte) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return err
	}
	_ = f.Close()
	w, err := fs.Create(path, "test")
	if err != nil {
		return err
	}
	if _, err := w.Write(change(b)); err != nil {
		return err
	}
	return w.Close()
}

// A stored value decodes to what was stored, sideloaded or not, and any
// other bytes decode to an entry or an error, never a panic.
func FuzzTheStoredEntryDecodes(f *testing.F) {
	f.Add(uint8(15), int32(0), uint64(3), uint64(17), []byte("proposal"), []byte(nil), false, []byte(nil))
	f.Add(uint8(15), int32(0), uint64(3), uint64(17), []byte("proposal"), []byte(nil), true, []byte(nil))
	f.Add(uint8(31), int32(1), uint64(5), uint64(6), []byte{0, 1, 2}, []byte("later"), true, []byte(nil))
	f.Add(uint8(0), int32(0), uint64(0), uint64(0), []byte(nil), []byte(nil), false, []byte{0, 0xff, 0xff})
	f.Add(uint8(0), int32(0), uint64(0), uint64(0), []byte(nil), []byte(nil), false, []byte{0, 3, 1, 2, 3, 4, 0x22, 1, 0})
	f.Fuzz(func(t *testing.T, set uint8, typ int32, term, index uint64, data, unknown []byte, sideload bool, raw []byte) {
		if len(raw) > 0 {
			e, ref, ok, err := decodeStoredEntry(raw)
			if err != nil {
				return
			}
			if ok && e.Data != nil {
				t.Fatalf("%x: sideloaded (%+v) with data in the log", raw, ref)
			}
			return
		}
		e := fuzzEntry(set, typ, term, index, data, unknown)
		var v []byte
		if sideload {
			v = appendSideloadedValue(nil, e, 0xC0FFEE)
			if n := sideloadedValueSize(e); n != len(v) {
				t.Fatalf("entry %v: size %d, stored value %d bytes", e, n, len(v))
			}
		} else {
			v = appendEntry(nil, e)
		}
		got, ref, ok, err := decodeStoredEntry(v)
		if err != nil {
			t.Fatal(err)
		}
		if ok != sideload {
			t.Fatalf("entry %v stored as %x: sideloaded %v, want %v", e, v, ok, sideload)
		}
		if sideload {
			if ref.size != uint64(len(e.GetData())) || ref.crc != 0xC0FFEE {
				t.Fatalf("entry %v: ref %+v", e, ref)
			}
			got.Data = e.Data
		}
		if !proto.Equal(got, e) {
			t.Fatalf("stored %v, decoded %v", e, got)
		}
	})
}

// Raft panics with its Storage's errors; a read of a damaged sideloaded
// entry stops the host as corrupt state (recoverRound), not the process.
func TestADamagedEntryReadByRaftIsRecoveredAsCorruptState(t *testing.T) {
	f := newSideloadFixture(t)
	f.append(fixtureEntry(1, 1, 300))
	if err := f.fs.Remove(f.fs.PathJoin("side", "9", "i1.t1")); err != nil {
		t.Fatal(err)
	}
	_, readErr := f.s.Entries(1, 2, 1<<30)
	err := func() (err error) {
		defer recoverRound(&err)
		panic(readErr) // as raft's raftLog.slice does
	}()
	if !errors.Is(err, readErr) || err.Error() != readErr.Error() || !IsCorrupt(err) {
		t.Fatalf("recovered %v, want the read's error %v", err, readErr)
	}
}

// Entries reads a sideloaded entry's file only when the entry fits in the
// size asked for: a follower catching up is sent entries of about 1 MiB
// one a message, and each call read the next entry's file too, to drop it.
func TestEntriesReadsNoFileItLeavesOut(t *testing.T) {
	f := newSideloadFixture(t)
	first, second := fixtureEntry(1, 1, 300), fixtureEntry(2, 1, 300)
	f.append(first, second)
	// Were entry 2's file read, its loss would be an error.
	if err := f.fs.Remove(f.fs.PathJoin("side", "9", "i2.t1")); err != nil {
		t.Fatal(err)
	}
	got, err := f.s.Entries(1, 3, 400)
	if err != nil || len(got) != 1 || !proto.Equal(got[0], first) {
		t.Fatalf("entries [1, 3) within 400 bytes: %v, %v; want entry 1 alone", got, err)
	}
}
