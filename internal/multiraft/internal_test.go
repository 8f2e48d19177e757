package multiraft

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/shardkit/shardkit/internal/storage"
)

// nopSM is a state machine with no data.
type nopSM struct{ restores int }

func (*nopSM) Apply(_ *pebble.Batch, ents []Entry) ([]any, error) { return make([]any, len(ents)), nil }
func (*nopSM) Snapshot(context.Context, pebble.Reader, io.Writer) error {
	return nil
}

func (s *nopSM) Restore(context.Context, *pebble.DB, io.Reader) error {
	s.restores++
	return nil
}

type nopTransport struct{}

func (nopTransport) Send([]OutboundMessage) {}
func (nopTransport) SendSnapshot(context.Context, NodeID, GroupID, *raftpb.Message, func(io.Writer) error) error {
	return nil
}

// One Ready can carry a snapshot and entries after it (MsgSnap and MsgApp
// stepped in one round), persisted in one batch with the restore marker. A
// crash before the restore must find those entries, and the hard state's
// commit above the snapshot, at the next open.
func TestInterruptedRestoreKeepsEntriesAfterSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	db, err := storage.Open("db", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const gid, snapIndex, last = GroupID(7), 50, 53
	if err := fs.MkdirAll("snap", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(fs.PathJoin("snap", "g7-spooled.snap"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// What the round writes for such a Ready (stageSnapshot, stageAppend,
	// stageHardState in one batch), and nothing after it.
	g := &group{id: gid, store: newLogStore(db, gid, 0, nil)}
	b := db.NewBatch()
	snap := &raftpb.Snapshot{
		Data: []byte("g7-spooled.snap"),
		Metadata: &raftpb.SnapshotMetadata{
			Index: new(uint64(snapIndex)), Term: new(uint64(6)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}},
		},
	}
	if _, err := g.stageSnapshot(b, snap); err != nil {
		t.Fatal(err)
	}
	var ents []*raftpb.Entry
	for i := uint64(snapIndex + 1); i <= last; i++ {
		ents = append(ents, &raftpb.Entry{Index: new(i), Term: new(uint64(6)), Type: raftpb.EntryType_EntryNormal.Enum()})
	}
	if err := g.store.stageAppend(b, ents); err != nil {
		t.Fatal(err)
	}
	hs := &raftpb.HardState{Term: new(uint64(6)), Vote: new(uint64(2)), Commit: new(uint64(last))}
	if err := g.store.stageHardState(b, hs); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()

	h, err := NewHost(Config{
		NodeID: 1, DB: db, FS: fs, SnapshotDir: "snap", Transport: nopTransport{},
		ManualProcessing: true, ManualTicks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	sm := &nopSM{}
	var G *Group
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("reopening after the interrupted restore panicked: %v", r)
			}
		}()
		G, err = h.OpenGroup(GroupConfig{ID: gid, StateMachine: sm})
	}()
	if err != nil {
		t.Fatal(err)
	}
	if sm.restores != 1 {
		t.Fatalf("restores = %d, want 1", sm.restores)
	}
	h.ProcessReady()
	st := G.Status()
	if st.FirstIndex != snapIndex+1 || st.LastIndex != last {
		t.Fatalf("log = [%d, %d], want [%d, %d]", st.FirstIndex, st.LastIndex, snapIndex+1, last)
	}
	if st.Applied != last {
		t.Fatalf("applied = %d, want %d (committed entries after the snapshot)", st.Applied, last)
	}
}

// fatalSM fails like Pebble on a full disk inside a state machine's own write.
type fatalSM struct{ nopSM }

func (*fatalSM) Apply(*pebble.Batch, []Entry) ([]any, error) {
	panic(&storage.FatalError{Msg: "disk full", Err: syscall.ENOSPC})
}

func newTestHost(t *testing.T, onFatal func(error)) *Host {
	t.Helper()
	db, h := startTestHost(t, vfs.NewMem(), func(c *Config) { c.OnFatal = onFatal })
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(h.Stop)
	return h
}

// startTestHost opens the database on fs and starts a host of node 1 on it
// that the test steps by hand (tweak changes its Config); the caller stops
// the host and closes the database.
func startTestHost(t *testing.T, fs vfs.FS, tweak func(*Config)) (*pebble.DB, *Host) {
	t.Helper()
	db, err := storage.Open("db", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		NodeID: 1, DB: db, FS: fs, SnapshotDir: "snap", Transport: nopTransport{},
		ManualProcessing: true, ManualTicks: true,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	return db, h
}

// Pebble's fatal failure in any write of a round, here a state machine's,
// stops the host with an error instead of panicking through the worker.
func TestPebbleFatalInRoundStopsHost(t *testing.T) {
	fatal := make(chan error, 1)
	h := newTestHost(t, func(err error) { fatal <- err })
	G, err := h.OpenGroup(GroupConfig{ID: 1, Members: []NodeID{1}, StateMachine: &fatalSM{}})
	if err != nil {
		t.Fatal(err)
	}
	h.ProcessReady()
	res := make(chan error, 1)
	go func() {
		_, err := G.Propose(context.Background(), []byte("x"))
		res <- err
	}()
	for {
		h.ProcessReady()
		select {
		case err := <-res:
			if !errors.Is(err, ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("proposal ended with %v, want ErrStorage wrapping ENOSPC", err)
			}
			if err := <-fatal; !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("OnFatal got %v", err)
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// Calls on a removed group, or on a host stopped by a fatal failure, end
// with an error instead of waiting forever (a ReadIndex has no deadline).
func TestCallsOnStoppedGroupsFail(t *testing.T) {
	h := newTestHost(t, nil)
	// Node 2 and 3 never answer: no leader, so a read waits in raft.
	waiting, err := h.OpenGroup(GroupConfig{ID: 1, Members: []NodeID{1, 2, 3}, StateMachine: &nopSM{}})
	if err != nil {
		t.Fatal(err)
	}
	removed, err := h.OpenGroup(GroupConfig{ID: 2, Members: []NodeID{1}, StateMachine: &nopSM{}})
	if err != nil {
		t.Fatal(err)
	}
	h.ProcessReady()
	if err := h.RemoveGroup(2, false); err != nil {
		t.Fatal(err)
	}
	if err := removed.ReadIndex(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("ReadIndex on a removed group = %v, want ErrStopped", err)
	}
	if _, err := removed.Propose(context.Background(), []byte("x")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Propose on a removed group = %v, want ErrStopped", err)
	}

	read := make(chan error, 1)
	go func() { read <- waiting.ReadIndex(context.Background()) }()
	waitRead := time.Now().Add(5 * time.Second)
	for {
		h.ProcessReady()
		waiting.g.mu.Lock()
		n := len(waiting.g.pendingReads)
		waiting.g.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(waitRead) {
			t.Fatal("read never reached raft")
		}
		time.Sleep(time.Millisecond)
	}
	h.fatal(errors.New("injected"))
	select {
	case err := <-read:
		if !errors.Is(err, ErrStorage) {
			t.Fatalf("pending ReadIndex after a fatal failure = %v, want ErrStorage", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending ReadIndex still waiting after a fatal failure")
	}
}
