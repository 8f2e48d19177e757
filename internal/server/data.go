package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/mover"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/router"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

// The data layer's wiring: the replicaset's storage is made when the
// cluster opens the replicaset group; the router serves DataService from
// the start (answering Unavailable until group 0 runs). Group 0's state is
// adapted to what each room needs here, and nowhere else.

// routeCall is the instance's forward.Route: the node's, which sends the
// methods only group 0's leader serves (auth's method table: the cluster's
// and the data layer's DDL and sharding changes) there; the other data
// calls route themselves, in the router.
func routeCall(node *cluster.Node) forward.Route { return node.Route }

// dataLayer holds one instance's storage and router.
type dataLayer struct {
	ctx   context.Context
	node  *cluster.Node
	db    *pebble.DB
	procs *proc.Registry
	fp    *failpoint.Points
	log   *slog.Logger
	// rowCacheBytes sizes the replicaset state machine's row cache.
	rowCacheBytes int64

	mu      sync.Mutex
	storage *replicaset.Storage
	wg      sync.WaitGroup
	router  *router.Router
	mover   *mover.Mover
}

// moverZero adapts the cluster node to the mover.
type moverZero struct{ node *cluster.Node }

func (z *moverZero) State() *meta.State       { return z.node.Meta().State() }
func (z *moverZero) Changed() <-chan struct{} { return z.node.Meta().Changed() }
func (z *moverZero) Propose(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	return z.node.Propose(ctx, c)
}

func (z *moverZero) Leads() bool {
	g0, id := z.node.Group0(), z.node.Identity()
	return g0 != nil && id != nil && uint64(g0.Leader()) == id.RaftID
}

// newDataLayer makes the data layer; attach gives it the node once made
// (the node's config needs the data layer's factory first).
func newDataLayer(ctx context.Context, db *pebble.DB, procs *proc.Registry, fp *failpoint.Points, rowCacheBytes int64, log *slog.Logger) *dataLayer {
	return &dataLayer{ctx: ctx, db: db, procs: procs, fp: fp, rowCacheBytes: rowCacheBytes, log: log}
}

// attach gives the data layer the node, authz (nil: no security) the
// router checks each call of a data Stream with, and observe, which it
// tells of each such call (the RPC latency metric).
func (d *dataLayer) attach(node *cluster.Node, authz *auth.Authorizer, observe func(string, codes.Code, time.Duration)) {
	d.node = node
	d.mover = mover.New(mover.Config{Zero: &moverZero{node: node}, Dial: node.DialPeer, Failpoints: d.fp, Logger: d.log})
	d.wg.Go(func() { d.mover.Run(d.ctx) })
	topo := &topology{node: node}
	cfg := router.Config{
		Topology: topo,
		Local: func() router.Local {
			if s := d.local(); s != nil {
				return s
			}
			return nil
		},
		DDL:         &ddl{node: node},
		Dial:        node.DialPeer,
		Procs:       d.procs,
		Logger:      d.log,
		ObserveCall: observe,
	}
	if authz != nil {
		cfg.AuthorizeItem = authz.AuthorizeItem
	}
	d.router = router.New(cfg)
}

func (d *dataLayer) local() *replicaset.Storage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.storage
}

// newSM is the cluster's factory of the replicaset state machine.
func (d *dataLayer) newSM(g multiraft.GroupID) (multiraft.StateMachine, error) {
	sm, err := replicaset.New(d.db, g)
	if err != nil {
		return nil, err
	}
	sm.SetFailpoints(d.fp)
	sm.SetRowCacheBytes(d.rowCacheBytes)
	return sm, nil
}

// opened starts the storage of the replicaset group the cluster opened.
func (d *dataLayer) opened(rsID string, g *multiraft.Group, sm multiraft.StateMachine) {
	rsm, ok := sm.(*replicaset.SM)
	if !ok {
		d.log.Error("the replicaset group has an unexpected state machine", "type", fmt.Sprintf("%T", sm))
		return
	}
	s := replicaset.NewStorage(replicaset.StorageConfig{
		ReplicasetID: rsID,
		InstanceID:   d.node.Identity().InstanceID,
		Group:        g,
		SM:           rsm,
		DB:           d.db,
		Zero:         &groupZero{node: d.node},
		Procs:        d.procs,
		Dial:         d.node.DialPeer,
		// The replicaset's own quotas of buckets sent and received at
		// once are the rebalancer's settings (shardkit rebalance config).
		Quotas: func() (int, int) {
			_, maxSending, maxReceiving, _ := mover.Settings(d.node.Meta().State().Props.GetRebalancer())
			return maxSending, maxReceiving
		},
		// And so is the pace of the copy in (rebalance config --copy-rate).
		CopyRate: func() uint64 {
			return d.node.Meta().State().Props.GetRebalancer().GetCopyBytesPerS()
		},
		Logger: d.log,
	})
	d.mu.Lock()
	d.storage = s
	d.mu.Unlock()
	d.wg.Go(func() { s.Run(d.ctx) })
}

// wait returns once the storage's background work has stopped (after ctx).
func (d *dataLayer) wait() { d.wg.Wait() }

// register adds DataService and the bucket service to the gRPC server.
func (d *dataLayer) register(s *grpc.Server) {
	datav1.RegisterDataServiceServer(s, d.router)
	rspb.RegisterBucketServiceServer(s, replicaset.NewBucketService(d.local))
	datav1.RegisterShardingServiceServer(s, mover.NewService(d.mover, (&topology{node: d.node}).Refresh))
}

// bucketCounts is the cluster's hook for status: each replicaset's active
// bucket count from its own state (the built-in buckets procedure on
// every replicaset's leader).
func (d *dataLayer) bucketCounts(ctx context.Context) map[string]int {
	if d.router == nil {
		return nil
	}
	resp, err := d.router.MapCall(ctx, &datav1.MapCallRequest{Procedure: "buckets", Mode: datav1.Mode_MODE_RW})
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, r := range resp.GetResults() {
		if r.GetError() != "" {
			continue
		}
		if t, err := tuple.DecodeTuple(r.GetResult()); err == nil && len(t) == 1 {
			if n, ok := t[0].AsUint(); ok {
				out[r.GetReplicasetId()] = int(n)
			}
		}
	}
	return out
}

// topology adapts group 0's state to the router.
type topology struct{ node *cluster.Node }

func (t *topology) st() *meta.State { return t.node.Meta().State() }

func (t *topology) BucketCount() uint32 { return t.st().Props.GetBucketCount() }

func (t *topology) ReplicasetOf(b uint32) string {
	st := t.st()
	if b < 1 || int(b) > len(st.Buckets) {
		return ""
	}
	return st.Buckets[b-1]
}

func (t *topology) Replicasets() []router.Replicaset {
	st := t.st()
	counts := st.BucketCounts()
	var out []router.Replicaset
	for _, rs := range st.SortedReplicasets() {
		if rs.GetExpelled() {
			continue
		}
		r := router.Replicaset{ID: rs.GetReplicasetId(), Weight: rs.GetWeight(), Buckets: counts[rs.GetReplicasetId()]}
		if l := st.Instance(rs.GetLeaderInstanceId()); l != nil && !meta.IsExpelled(l) {
			r.LeaderAddress = l.GetAddress()
		}
		for _, m := range st.Members(rs.GetReplicasetId()) {
			r.Members = append(r.Members, router.Member{InstanceID: m.GetInstanceId(), Address: m.GetAddress(), FailureDomain: m.GetFailureDomain()})
		}
		out = append(out, r)
	}
	return out
}

func (t *topology) Space(name string) (router.Space, bool) {
	sp := t.st().Spaces[name]
	if sp == nil {
		return router.Space{}, false
	}
	f, err := meta.SpaceFormat(sp)
	if err != nil {
		return router.Space{}, false
	}
	out := router.Space{Name: sp.GetName(), Format: f, ShardingParts: int(sp.GetShardingKeyParts())}
	for _, i := range sp.GetPrimaryKey() {
		out.PK = append(out.PK, int(i))
	}
	return out, true
}

func (t *topology) Spaces() []*datav1.Space {
	var out []*datav1.Space
	for _, sp := range t.st().SortedSpaces() {
		out = append(out, apiSpace(sp))
	}
	return out
}

func (t *topology) SchemaVersion() uint64   { return t.st().Props.GetSchemaVersion() }
func (t *topology) ShardingVersion() uint64 { return t.st().Props.GetShardingVersion() }

func (t *topology) Self() router.Member {
	inst := t.node.SelfInstance()
	return router.Member{InstanceID: inst.GetInstanceId(), Address: inst.GetAddress(), FailureDomain: inst.GetFailureDomain()}
}

func (t *topology) Changed() <-chan struct{} { return t.node.Meta().Changed() }

func (t *topology) Refresh(ctx context.Context) error {
	g0 := t.node.Group0()
	if g0 == nil {
		return fmt.Errorf("group 0 is not running on this instance yet")
	}
	return g0.ReadIndex(ctx)
}

// groupZero adapts group 0's state to a replicaset's storage.
type groupZero struct{ node *cluster.Node }

func (z *groupZero) Schema() (uint64, []*rspb.Space) {
	st := z.node.Meta().State()
	var out []*rspb.Space
	for _, sp := range st.SortedSpaces() {
		out = append(out, storageSpace(sp))
	}
	return st.Props.GetSchemaVersion(), out
}

func (z *groupZero) WaitSchema(ctx context.Context, v uint64) error {
	for {
		ch := z.node.Meta().Changed()
		if z.node.Meta().State().Props.GetSchemaVersion() >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (z *groupZero) Buckets() (uint32, string) {
	p := z.node.Meta().State().Props
	return p.GetBucketCount(), p.GetBucketBootstrapReplicaset()
}

func (z *groupZero) Address(raftID uint64) string {
	if inst := z.node.Meta().State().InstanceByRaftID(raftID); inst != nil {
		return inst.GetAddress()
	}
	return ""
}

func (z *groupZero) Changed() <-chan struct{} { return z.node.Meta().Changed() }

func (z *groupZero) Replicaset(id string) (string, []string) {
	st := z.node.Meta().State()
	var leader string
	if rs := st.Replicasets[id]; rs != nil {
		if l := st.Instance(rs.GetLeaderInstanceId()); l != nil && !meta.IsExpelled(l) {
			leader = l.GetAddress()
		}
	}
	var members []string
	for _, m := range st.Members(id) {
		members = append(members, m.GetAddress())
	}
	return leader, members
}

// ddl proposes the data layer's DDL to group 0 (on its leader).
type ddl struct{ node *cluster.Node }

func (d *ddl) CreateSpace(ctx context.Context, sp *datav1.Space, ifNotExists bool) (*datav1.Space, error) {
	m, err := metaSpace(sp)
	if err != nil {
		return nil, err
	}
	res, err := d.node.Propose(ctx, &metapb.Command{Op: &metapb.Command_CreateSpace{CreateSpace: &metapb.CreateSpace{Space: m, IfNotExists: ifNotExists}}})
	if err != nil {
		return nil, err
	}
	return apiSpace(res.Space), nil
}

func (d *ddl) DropSpace(ctx context.Context, name string) error {
	_, err := d.node.Propose(ctx, &metapb.Command{Op: &metapb.Command_DropSpace{DropSpace: &metapb.DropSpace{Name: name}}})
	return err
}

// The space definition's three forms: the API's (1-based field numbers),
// group 0's and a replicaset's (0-based, types by name or number).

func apiSpace(sp *metapb.Space) *datav1.Space {
	out := &datav1.Space{Name: sp.GetName(), Id: sp.GetId(), ShardingKeyParts: sp.GetShardingKeyParts(), SchemaVersion: sp.GetSchemaVersion()}
	for _, f := range sp.GetFormat() {
		out.Format = append(out.Format, &datav1.Field{Name: f.GetName(), Type: f.GetType(), Nullable: f.GetNullable()})
	}
	for _, i := range sp.GetPrimaryKey() {
		out.PrimaryKey = append(out.PrimaryKey, i+1)
	}
	return out
}

func metaSpace(sp *datav1.Space) (*metapb.Space, error) {
	out := &metapb.Space{Name: sp.GetName(), ShardingKeyParts: sp.GetShardingKeyParts()}
	for _, f := range sp.GetFormat() {
		out.Format = append(out.Format, &metapb.Field{Name: f.GetName(), Type: f.GetType(), Nullable: f.GetNullable()})
	}
	for _, n := range sp.GetPrimaryKey() {
		if n == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "space %s: primary key field numbers start at 1", sp.GetName())
		}
		out.PrimaryKey = append(out.PrimaryKey, n-1)
	}
	if out.ShardingKeyParts == 0 {
		out.ShardingKeyParts = uint32(len(out.PrimaryKey)) // default: the whole primary key
	}
	return out, nil
}

func storageSpace(sp *metapb.Space) *rspb.Space {
	out := &rspb.Space{Id: sp.GetId(), Name: sp.GetName(), PrimaryKey: sp.GetPrimaryKey(), ShardingKeyParts: sp.GetShardingKeyParts()}
	for _, f := range sp.GetFormat() {
		t, _ := tuple.ParseType(f.GetType()) // validated in group 0
		out.Format = append(out.Format, &rspb.Field{Name: f.GetName(), Type: uint32(t), Nullable: f.GetNullable()})
	}
	return out
}
