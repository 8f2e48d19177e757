package replicaset

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// RequestIDWindow is how long a replicaset remembers a write's request id
// (by the leader-stamped clock of its log): a retry of the write within
// the window returns the first answer and is not applied again. Clients
// retry within their call's deadline, far inside it.
const RequestIDWindow = 2 * time.Minute

// ErrBadCommand: a log entry this state machine cannot decode.
var ErrBadCommand = errors.New("replicaset: bad command")

// SM is one replicaset group's state machine. It keeps in memory the
// applied schema (a published, immutable Schema), the bucket records, the
// per-bucket tuple counts and the request ids within the window (see
// sm_memory.go); the tuples are read from the database.
type SM struct {
	db    *pebble.DB
	group multiraft.GroupID
	k     keys
	// window is RequestIDWindow, shorter in tests.
	window time.Duration

	schema  atomic.Pointer[Schema]
	history atomic.Pointer[HistoryLimits] // the bounds applied (SetHistory), for the leader to compare

	// Only the applying goroutine uses these (but reqs, which other
	// goroutines ask has, under its lock); load sets them from the
	// database, Apply changes them with its batch (sm_memory.go).
	clock          int64
	buckets        map[uint32]*rspb.BucketState
	counts         map[uint32]map[uint32]int64 // bucket -> space -> tuples
	revs           map[uint32]uint64           // bucket -> revision (0: none applied here yet)
	hist           map[uint32]*bucketHistory   // what buckets' histories hold, as apply learned it (events.go)
	pendingEvents  []feedItem                  // events of this apply batch, for the feed once committed
	feed           *feed                       // what was committed lately, for watchers (events.go)
	changedRevs    map[uint32]struct{}         // revisions changed in this Apply call
	reqs           requestWindow
	reqDropped     int64                  // request ids written before this (ms) are deleted
	changedBuckets map[uint32]struct{}    // records changed since the last commit
	changedCounts  map[uint64]struct{}    // counts changed in this Apply call (countKey)
	copies         map[uint32]*copyCursor // receiving buckets this member saw start receiving (apply_moves.go)
	// deleted are the key ranges and the tuple keys this Apply call's
	// batch deletes (applier.deleteRange, applier.del): no copy table is
	// ingested over one (copy_files.go), since the batch commits after
	// the ingest and its deletion would take the table's rows with it.
	// (Tombstones are deleted too, and the request ids' expiry deletes
	// i/ and j/ keys, which no table holds.)
	deleted        []keySpan
	notifyOnCommit bool
	reloadErr      error       // a reload after a dropped batch failed: Apply fails
	rows           *rowCache   // what the apply path read and wrote lately (rowcache.go)
	filters        *keyFilters // which tuple keys buckets may hold (keyfilter.go)
	// Where copy tables are written to be ingested (SetIngestDir,
	// copy_files.go); nil: their rows go through the apply batch.
	ingestFS  vfs.FS
	ingestDir string

	// pub is the bucket records as committed, for readers.
	pubMu sync.RWMutex
	pub   map[uint32]*rspb.BucketState

	mu      sync.Mutex
	changed chan struct{}

	fp *failpoint.Points
}

// Failpoints of the state machine, each fired right after the entry is
// applied (before the apply batch is durable: a kill there loses the
// application, which the restart redoes).
const (
	FailpointAppliedSetBucket = "replicaset/applied-set-bucket" // + "/" + the state, e.g. "/STATE_SENDING"
	FailpointAppliedCopyChunk = "replicaset/applied-copy-chunk"
)

// SetFailpoints gives the state machine its test hooks (release builds
// ignore them).
func (sm *SM) SetFailpoints(fp *failpoint.Points) { sm.fp = fp }

var (
	_ multiraft.StateMachine  = (*SM)(nil)
	_ multiraft.ApplyObserver = (*SM)(nil)
)

// New returns the state machine of replicaset group g over db, with the
// schema it has applied before (if any).
func New(db *pebble.DB, g multiraft.GroupID) (*SM, error) {
	sm := &SM{db: db, group: g, k: newKeys(uint64(g)), window: RequestIDWindow, changed: make(chan struct{}), feed: newFeed(FeedBytes),
		rows: newRowCache(DefaultRowCacheBytes), filters: newKeyFilters(DefaultKeyFilterBytes)}
	sm.reqs.keepLimit = RequestResultsKept
	if err := sm.load(db); err != nil {
		return nil, err
	}
	return sm, nil
}

// SetRowCacheBytes sizes the row cache of the apply path (0: none). Call
// it before the group applies anything, as New's caller.
func (sm *SM) SetRowCacheBytes(n int64) { sm.rows = newRowCache(n) }

// SetKeyFilterBytes sizes the key filters of the apply path (0: none).
// Call it before the group applies anything, as New's caller.
func (sm *SM) SetKeyFilterBytes(n int64) { sm.filters = newKeyFilters(n) }

// Group returns the group's id.
func (sm *SM) Group() multiraft.GroupID { return sm.group }

// Schema returns the applied schema.
func (sm *SM) Schema() *Schema { return sm.schema.Load() }

// Changed returns a channel closed at the next change of the schema or of
// any bucket's state.
func (sm *SM) Changed() <-chan struct{} {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.changed
}

func (sm *SM) notify() {
	sm.mu.Lock()
	close(sm.changed)
	sm.changed = make(chan struct{})
	sm.mu.Unlock()
}

// load reads the applied schema and clock, and what the state machine
// keeps in memory.
func (sm *SM) load(r pebble.Reader) error {
	sm.rows.reset()
	sm.filters.reset()
	s := emptySchema()
	if v, err := get(r, sm.k.schema()); err != nil {
		return err
	} else if len(v) == 8 {
		s.Version = binary.BigEndian.Uint64(v)
	}
	err := scan(r, sm.k.spaces(), func(_, v []byte) error {
		d := &metapb.Space{}
		if err := proto.Unmarshal(v, d); err != nil {
			return fmt.Errorf("replicaset: stored space: %w", err)
		}
		sp, err := meta.CompileSpace(d)
		if err != nil {
			return err
		}
		s.add(sp)
		return nil
	})
	if err != nil {
		return err
	}
	sm.schema.Store(s)
	lim, err := loadHistory(r, sm.k)
	if err != nil {
		return err
	}
	sm.history.Store(lim)
	sm.clock = 0
	if v, err := get(r, sm.k.clock()); err != nil {
		return err
	} else if len(v) == 8 {
		sm.clock = int64(binary.BigEndian.Uint64(v))
	}
	return sm.loadMemory(r)
}

// get returns a copy of the value at key (nil when absent).
func get(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// scan calls fn for every key with prefix (key and value valid during the call).
func scan(r pebble.Reader, prefix []byte, fn func(k, v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return err
	}
	return it.Close()
}

// Encode marshals a command for Group.Propose.
func Encode(c *rspb.Command) ([]byte, error) { return c.MarshalVT() }

// Apply implements multiraft.StateMachine; each entry's result is a Result.
func (sm *SM) Apply(b *pebble.Batch, entries []multiraft.Entry) ([]any, error) {
	if sm.reloadErr != nil {
		return nil, sm.reloadErr
	}
	out := make([]any, len(entries))
	notify := false
	sm.filters.startApply()
	clear(sm.deleted) // the last run's keys
	sm.deleted = sm.deleted[:0]
	for i, e := range entries {
		cmd := &rspb.Command{}
		if len(e.Cmd) == 0 {
			out[i] = Result{} // an empty entry (a new leader's first) does nothing
			continue
		}
		if err := cmd.UnmarshalVT(e.Cmd); err != nil {
			out[i] = Result{Err: fmt.Errorf("%w at index %d: %w", ErrBadCommand, e.Index, err)}
			continue
		}
		sm.clock = max(sm.clock, cmd.GetNowUnixMs())
		if err := sm.expireRequests(b); err != nil {
			return nil, err
		}
		a := &applier{sm: sm, b: b, index: e.Index, now: sm.clock}
		switch op := cmd.GetOp().(type) {
		case *rspb.Command_Batch:
			out[i] = Result{Batch: a.batch(op.Batch)}
		case *rspb.Command_SetSchema:
			o, err := a.setSchema(op.SetSchema)
			out[i] = Result{Schema: o, Err: err}
			notify = true
		case *rspb.Command_SetHistory:
			out[i] = Result{Err: a.setHistory(op.SetHistory)}
		case *rspb.Command_CreateBuckets:
			o, err := a.createBuckets(op.CreateBuckets)
			out[i] = Result{Buckets: o, Err: err}
			notify = true
		case *rspb.Command_SetBuckets:
			outs := make([]*SetBucketOutcome, len(op.SetBuckets.GetSteps()))
			states := map[rspb.BucketState_State]bool{}
			for j, st := range op.SetBuckets.GetSteps() {
				outs[j] = a.setBucket(st)
				states[st.GetState()] = true
			}
			out[i] = Result{Steps: outs}
			notify = true
			for st := range states {
				if err := sm.fp.Eval(FailpointAppliedSetBucket + "/" + st.String()); err != nil {
					return nil, err
				}
			}
		case *rspb.Command_CopyChunks:
			out[i] = Result{Copies: a.copyChunks(op.CopyChunks)}
			if err := sm.fp.Eval(FailpointAppliedCopyChunk); err != nil {
				return nil, err
			}
		default:
			out[i] = Result{Err: fmt.Errorf("%w at index %d: unknown operation %T", ErrBadCommand, e.Index, op)}
		}
		if a.err != nil {
			return nil, a.err
		}
	}
	if err := sm.writeCounts(b); err != nil {
		return nil, err
	}
	if err := sm.writeRevisions(b); err != nil {
		return nil, err
	}
	if err := b.Set(sm.k.clock(), binary.BigEndian.AppendUint64(nil, uint64(sm.clock)), nil); err != nil {
		return nil, err
	}
	if notify {
		sm.notifyOnCommit = true // ApplyDone notifies
	}
	return out, nil
}

// Snapshot implements multiraft.StateMachine.
func (sm *SM) Snapshot(ctx context.Context, r pebble.Reader, w io.Writer) error {
	return storage.WritePrefixSnapshot(ctx, r, sm.k.prefix, w)
}

// Restore implements multiraft.StateMachine.
func (sm *SM) Restore(ctx context.Context, db *pebble.DB, r io.Reader) error {
	// What the apply path knows of the old state goes first: a restore
	// that fails half way leaves rows no filter saw (load does it again).
	sm.rows.reset()
	sm.filters.reset()
	if err := storage.RestorePrefixSnapshot(ctx, db, sm.k.prefix, r); err != nil {
		return err
	}
	if err := sm.load(db); err != nil {
		return err
	}
	sm.reloadErr = nil
	sm.notify()
	return nil
}
