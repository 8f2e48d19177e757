package multiraft

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots are made on demand and streamed: the leader reads its state
// machine's data from a Pebble snapshot and the transport carries it in
// bounded chunks; the follower spools it to a file (fsynced) before handing
// the MsgSnap to raft with the file's name as the snapshot's data. When
// raft accepts it, the round persists a restore marker with the new log
// position, restores the state machine from the file and then records the
// applied state and removes the marker; a crash in between finds the
// marker at the next open and restores again.

type snapKey struct {
	group GroupID
	to    NodeID
}

type snapshotSender struct {
	h        *Host
	sem      chan struct{}
	mu       sync.Mutex
	inflight map[snapKey]bool
	wg       sync.WaitGroup
}

func newSnapshotSender(h *Host, n int) *snapshotSender {
	return &snapshotSender{h: h, sem: make(chan struct{}, n), inflight: make(map[snapKey]bool)}
}

func (s *snapshotSender) wait() { s.wg.Wait() }

// send streams a snapshot for m in the background and reports the outcome
// to raft. A second MsgSnap for the same follower while one is in flight is
// dropped (raft sends another after the report if it still needs one).
func (s *snapshotSender) send(g *group, m *raftpb.Message) {
	key := snapKey{group: g.id, to: NodeID(m.GetTo())}
	s.mu.Lock()
	if s.inflight[key] || s.h.stopped.Load() {
		s.mu.Unlock()
		return
	}
	s.inflight[key] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, key)
			s.mu.Unlock()
		}()
		select {
		case s.sem <- struct{}{}:
		case <-s.h.ctx.Done():
			return
		}
		err := s.stream(g, m)
		<-s.sem
		status := raft.SnapshotFinish
		if err != nil {
			status = raft.SnapshotFailure
			g.log.Warn("snapshot not delivered", "to", m.GetTo(), "err", err)
		}
		g.inMu.Lock()
		g.snapRep = append(g.snapRep, snapReport{to: key.to, status: status})
		g.inMu.Unlock()
		s.h.sched.enqueue(g, flagInput)
	}()
}

func (s *snapshotSender) stream(g *group, m *raftpb.Message) error {
	view := s.h.db.NewSnapshot()
	defer view.Close()
	v, closer, err := view.Get(groupKey(g.id, suffixApplied))
	if err != nil {
		return fmt.Errorf("read applied state: %w", err)
	}
	as, err := decodeApplied(v)
	_ = closer.Close()
	if err != nil {
		return err
	}
	msg := proto.CloneOf(m)
	msg.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: new(as.Index), Term: new(as.Term), ConfState: as.ConfState,
	}}
	g.log.Info("sending snapshot", "to", m.GetTo(), "index", as.Index, "term", as.Term)
	return s.h.cfg.Transport.SendSnapshot(s.h.ctx, NodeID(m.GetTo()), g.id, msg, func(w io.Writer) error {
		return g.sm.Snapshot(s.h.ctx, view, w)
	})
}

// HandleRaftSnapshot implements Handler: it spools the snapshot to a file
// and hands its MsgSnap to the group.
func (h *Host) HandleRaftSnapshot(ctx context.Context, group GroupID, msg *raftpb.Message, body io.Reader) error {
	g := h.group(group)
	if g == nil {
		return fmt.Errorf("%w: group %d", ErrGroupNotFound, group)
	}
	if msg.GetType() != raftpb.MessageType_MsgSnap || msg.GetTo() != uint64(h.cfg.NodeID) {
		return fmt.Errorf("multiraft: snapshot stream carries %v to node %d, this is node %d", msg.GetType(), msg.GetTo(), h.cfg.NodeID)
	}
	meta := msg.GetSnapshot().GetMetadata()
	if meta.GetIndex() == 0 {
		return errors.New("multiraft: snapshot without metadata")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("g%d-i%d-t%d-%s.snap", group, meta.GetIndex(), meta.GetTerm(), hex.EncodeToString(rnd[:]))
	if err := h.spool(ctx, name, body); err != nil {
		_ = h.cfg.FS.Remove(h.cfg.FS.PathJoin(h.cfg.SnapshotDir, name))
		return err
	}
	msg = proto.CloneOf(msg)
	msg.Snapshot.Data = []byte(name)
	g.inMu.Lock()
	g.inbox = append(g.inbox, msg) // never dropped: it carries a whole transfer
	g.inMu.Unlock()
	h.sched.enqueue(g, flagInput)
	return nil
}

func (h *Host) spool(ctx context.Context, name string, body io.Reader) error {
	fs := h.cfg.FS
	f, err := fs.Create(fs.PathJoin(h.cfg.SnapshotDir, name), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("multiraft: spool snapshot: %w", err)
	}
	w := bufio.NewWriterSize(f, 256<<10)
	_, err = io.Copy(w, ctxReader{ctx: ctx, r: body})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(fs, h.cfg.SnapshotDir)
	}
	if err != nil {
		return fmt.Errorf("multiraft: spool snapshot %s: %w", name, err)
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// stageSnapshot writes into b what makes an accepted snapshot durable: the
// restore marker, the new log position, and the removal of the old log.
func (g *group) stageSnapshot(b *pebble.Batch, s *raftpb.Snapshot) (restoreMarker, error) {
	meta := s.GetMetadata()
	m := restoreMarker{
		appliedState: appliedState{
			logPosition: logPosition{Index: meta.GetIndex(), Term: meta.GetTerm()},
			ConfState:   proto.CloneOf(meta.GetConfState()),
		},
		File: string(s.GetData()),
	}
	if m.File == "" || strings.ContainsAny(m.File, "/\\") {
		return m, fmt.Errorf("%w: group %d: snapshot without a spool file", ErrCorruptState, g.id)
	}
	v, err := encodeMarker(m)
	if err != nil {
		return m, err
	}
	if err := b.Set(groupKey(g.id, suffixRestoring), v, nil); err != nil {
		return m, err
	}
	if err := b.DeleteRange(logKey(g.id, 0), logSpanEnd(g.id), nil); err != nil {
		return m, err
	}
	return m, b.Set(groupKey(g.id, suffixTruncated), encodePosition(m.logPosition), nil)
}

// restore loads the state machine from a durable snapshot and records it
// as applied.
func (g *group) restore(m restoreMarker) error {
	fs := g.host.cfg.FS
	path := fs.PathJoin(g.host.cfg.SnapshotDir, m.File)
	f, err := fs.Open(path)
	if err != nil {
		return fmt.Errorf("group %d: open snapshot %s: %w", g.id, path, err)
	}
	defer f.Close()
	g.log.Info("restoring snapshot", "index", m.Index, "term", m.Term)
	if err := g.sm.Restore(g.host.ctx, g.host.db, bufio.NewReaderSize(f, 256<<10)); err != nil {
		return fmt.Errorf("group %d: restore snapshot at %d: %w", g.id, m.Index, err)
	}
	b := g.host.db.NewBatch()
	defer b.Close()
	if err := g.store.stageApplied(b, m.appliedState); err != nil {
		return err
	}
	if err := b.Delete(groupKey(g.id, suffixRestoring), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("group %d: record restored snapshot: %w", g.id, err)
	}
	g.store.applied = m.appliedState
	g.restored++
	if err := fs.Remove(path); err != nil {
		g.log.Warn("cannot remove restored snapshot file", "file", path, "err", err)
	}
	return nil
}

// finishInterruptedRestore completes a restore that a crash interrupted.
func (g *group) finishInterruptedRestore() error {
	v, ok, err := g.store.get(groupKey(g.id, suffixRestoring))
	if err != nil || !ok {
		return err
	}
	m, err := decodeMarker(v)
	if err != nil {
		return fmt.Errorf("group %d restore marker: %w", g.id, err)
	}
	// The file was synced before the marker was written, and is removed
	// only after the marker's deletion is synced: a marker without its file
	// means the database lost that deletion (its log was cut).
	path := g.host.cfg.FS.PathJoin(g.host.cfg.SnapshotDir, m.File)
	if _, err := g.host.cfg.FS.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("%w: group %d: the snapshot restore at index %d, unfinished by the database's account, needs %s, which is gone",
			ErrCorruptState, g.id, m.Index, path)
	}
	g.log.Warn("finishing a snapshot restore interrupted by a crash", "index", m.Index)
	// The log position is already right: the batch that wrote the marker
	// also wrote the truncated position and any entries raft appended after
	// the snapshot in the same Ready, and load read them.
	return g.restore(m)
}

// removeStaleSpoolFiles deletes the group's spool files left by an earlier
// run (snapshots received but never restored). Called at open, after any
// interrupted restore has finished.
func (g *group) removeStaleSpoolFiles() {
	fs := g.host.cfg.FS
	names, err := fs.List(g.host.cfg.SnapshotDir)
	if err != nil {
		g.log.Warn("cannot list snapshot dir", "err", err)
		return
	}
	prefix := fmt.Sprintf("g%d-", g.id)
	for _, name := range names {
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".snap") {
			if err := fs.Remove(fs.PathJoin(g.host.cfg.SnapshotDir, name)); err != nil {
				g.log.Warn("cannot remove stale snapshot file", "file", name, "err", err)
			}
		}
	}
}

// deleteSpooled removes spool files that raft has seen and that are not
// (or no longer) needed for a restore.
func (g *group) deleteSpooled() {
	for _, name := range g.spooled {
		if name == "" || strings.ContainsAny(name, "/\\") {
			continue
		}
		path := g.host.cfg.FS.PathJoin(g.host.cfg.SnapshotDir, name)
		if err := g.host.cfg.FS.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			g.log.Debug("cannot remove snapshot spool file", "file", path, "err", err)
		}
	}
	g.spooled = g.spooled[:0]
}
