package multiraft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/storage"
)

// Config configures a Host. Zero values take the defaults named below.
type Config struct {
	// NodeID is this process's Raft id in every group. Required, non-zero.
	NodeID NodeID
	// DB is the instance's Pebble database. Required. The host never closes it.
	DB *pebble.DB
	// FS and SnapshotDir say where inbound snapshots are spooled before
	// they are restored. FS defaults to the OS file system; SnapshotDir is
	// required.
	FS          vfs.FS
	SnapshotDir string
	// SideloadDir is where the data of large log entries is kept, a file
	// an entry, instead of in the database (doc.go, "Sideloaded entries"):
	// those of SideloadMinBytes or more (default 256 KiB). Empty: every
	// entry is stored in the database. A host must keep the directory it
	// had: a log that sideloaded entries cannot be read without it.
	SideloadDir      string
	SideloadMinBytes int
	// Transport sends this host's messages. Required (may be set with
	// SetTransport after NewHost, before Start).
	Transport Transport
	Logger    *slog.Logger

	// TickInterval is the duration of one Raft tick (default 100ms).
	// ManualTicks turns the ticker off: the owner calls Tick.
	TickInterval time.Duration
	ManualTicks  bool
	// ElectionTicks (default 10) and HeartbeatTicks (default 1).
	ElectionTicks  int
	HeartbeatTicks int

	// LeaseReads lets a leader answer Group.ReadIndex from a lease instead
	// of a heartbeat round per read index (the package documentation,
	// "Lease reads"): after a quorum confirmed its leadership at time T it
	// serves reads alone until T + (ElectionTicks-2) ticks - 10%, while
	// every member refuses votes for ElectionTicks-1 ticks after it last
	// heard from a leader (whatever this setting). It assumes that the
	// members' clocks run at rates within 10% of each other and that all
	// hosts of a group have the same ElectionTicks and TickInterval. Needs
	// ElectionTicks >= 4; fewer leaves it off.
	LeaseReads bool
	// Clock is the lease's clock: a monotonic reading that goes on while
	// the machine is suspended (default: CLOCK_BOOTTIME on Linux). Tests
	// that tick by hand give one that advances TickInterval a tick.
	Clock func() time.Duration

	// Workers is the size of the worker pool (default 2). ManualProcessing
	// starts no workers: the owner calls ProcessReady (tests that step hosts themselves).
	Workers          int
	ManualProcessing bool
	// MaxGroupsPerRound bounds how many groups one worker handles in one
	// round, sharing one fsync (default 64).
	MaxGroupsPerRound int

	// DisableProposalBatching makes a leader append the proposals of every
	// round at once, instead of holding them back while the last batch it
	// appended is not yet committed ("Proposal batching" in the package
	// documentation).
	DisableProposalBatching bool

	// MaxSizePerMsg (default 1 MiB), MaxInflightMsgs (default 256) and
	// MaxUncommittedBytes (default 64 MiB) are Raft's flow control.
	MaxSizePerMsg       uint64
	MaxInflightMsgs     int
	MaxUncommittedBytes uint64
	// EntryCacheBytes bounds each group's cache of recent entries (default 4 MiB).
	EntryCacheBytes int
	// InboxSize bounds each group's queue of inbound messages (default 4096);
	// messages beyond it are dropped (Raft retransmits).
	InboxSize int

	// LogCompactionThreshold: when the log holds more than this many applied
	// entries, it is truncated, keeping LogCompactionKeep of them (defaults
	// 10000 and 1000). Followers behind the truncation catch up by snapshot.
	LogCompactionThreshold uint64
	LogCompactionKeep      uint64
	// LogCompactionBytes: when the applied entries in a leader's log hold
	// more than this many bytes, it is truncated too, keeping about
	// LogCompactionKeepBytes of them (defaults 8 MiB and 2 MiB) and what a
	// follower lacks, up to 8 times LogCompactionBytes; a follower's, past
	// 8 times LogCompactionBytes, keeping about LogCompactionBytes. So a log
	// of large entries (a bucket's copy, big writes) stays bounded in bytes,
	// not only in entries (doc.go, "Log compaction").
	LogCompactionBytes     uint64
	LogCompactionKeepBytes uint64

	// MaxConcurrentSnapshots bounds outbound snapshot streams (default 2).
	MaxConcurrentSnapshots int

	// OnFatal is called once if the host stops because it cannot persist
	// its state (for example, a full disk): the owner should exit; nothing
	// unpersisted was acknowledged, and a restart recovers. It is also
	// called when the stored state turns out corrupt or lost (IsCorrupt):
	// then a restart finds the same state and does not help.
	OnFatal func(error)

	// Failpoints are test hooks at the durability boundaries. They do
	// nothing unless the binary is built with the "failpoints" tag.
	Failpoints *Failpoints

	// Observer, when set, is told what each round's persist and each
	// group's apply took (RoundObserver). It is called on the round's
	// worker, so it must be quick (a histogram's Observe).
	Observer RoundObserver
}

// RoundObserver is told what the durable steps of a round cost: a slow
// replicated write waits either for the disk (the persist) or for the
// state machines (the apply), and these tell which.
type RoundObserver interface {
	// ObservePersist: step 4, the one Pebble commit of a round's entries
	// and hard states (synced: with an fsync), of bytes bytes.
	ObservePersist(d time.Duration, synced bool, bytes int)
	// ObserveApply: a group's committed entries applied in one go (step 3
	// or 7).
	ObserveApply(g GroupID, d time.Duration)
}

func (c *Config) setDefaults() error {
	if c.NodeID == 0 {
		return errors.New("multiraft: Config.NodeID must be non-zero")
	}
	if c.DB == nil {
		return errors.New("multiraft: Config.DB is required")
	}
	if c.SnapshotDir == "" {
		return errors.New("multiraft: Config.SnapshotDir is required")
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.TickInterval, 100*time.Millisecond)
	setDefault(&c.ElectionTicks, 10)
	setDefault(&c.HeartbeatTicks, 1)
	setDefault(&c.Workers, 2)
	setDefault(&c.MaxGroupsPerRound, 64)
	setDefault(&c.MaxSizePerMsg, 1<<20)
	setDefault(&c.MaxInflightMsgs, 256)
	setDefault(&c.MaxUncommittedBytes, 64<<20)
	setDefault(&c.EntryCacheBytes, 4<<20)
	setDefault(&c.SideloadMinBytes, 256<<10)
	setDefault(&c.InboxSize, 4096)
	setDefault(&c.LogCompactionThreshold, 10000)
	setDefault(&c.LogCompactionKeep, 1000)
	setDefault(&c.LogCompactionBytes, 8<<20)
	setDefault(&c.LogCompactionKeepBytes, 2<<20)
	setDefault(&c.MaxConcurrentSnapshots, 2)
	if c.LogCompactionKeep >= c.LogCompactionThreshold {
		return fmt.Errorf("multiraft: LogCompactionKeep (%d) must be below LogCompactionThreshold (%d)",
			c.LogCompactionKeep, c.LogCompactionThreshold)
	}
	if c.LogCompactionKeepBytes >= c.LogCompactionBytes {
		return fmt.Errorf("multiraft: LogCompactionKeepBytes (%d) must be below LogCompactionBytes (%d)",
			c.LogCompactionKeepBytes, c.LogCompactionBytes)
	}
	if c.Failpoints == nil {
		c.Failpoints = &Failpoints{}
	}
	if c.Clock == nil {
		c.Clock = leaseClock
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Host runs the Raft groups of one process over one Pebble database and
// one transport. See the package documentation for the contract it keeps.
type Host struct {
	cfg   Config
	db    *pebble.DB
	log   *slog.Logger
	sched *scheduler

	mu     sync.RWMutex
	groups map[GroupID]*group

	nextID atomic.Uint64 // proposal and read ids

	leaseDur time.Duration        // cfg.leaseDuration(): 0 when lease reads are off
	voteGap  time.Duration        // cfg.voteGap()
	now      func() time.Duration // cfg.Clock

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started atomic.Bool
	stopped atomic.Bool

	fatalOnce sync.Once
	fatalErr  atomic.Pointer[error]

	snaps *snapshotSender
}

// NewHost makes a host. It opens no group and starts nothing.
func NewHost(cfg Config) (*Host, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.FS.MkdirAll(cfg.SnapshotDir, 0o755); err != nil {
		return nil, fmt.Errorf("multiraft: snapshot dir %s: %w", cfg.SnapshotDir, err)
	}
	// The directory entry itself must be durable, or a crash could take the
	// spooled snapshots with it.
	if err := syncDir(cfg.FS, cfg.FS.PathDir(cfg.SnapshotDir)); err != nil {
		return nil, fmt.Errorf("multiraft: sync parent of snapshot dir %s: %w", cfg.SnapshotDir, err)
	}
	if cfg.SideloadDir != "" {
		// Durable as the snapshot directory, or a crash could take the
		// sideloaded entries with it; each group's directory is made and
		// synced in it at its first sideloaded entry.
		if err := cfg.FS.MkdirAll(cfg.SideloadDir, 0o755); err != nil {
			return nil, fmt.Errorf("multiraft: sideload dir %s: %w", cfg.SideloadDir, err)
		}
		if err := syncDir(cfg.FS, cfg.FS.PathDir(cfg.SideloadDir)); err != nil {
			return nil, fmt.Errorf("multiraft: sync parent of sideload dir %s: %w", cfg.SideloadDir, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{
		cfg:    cfg,
		db:     cfg.DB,
		log:    cfg.Logger.With("node", uint64(cfg.NodeID)),
		sched:  newScheduler(cfg.MaxGroupsPerRound),
		groups: make(map[GroupID]*group),
		ctx:    ctx,
		cancel: cancel,
		now:    cfg.Clock,
	}
	h.leaseDur, h.voteGap = cfg.leaseDuration(), cfg.voteGap()
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	h.nextID.Store(binary.BigEndian.Uint64(seed[:]) >> 1)
	h.snaps = newSnapshotSender(h, cfg.MaxConcurrentSnapshots)
	return h, nil
}

// SetTransport sets the transport; call it before Start.
func (h *Host) SetTransport(t Transport) { h.cfg.Transport = t }

// NodeID returns this host's Raft id.
func (h *Host) NodeID() NodeID { return h.cfg.NodeID }

// Start starts the workers and the ticker (unless configured manual).
func (h *Host) Start() error {
	if h.cfg.Transport == nil {
		return errors.New("multiraft: no transport set")
	}
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("multiraft: host already started")
	}
	if !h.cfg.ManualProcessing {
		for range h.cfg.Workers {
			h.wg.Go(h.worker)
		}
	}
	if !h.cfg.ManualTicks {
		h.wg.Go(h.ticker)
	}
	return nil
}

// Stop stops the workers, the ticker and the snapshot streams, and fails
// every waiting proposal with ErrStopped. It does not close the database.
func (h *Host) Stop() {
	if !h.stopped.CompareAndSwap(false, true) {
		return
	}
	h.cancel()
	h.sched.stop()
	h.wg.Wait()
	h.snaps.wait()
	h.mu.Lock()
	gs := make([]*group, 0, len(h.groups))
	for _, g := range h.groups {
		if g != nil {
			gs = append(gs, g)
		}
	}
	h.mu.Unlock()
	for _, g := range gs {
		g.stop(ErrStopped)
	}
}

func (h *Host) worker() {
	for {
		gs, fs := h.sched.take(true)
		if gs == nil {
			return
		}
		h.processRound(gs, fs)
	}
}

func (h *Host) ticker() {
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.Tick()
		}
	}
}

// Tick gives every group one Raft tick. The ticker calls it; with
// ManualTicks the owner does.
func (h *Host) Tick() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, g := range h.groups {
		if g != nil {
			h.sched.enqueue(g, flagTick)
		}
	}
}

// ProcessReady runs scheduler rounds on the calling goroutine until no group
// has work left, and reports whether any group was processed. It is for
// ManualProcessing hosts (tests that step hosts themselves).
func (h *Host) ProcessReady() bool {
	any := false
	for {
		gs, fs := h.sched.take(false)
		if gs == nil {
			return any
		}
		any = true
		h.processRound(gs, fs)
	}
}

// Group returns an open group.
func (h *Host) Group(id GroupID) (*Group, error) {
	h.mu.RLock()
	g := h.groups[id]
	h.mu.RUnlock()
	if g == nil {
		return nil, fmt.Errorf("%w: group %d", ErrGroupNotFound, id)
	}
	return &Group{g: g}, nil
}

func (h *Host) group(id GroupID) *group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups[id]
}

func (h *Host) newID() uint64 { return h.nextID.Add(1) }

// fatal stops the host after a storage failure.
func (h *Host) fatal(err error) {
	err = fmt.Errorf("%w: %w", ErrStorage, err)
	h.fatalOnce.Do(func() {
		h.fatalErr.Store(&err)
		if IsCorrupt(err) {
			// Not a failure to write: the owner says what is corrupt.
			h.log.Debug("raft host stopping: stored raft state is corrupt", "err", err)
		} else {
			h.log.Error("raft host stopping: cannot persist raft state", "err", err)
		}
		h.sched.stop()
		h.mu.RLock()
		gs := make([]*group, 0, len(h.groups))
		for _, g := range h.groups {
			if g != nil {
				gs = append(gs, g)
				g.failWaiters(err)
			}
		}
		h.mu.RUnlock()
		// Reads and later calls fail too, once no round holds the group
		// (fatal may be called from inside one).
		go func() {
			for _, g := range gs {
				g.stop(err)
			}
		}()
		if h.cfg.OnFatal != nil {
			go h.cfg.OnFatal(err)
		}
	})
}

func (h *Host) failed() error {
	if p := h.fatalErr.Load(); p != nil {
		return *p
	}
	return nil
}

// RemoveGroup closes a group on this host: its waiters, and calls made on
// its handle from now on, fail with ErrStopped, and messages for it are
// dropped. With destroy, the
// group's raft state (log, hard state, applied state) is deleted too; the
// state machine's own data is the caller's to delete.
func (h *Host) RemoveGroup(id GroupID, destroy bool) (err error) {
	h.mu.Lock()
	g := h.groups[id]
	if g == nil {
		h.mu.Unlock()
		return fmt.Errorf("%w: group %d", ErrGroupNotFound, id)
	}
	delete(h.groups, id)
	h.mu.Unlock()
	g.stop(ErrStopped) // waits for a round in progress: it holds g.mu
	if !destroy {
		return nil
	}
	lo, hi := groupSpan(id)
	if err := h.deleteRange(lo, hi); err != nil {
		h.fatalIfPebbleFailed(err)
		return fmt.Errorf("multiraft: destroy group %d: %w", id, err)
	}
	if err := g.store.side.destroy(); err != nil {
		return fmt.Errorf("multiraft: destroy group %d: %w", id, err)
	}
	return nil
}

// sideloadStore is group g's store of sideloaded entries (nil: the host
// sideloads none).
func (h *Host) sideloadStore(g GroupID) *sideloadStore {
	if h.cfg.SideloadDir == "" {
		return nil
	}
	return newSideloadStore(h.cfg.FS, h.cfg.SideloadDir, g, h.cfg.SideloadMinBytes)
}

// deleteRange deletes [lo, hi) durably, returning Pebble's fatal failure.
func (h *Host) deleteRange(lo, hi []byte) (err error) {
	defer storage.RecoverFatal(&err)
	return h.db.DeleteRange(lo, hi, pebble.Sync)
}

// fatalIfPebbleFailed stops the host if err is Pebble's fatal failure,
// after which the database may only be closed.
func (h *Host) fatalIfPebbleFailed(err error) {
	if fe := (*storage.FatalError)(nil); errors.As(err, &fe) {
		h.fatal(err)
	}
}
