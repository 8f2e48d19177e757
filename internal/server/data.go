package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
	"github.com/shardkit/shardkit/schema"
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
	ctx  context.Context
	node *cluster.Node
	db   *pebble.DB
	// ingestDir is the copy tables' directory (newDataLayer).
	ingestDir string
	procs     *proc.Registry
	fp        *failpoint.Points
	log       *slog.Logger
	// rowCacheBytes sizes the replicaset state machine's row cache.
	rowCacheBytes int64
	history       replicaset.HistoryLimits // StorageConfig.History
	copyTables    bool                     // StorageConfig.CopyTables

	mu      sync.Mutex
	storage *replicaset.Storage
	wg      sync.WaitGroup
	router  *router.Router
	mover   *mover.Mover
}

// moverGroupZero is the mover's view of group 0 (mover.GroupZero).
type moverGroupZero struct{ node *cluster.Node }

func (z *moverGroupZero) State() *meta.State       { return z.node.Meta().State() }
func (z *moverGroupZero) Changed() <-chan struct{} { return z.node.Meta().Changed() }
func (z *moverGroupZero) Propose(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	return z.node.Propose(ctx, c)
}

func (z *moverGroupZero) Leads() bool {
	g0, id := z.node.Group0(), z.node.Identity()
	return g0 != nil && id != nil && uint64(g0.Leader()) == id.RaftID
}

// newDataLayer makes the data layer; attach gives it the node once made
// (the node's config needs the data layer's factory first).
// ingestDir is where the replicaset's state machine writes the copy
// tables it ingests (replicaset.SM.SetIngestDir): beside db, on its file
// system.
func newDataLayer(ctx context.Context, db *pebble.DB, ingestDir string, procs *proc.Registry, fp *failpoint.Points, rowCacheBytes int64, log *slog.Logger) *dataLayer {
	return &dataLayer{ctx: ctx, db: db, ingestDir: ingestDir, procs: procs, fp: fp, rowCacheBytes: rowCacheBytes, log: log}
}

// attach gives the data layer the node, authz (nil: no security) the
// router checks each call of a data Stream with, and observe, which it
// tells of each such call (the RPC latency metric).
func (d *dataLayer) attach(node *cluster.Node, authz *auth.Authorizer, observe func(string, codes.Code, time.Duration)) {
	d.node = node
	d.mover = mover.New(mover.Config{GroupZero: &moverGroupZero{node: node}, Dial: node.DialPeer, Failpoints: d.fp, Logger: d.log})
	d.wg.Go(func() { d.mover.Run(d.ctx) })
	zero := &routerGroupZero{node: node, log: d.log}
	cfg := router.Config{
		GroupZero: zero,
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
	if err := sm.SetIngestDir(vfs.Default, d.ingestDir); err != nil {
		return nil, err
	}
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
		GroupZero:    &storageGroupZero{node: d.node, log: d.log},
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
		CopyPaceOff: func() bool {
			return d.node.Meta().State().Props.GetRebalancer().GetCopyPaceOff()
		},
		History:    d.history,
		CopyTables: d.copyTables,
		Logger:     d.log,
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
	datav1.RegisterShardingServiceServer(s, mover.NewService(d.mover, (&routerGroupZero{node: d.node, log: d.log}).Refresh))
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

// routerGroupZero is the router's view of group 0 (router.GroupZero).
type routerGroupZero struct {
	node   *cluster.Node
	log    *slog.Logger
	spaces atomic.Pointer[compiledSpaces]
}

func (t *routerGroupZero) st() *meta.State { return t.node.Meta().State() }

func (t *routerGroupZero) BucketCount() uint32 { return t.st().Props.GetBucketCount() }

func (t *routerGroupZero) ReplicasetOf(b uint32) string {
	st := t.st()
	if b < 1 || int(b) > len(st.Buckets) {
		return ""
	}
	return st.Buckets[b-1]
}

func (t *routerGroupZero) Replicasets() []router.Replicaset {
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

// Space returns a space compiled once per schema version (compiled.go).
func (t *routerGroupZero) Space(name string) (*schema.Space, bool) {
	sp := t.compiled().byName[name]
	return sp, sp != nil
}

func (t *routerGroupZero) Spaces() []*datav1.Space {
	c := t.compiled()
	out := make([]*datav1.Space, 0, len(c.sorted))
	for _, sp := range c.sorted {
		out = append(out, schema.ToAPI(sp.Definition()))
	}
	return out
}

// compiledSpaces is group 0's spaces at one schema version, compiled.
type compiledSpaces struct {
	version uint64
	byName  map[string]*schema.Space
	sorted  []*schema.Space // by id
}

// compiled returns the spaces of this instance's view of group 0,
// compiling them when the schema version changed since the last call.
func (t *routerGroupZero) compiled() *compiledSpaces {
	st := t.st()
	v := st.Props.GetSchemaVersion()
	if c := t.spaces.Load(); c != nil && c.version == v {
		return c
	}
	c := &compiledSpaces{version: v, byName: map[string]*schema.Space{}}
	for _, m := range st.SortedSpaces() {
		sp, err := meta.CompileSpace(m)
		if err != nil {
			// Group 0 compiled it before it applied it; a definition it
			// holds that does not compile is a defect, not a user's error.
			t.log.Error("a space in group 0 does not compile", "space", m.GetName(), "err", err)
			continue
		}
		c.byName[sp.Name()] = sp
		c.sorted = append(c.sorted, sp)
	}
	t.spaces.Store(c)
	return c
}

func (t *routerGroupZero) SchemaVersion() uint64   { return t.st().Props.GetSchemaVersion() }
func (t *routerGroupZero) ShardingVersion() uint64 { return t.st().Props.GetShardingVersion() }

func (t *routerGroupZero) Self() router.Member {
	inst := t.node.SelfInstance()
	return router.Member{InstanceID: inst.GetInstanceId(), Address: inst.GetAddress(), FailureDomain: inst.GetFailureDomain()}
}

func (t *routerGroupZero) Changed() <-chan struct{} { return t.node.Meta().Changed() }

func (t *routerGroupZero) Refresh(ctx context.Context) error {
	g0 := t.node.Group0()
	if g0 == nil {
		return fmt.Errorf("group 0 is not running on this instance yet")
	}
	return g0.ReadIndex(ctx)
}

// storageGroupZero is a replicaset storage's view of group 0
// (replicaset.GroupZero).
type storageGroupZero struct {
	node *cluster.Node
	log  *slog.Logger
}

func (z *storageGroupZero) Schema() (uint64, []*metapb.Space) {
	st := z.node.Meta().State()
	return st.Props.GetSchemaVersion(), st.SortedSpaces()
}

func (z *storageGroupZero) WaitSchema(ctx context.Context, v uint64) error {
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

func (z *storageGroupZero) Buckets() (uint32, string) {
	p := z.node.Meta().State().Props
	return p.GetBucketCount(), p.GetBucketBootstrapReplicaset()
}

func (z *storageGroupZero) Address(raftID uint64) string {
	if inst := z.node.Meta().State().InstanceByRaftID(raftID); inst != nil {
		return inst.GetAddress()
	}
	return ""
}

func (z *storageGroupZero) Changed() <-chan struct{} { return z.node.Meta().Changed() }

func (z *storageGroupZero) Replicaset(id string) (string, []string) {
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
	def, err := schema.FromAPI(sp)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := d.node.Propose(ctx, &metapb.Command{Op: &metapb.Command_CreateSpace{CreateSpace: &metapb.CreateSpace{Space: meta.SpaceMessage(def), IfNotExists: ifNotExists}}})
	if err != nil {
		return nil, err
	}
	if def, err = meta.SpaceDefinition(res.Space); err != nil {
		return nil, err
	}
	return schema.ToAPI(def), nil
}

func (d *ddl) DropSpace(ctx context.Context, name string) error {
	_, err := d.node.Propose(ctx, &metapb.Command{Op: &metapb.Command_DropSpace{DropSpace: &metapb.DropSpace{Name: name}}})
	return err
}
