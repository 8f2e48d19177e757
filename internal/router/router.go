package router

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/schema"
)

// MoveWait bounds how long the router waits for a bucket's move to pass
// its switch (the mover aborts a switch that takes longer than 2s).
const MoveWait = 3 * time.Second

// Member is one instance of a replicaset.
type Member struct {
	InstanceID    string
	Address       string
	FailureDomain map[string]string
}

// Replicaset is a replicaset as group 0 records it.
type Replicaset struct {
	ID string
	// LeaderAddress is the address of the leader group 0 last recorded
	// ("" when none).
	LeaderAddress string
	Members       []Member
	Weight        uint32
	// Buckets is how many buckets group 0 places on it.
	Buckets int
}

// GroupZero is the view of group 0 the router routes by; the server adapts
// internal/meta to it. Its answers may be a little behind the leader's.
type GroupZero interface {
	BucketCount() uint32
	// ReplicasetOf returns the replicaset holding a bucket ("" when none).
	ReplicasetOf(bucket uint32) string
	// Replicasets returns the replicasets in service, by id.
	Replicasets() []Replicaset
	// Space returns a space compiled (the same value until the schema
	// version changes).
	Space(name string) (*schema.Space, bool)
	// Spaces returns every space's definition, for GetRouting and ListSpaces.
	Spaces() []*datav1.Space
	SchemaVersion() uint64
	ShardingVersion() uint64
	// Self is this instance.
	Self() Member
	// Refresh catches this instance's view up with group 0's leader.
	Refresh(ctx context.Context) error
	// Changed returns a channel closed at the next change of this
	// instance's view of group 0.
	Changed() <-chan struct{}
}

// Local is this instance's storage of its replicaset (nil when it has
// none yet); the server passes internal/replicaset's Storage.
type Local interface {
	ReplicasetID() string
	IsLeader() bool
	LeaderAddress() string
	Write(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error)
	Get(context.Context, *datav1.GetRequest) (*datav1.GetResponse, error)
	// GetMany serves several Gets with one read index for all (errs[i]:
	// reqs[i]'s failure, as Get would answer it).
	GetMany(ctx context.Context, reqs []*datav1.GetRequest) (resps []*datav1.GetResponse, errs []error)
	Range(context.Context, *datav1.RangeRequest) (*datav1.RangeResponse, error)
	Call(context.Context, *datav1.CallRequest) (*datav1.CallResponse, error)
	// Watch serves a watcher of the replicaset's buckets (replicaset.Storage.Watch).
	Watch(ctx context.Context, req *datav1.WatchRequest, send func(rpccodec.Encoded) error) error
}

// DDL changes the spaces in group 0; the router calls it on the group-0
// leader (the server routes the DDL calls there).
type DDL interface {
	CreateSpace(ctx context.Context, sp *datav1.Space, ifNotExists bool) (*datav1.Space, error)
	DropSpace(ctx context.Context, name string) error
}

// Config configures a Router.
type Config struct {
	GroupZero GroupZero
	// Local returns this instance's storage (nil while it has none).
	Local func() Local
	DDL   DDL
	// Dial returns a connection to another instance (kept by the caller).
	Dial  func(addr string) (grpc.ClientConnInterface, error)
	Procs *proc.Registry
	// Attempts bounds how many places one call is tried at (default 4).
	Attempts int
	// MoveBackoff is how long a call that finds its bucket in its move's
	// switch waits before it asks again, unless group 0 places the bucket
	// elsewhere first (default 10ms; it doubles up to 200ms, or stays as
	// set when larger). The whole wait is bounded by MoveWait.
	MoveBackoff time.Duration
	Logger      *slog.Logger
	// AuthorizeItem checks one item of a Multi (or call of a Stream) as
	// its own unary call would be checked (nil: every item is allowed); a
	// refused item is answered with the error.
	AuthorizeItem func(ctx context.Context, item *datav1.MultiItem) error
	// ObserveCall, when set, is told of each call of a Stream served: the
	// unary method it stands for, the code of its answer, and how long it
	// took from its request's arrival (the calls of a request end
	// together).
	ObserveCall func(method string, code codes.Code, took time.Duration)
}

// Router serves DataService.
type Router struct {
	datav1.UnimplementedDataServiceServer
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	leaders map[string]string // replicaset -> leader address learned from answers
	// unreachable are the members that did not answer: pick passes them
	// over while group 0 still names a dead leader (retry.Unreachable).
	unreachable retry.Unreachable

	workers *workers // the goroutines of stream requests and Multi items (workers.go)
}

var _ datav1.DataServiceServer = (*Router)(nil)

// New makes a router.
func New(cfg Config) *Router {
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.MoveBackoff <= 0 {
		cfg.MoveBackoff = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Router{cfg: cfg, log: cfg.Logger.With("component", "router"), leaders: map[string]string{}, workers: newWorkers()}
}

func (r *Router) local() Local {
	if r.cfg.Local == nil {
		return nil
	}
	return r.cfg.Local()
}

func (r *Router) learnLeader(rs, addr string) {
	if addr == "" {
		return
	}
	r.mu.Lock()
	r.leaders[rs] = addr
	r.mu.Unlock()
}

func (r *Router) forgetLeader(rs, addr string) {
	r.mu.Lock()
	if r.leaders[rs] == addr {
		delete(r.leaders, rs)
	}
	r.mu.Unlock()
}

func (r *Router) replicaset(id string) (Replicaset, bool) {
	for _, rs := range r.cfg.GroupZero.Replicasets() {
		if rs.ID == id {
			return rs, true
		}
	}
	return Replicaset{}, false
}
