package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/grpcnet"
	"github.com/shardkit/shardkit/retry"
)

// GroupMeta is group 0, the cluster's metadata log.
const GroupMeta multiraft.GroupID = 0

// Config configures a Node.
type Config struct {
	ClusterID             string
	InstanceID            string
	ReplicasetID          string
	Advertise             string
	HTTPAddress           string
	Peers                 []string
	FailureDomain         map[string]string
	InitReplicationFactor int
	// InitBucketCount is the bucket count of a cluster this instance
	// bootstraps (0: meta.DefaultBucketCount).
	InitBucketCount    int
	DataDir            string
	AutoOfflineTimeout time.Duration
	ShutdownTimeout    time.Duration
	// DisableLeaseReads turns the raft host's lease reads off
	// (multiraft.Config.LeaseReads): every read index is a heartbeat round.
	DisableLeaseReads bool
	Logger            *slog.Logger
	// Credentials secure every connection to another instance (cluster
	// calls and the raft transport), through client.DialOptions; nil means
	// plaintext.
	Credentials credentials.TransportCredentials
	// Timeouts bound the instance's own calls (zero fields: DefaultTimeouts).
	Timeouts Timeouts
	// Clock tells the time (default: the system clock).
	Clock Clock
	// NewReplicasetSM makes the state machine of this instance's
	// replicaset group (required). The server passes the data layer's;
	// the cluster never knows what it holds.
	NewReplicasetSM func(multiraft.GroupID) (multiraft.StateMachine, error)
	// OnReplicasetGroup, when set, is told once the replicaset group is
	// open on this instance (the server starts the data layer's storage).
	OnReplicasetGroup func(replicasetID string, g *multiraft.Group, sm multiraft.StateMachine)
	// BucketCounts, when set, returns each replicaset's active bucket
	// count as the replicasets' own states have it (status shows these;
	// a replicaset missing from the map shows group 0's count).
	BucketCounts func(ctx context.Context) map[string]int
	// StorageErrors delivers failures the database reports outside any
	// call (corruption Pebble found in its background work); one ends the
	// instance like a failure of its raft storage. Nil: none.
	StorageErrors <-chan error
	// Failpoints are test hooks of the raft engine and its transport
	// (package failpoint: no-ops unless built with the "failpoints" tag).
	Failpoints *failpoint.Points
}

// RebootstrapRequest is returned by Run after discovery: the process must
// restart clean at Entrypoint ("boot" or "join:<address>").
type RebootstrapRequest struct{ Entrypoint string }

func (r *RebootstrapRequest) Error() string { return "rebootstrap to " + r.Entrypoint }

// RefusedError: the instance cannot start or join; restarting won't help.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// ErrExpelled: this instance has been expelled from the cluster.
var ErrExpelled = errors.New("current instance is expelled from the cluster")

// Entrypoints.
const (
	EntrypointBoot = "boot"
	entryJoin      = "join:"
)

// Node is one running instance.
type Node struct {
	cfg   Config
	log   *slog.Logger
	db    *pebble.DB
	meta  *meta.SM
	res   *resolver
	peers *peerPool

	transport atomic.Pointer[grpcnet.Transport]
	hostPtr   atomic.Pointer[multiraft.Host]
	g0        atomic.Pointer[multiraft.Group]

	mu       sync.Mutex
	ident    *Identity
	disc     *discovery
	rsGroups map[multiraft.GroupID]*multiraft.Group

	shuttingDown atomic.Bool
	fatal        chan error
	expelled     chan struct{} // closed when this instance learns it is expelled
	expelledOnce sync.Once
	// onlineIndex is the group-0 index that recorded this instance's
	// latest request for Online: a view of its record older than that is
	// stale, and its target Offline is not a reason to ask again.
	onlineIndex atomic.Uint64
	// targetRefused is the target grade this instance last asked for and
	// why group 0 refused it ("Online: ..."; nil once a request is
	// recorded, or while a leader is only out of reach): readiness names
	// it.
	targetRefused atomic.Pointer[string]
	metrics       *Metrics
	fwd           *forward.Forwarder
	svc           *Service
	clock         Clock
	// leaderReports wakes the governor when a member reports that it
	// has become its replicaset's leader (ReportReplicasetLeader).
	leaderReports chan leaderReport
}

// NewNode makes a node over an open database.
func NewNode(cfg Config, db *pebble.DB, m *Metrics) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.NewReplicasetSM == nil {
		panic("cluster: Config.NewReplicasetSM is required")
	}
	cfg.Timeouts.fill()
	sm := meta.New()
	n := &Node{
		cfg:           cfg,
		log:           cfg.Logger,
		db:            db,
		meta:          sm,
		res:           newResolver(sm),
		peers:         newPeerPool(client.DialOptions(cfg.Credentials)),
		rsGroups:      map[multiraft.GroupID]*multiraft.Group{},
		fatal:         make(chan error, 1),
		expelled:      make(chan struct{}),
		leaderReports: make(chan leaderReport, 16),
		metrics:       m,
		clock:         cfg.Clock,
	}
	n.fwd = forward.New(n.Route, n.DialPeer)
	n.svc = &Service{n: n}
	return n
}

// Meta returns group 0's state machine.
func (n *Node) Meta() *meta.SM { return n.meta }

// Group0 returns group 0 once this node runs it (nil before).
func (n *Node) Group0() *multiraft.Group { return n.g0.Load() }

// Identity returns the node's identity once known (nil before).
func (n *Node) Identity() *Identity {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ident
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Run runs the instance until ctx ends (then shuts down gracefully), the
// instance is expelled, or it fails. entrypoint is "" on a first start,
// or what a RebootstrapRequest asked for.
//
// A data dir found damaged (corrupt or lost files, a raft log that lost
// entries) ends it with a *RefusedError that says how to recover.
func (n *Node) Run(ctx context.Context, entrypoint string) (err error) {
	defer func() { err = n.damaged(err) }()
	ident, err := loadIdentity(n.db)
	if err != nil {
		return err
	}
	boot := false
	switch {
	case ident != nil:
		if err := ident.checkRestart(n.cfg.ClusterID, n.cfg.InstanceID, n.cfg.ReplicasetID, n.cfg.FailureDomain); err != nil {
			return &RefusedError{Err: err}
		}
		n.log.Info("restarting with the identity in the data dir (no discovery)", "instance_id", ident.InstanceID, "raft_id", ident.RaftID)
	case entrypoint == EntrypointBoot:
		boot = true
		ident = &Identity{ClusterID: n.cfg.ClusterID, InstanceID: n.cfg.InstanceID, RaftID: 1, UUID: newUUID(),
			ReplicasetID: n.cfg.ReplicasetID, FailureDomain: n.cfg.FailureDomain}
		if ident.InstanceID == "" {
			ident.InstanceID = "i1"
		}
		n.setDiscoveryResult(discoveryResult{bootstrap: true})
		if err := saveIdentity(n.db, ident); err != nil {
			return err
		}
		n.log.Info("bootstrapping a new cluster", "cluster_id", ident.ClusterID)
	case strings.HasPrefix(entrypoint, entryJoin):
		leader := strings.TrimPrefix(entrypoint, entryJoin)
		n.setDiscoveryResult(discoveryResult{leader: leader})
		ident, err = n.join(ctx, leader)
		if err != nil {
			return err
		}
	default:
		return n.discover(ctx)
	}
	n.mu.Lock()
	n.ident = ident
	n.mu.Unlock()
	n.res.setSelf(ident.RaftID, n.cfg.Advertise)
	n.res.setBoot(ident.Peers, ident.PeersCommitIndex)

	if err := n.startRaft(ident, boot); err != nil {
		return err
	}
	defer n.stopRaft()
	if err := n.ensureBooted(ctx, ident); err != nil {
		return err
	}
	if inst := n.meta.State().InstanceByUUID(ident.UUID); inst != nil && inst.GetCurrentGrade().GetVariant() == meta.Expelled {
		return &RefusedError{Err: ErrExpelled}
	}
	return n.serve(ctx)
}

func (n *Node) setDiscoveryResult(r discoveryResult) {
	d := newDiscovery(n.cfg.Advertise, n.cfg.Peers)
	d.decide(r)
	n.mu.Lock()
	n.disc = d
	n.mu.Unlock()
}

// discover runs discovery and asks for a rebootstrap at its outcome.
func (n *Node) discover(ctx context.Context) error {
	d := newDiscovery(n.cfg.Advertise, n.cfg.Peers)
	d.clock, d.log = n.clock, n.log
	n.mu.Lock()
	n.disc = d
	n.mu.Unlock()
	n.log.Info("discovering peers", "peers", n.cfg.Peers)
	res, err := d.run(ctx, func(ctx context.Context, addr string, req *clusterv1.DiscoverRequest) (*clusterv1.DiscoverResponse, error) {
		c, err := n.peers.client(addr)
		if err != nil {
			return nil, err
		}
		return c.Discover(ctx, req)
	}, 200*time.Millisecond, n.cfg.Timeouts.Probe)
	if err != nil {
		return err
	}
	if res.bootstrap {
		n.log.Info("discovery: this instance bootstraps the cluster")
		return &RebootstrapRequest{Entrypoint: EntrypointBoot}
	}
	n.log.Info("discovery: joining", "leader", res.leader)
	return &RebootstrapRequest{Entrypoint: entryJoin + res.leader}
}

// NotRunning says why this instance does not run group 0 yet ("" once it
// does): discovering peers (naming those that do not answer, and for how
// long), bootstrapping, or joining through an address.
func (n *Node) NotRunning() string {
	if n.g0.Load() != nil {
		return ""
	}
	const base = "this instance is not part of a running cluster yet"
	n.mu.Lock()
	d := n.disc
	n.mu.Unlock()
	if d == nil {
		return base + " (starting)"
	}
	d.mu.Lock()
	r := d.result
	d.mu.Unlock()
	switch {
	case r != nil && r.bootstrap:
		return base + ": it is bootstrapping the cluster"
	case r != nil:
		return base + ": it is joining the cluster through " + r.leader
	}
	if silent := d.waitingFor(); len(silent) > 0 {
		return base + ": it is discovering peers and waits for every --peer to answer; no answer from " + formatSilent(silent)
	}
	return base + ": it is discovering peers (those it asked have answered; waiting for them to agree)"
}

// errNotRunning is the Unavailable answer of a call that needs group 0,
// saying why this instance does not run it yet.
func (n *Node) errNotRunning() error {
	if why := n.NotRunning(); why != "" {
		return status.Error(codes.Unavailable, why)
	}
	return errNoGroup0
}

// startRaft starts the host and opens group 0 and the replicaset group.
func (n *Node) startRaft(ident *Identity, boot bool) error {
	if err := n.meta.Load(n.db); err != nil {
		return err
	}
	tr := grpcnet.New(grpcnet.Config{
		NodeID: multiraft.NodeID(ident.RaftID), Resolver: n.res, Logger: n.log, DialOptions: client.DialOptions(n.cfg.Credentials),
		Failpoints: n.cfg.Failpoints,
	})
	host, err := multiraft.NewHost(multiraft.Config{
		NodeID:      multiraft.NodeID(ident.RaftID),
		DB:          n.db,
		SnapshotDir: filepath.Join(n.cfg.DataDir, "snapshots"),
		SideloadDir: filepath.Join(n.cfg.DataDir, "raft-sideloaded"),
		Transport:   tr,
		Logger:      n.log,
		LeaseReads:  !n.cfg.DisableLeaseReads,
		Failpoints:  n.cfg.Failpoints,
		Observer:    n.roundObserver(),
		OnFatal: func(err error) {
			select {
			case n.fatal <- err:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	tr.SetHandler(host)
	n.transport.Store(tr)
	if err := host.Start(); err != nil {
		return err
	}
	n.hostPtr.Store(host)
	var members []multiraft.NodeID
	if boot {
		members = []multiraft.NodeID{1}
	}
	g0, err := host.OpenGroup(multiraft.GroupConfig{ID: GroupMeta, Members: members, StateMachine: n.meta})
	if err != nil {
		return err
	}
	n.g0.Store(g0)
	return nil
}

func (n *Node) stopRaft() {
	if h := n.hostPtr.Load(); h != nil {
		h.Stop()
	}
	if tr := n.transport.Load(); tr != nil {
		tr.Close()
	}
	n.peers.close()
}

// ensureBooted proposes the cluster's first command on the bootstrap
// instance (K6) and completes its identity from the result.
func (n *Node) ensureBooted(ctx context.Context, ident *Identity) error {
	if ident.RaftID != 1 || ident.ClusterUUID != "" {
		return nil
	}
	st := n.meta.State()
	if !st.Booted() {
		cmd := &metapb.Command{Op: &metapb.Command_Boot{Boot: &metapb.Boot{
			Properties: &metapb.ClusterProperties{
				ClusterId: ident.ClusterID, ClusterUuid: newUUID(),
				ReplicationFactor: uint32(max(1, n.cfg.InitReplicationFactor)), BucketCount: uint32(n.cfg.InitBucketCount),
			},
			First: metaJoinRequest(n.joinRequest(ident.UUID)),
		}}}
		for {
			res, err := n.proposeMeta(ctx, cmd)
			if err == nil && res.Err != nil {
				if n.meta.State().Booted() {
					// A crash after the first Boot was logged but before it
					// was applied: that Boot has now been applied again and
					// this one refused. Whose boot it was is checked below.
					break
				}
				return &RefusedError{Err: res.Err}
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, multiraft.ErrStorage) || errors.Is(err, multiraft.ErrStopped) {
				return err // retrying cannot help; the process exits and restarts
			}
			n.log.Info("waiting to propose the cluster's first entry", "err", err)
			if err := retry.Sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		st = n.meta.State()
	}
	inst := st.InstanceByUUID(ident.UUID)
	if inst == nil {
		return &RefusedError{Err: fmt.Errorf("the cluster was bootstrapped by another instance; wipe the data dir %s", n.cfg.DataDir)}
	}
	ident.ClusterUUID = st.Props.GetClusterUuid()
	ident.InstanceID = inst.GetInstanceId()
	ident.ReplicasetID = inst.GetReplicasetId()
	n.mu.Lock()
	n.ident = ident
	n.mu.Unlock()
	return saveIdentity(n.db, ident)
}

func (n *Node) joinRequest(uuid string) *clusterv1.RaftJoinRequest {
	return &clusterv1.RaftJoinRequest{
		ClusterId:        n.cfg.ClusterID,
		InstanceId:       n.cfg.InstanceID,
		ReplicasetId:     n.cfg.ReplicasetID,
		AdvertiseAddress: n.cfg.Advertise,
		FailureDomain:    n.cfg.FailureDomain,
		Uuid:             uuid,
		HttpAddress:      n.cfg.HTTPAddress,
	}
}

// SelfInstance returns this instance's record in group 0 (nil before it
// has one).
func (n *Node) SelfInstance() *metapb.Instance { return n.selfInstance() }

// selfInstance returns this node's record in group 0.
func (n *Node) selfInstance() *metapb.Instance {
	id := n.Identity()
	if id == nil {
		return nil
	}
	return n.meta.State().InstanceByUUID(id.UUID)
}

// serve runs the background loops, asks to go Online, and waits for the
// end; then it shuts down gracefully (K13).
func (n *Node) serve(ctx context.Context) error {
	loops, stopLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stopLoops()
		wg.Wait()
	}()
	wg.Go(func() { n.watch(loops) })
	wg.Go(func() { newGovernor(n).run(loops) })
	wg.Go(func() { n.reportLeadership(loops) })
	// Asking to go Online runs beside the wait below, so a storage failure
	// or an expulsion meanwhile ends the instance at once.
	startCtx, stopStart := context.WithCancel(ctx)
	started := make(chan struct{})
	defer func() {
		stopStart()
		<-started
	}()
	wg.Go(func() { n.selfSentinel(loops, started) })
	go func() {
		defer close(started)
		n.requestTarget(startCtx, meta.Online, "start")
	}()

	select {
	case <-ctx.Done():
		n.log.Info("stopping gracefully", "why", context.Cause(ctx)) // e.g. "hangup signal received"
		// The start request must not land after the shutdown's Offline.
		stopStart()
		<-started
		n.shutdown()
		return nil
	case <-n.expelled:
		n.log.Warn("this instance has been expelled from the cluster; exiting")
		return ErrExpelled
	case err := <-n.fatal:
		return err
	case err := <-n.cfg.StorageErrors:
		return err
	}
}

// watch follows group 0 for this instance: it opens the replicaset group
// once the instance is placed, and reports expulsion.
func (n *Node) watch(ctx context.Context) {
	for {
		ch := n.meta.Changed()
		if inst := n.selfInstance(); inst != nil {
			if inst.GetCurrentGrade().GetVariant() == meta.Expelled {
				n.expelledOnce.Do(func() { close(n.expelled) })
				return
			}
			n.ensureReplicasetGroup(inst)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// ensureReplicasetGroup opens this instance's replicaset group: as its
// only initial member on the replicaset's bootstrap instance, empty (to be
// added by the group's leader) elsewhere.
func (n *Node) ensureReplicasetGroup(inst *metapb.Instance) {
	rs := n.meta.State().Replicasets[inst.GetReplicasetId()]
	if rs == nil {
		return
	}
	gid := multiraft.GroupID(rs.GetRaftGroupId())
	n.mu.Lock()
	_, open := n.rsGroups[gid]
	n.mu.Unlock()
	if open {
		return
	}
	var members []multiraft.NodeID
	if rs.GetBootstrapInstanceId() == inst.GetInstanceId() {
		members = []multiraft.NodeID{multiraft.NodeID(inst.GetRaftId())}
	}
	h := n.hostPtr.Load()
	sm, err := n.cfg.NewReplicasetSM(gid)
	if err != nil {
		n.log.Error("cannot make the replicaset's state machine", "replicaset", rs.GetReplicasetId(), "group", uint64(gid), "err", err)
		return
	}
	g, err := h.OpenGroup(multiraft.GroupConfig{ID: gid, Members: members, StateMachine: sm})
	if err != nil {
		if !errors.Is(err, multiraft.ErrGroupExists) {
			n.log.Error("cannot open the replicaset group", "replicaset", rs.GetReplicasetId(), "group", uint64(gid), "err", err)
		}
		return
	}
	n.mu.Lock()
	n.rsGroups[gid] = g
	n.mu.Unlock()
	n.log.Info("replicaset group open", "replicaset", rs.GetReplicasetId(), "group", uint64(gid), "bootstrap", members != nil)
	if n.cfg.OnReplicasetGroup != nil {
		n.cfg.OnReplicasetGroup(rs.GetReplicasetId(), g, sm)
	}
}

// Group returns a Raft group open on this instance: group 0 or its
// replicaset's (nil when not open).
func (n *Node) Group(gid multiraft.GroupID) *multiraft.Group { return n.group(gid) }

func (n *Node) group(gid multiraft.GroupID) *multiraft.Group {
	if gid == GroupMeta {
		return n.g0.Load()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rsGroups[gid]
}

// requestTarget asks the leader to set this instance's target grade,
// retrying until it is recorded or ctx ends. If the cluster answers that
// this instance is expelled, it reports that on n.expelled.
func (n *Node) requestTarget(ctx context.Context, v metapb.GradeVariant, reason string) bool {
	id := n.Identity()
	backoff := retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		req := &clusterv1.UpdateInstanceRequest{
			ClusterId: id.ClusterID, InstanceId: id.InstanceID, TargetGrade: apiVariant(v), Reason: reason, Uuid: id.UUID,
		}
		if v == meta.Online {
			// Restarted with another --advertise, its peers reach it
			// only once group 0 has the new address.
			req.Address, req.HttpAddress = n.cfg.Advertise, n.cfg.HTTPAddress
		}
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.PeerCall)
		out, err := n.fwd.Call(rctx, clusterv1.ClusterService_UpdateInstance_FullMethodName, req, func(ctx context.Context) (any, error) {
			return n.svc.UpdateInstance(ctx, req)
		})
		cancel()
		resp, _ := out.(*clusterv1.UpdateInstanceResponse)
		if status.Code(err) == codes.Unavailable {
			// This instance knows no leader (it may no longer be a member
			// of group 0): ask the others, who forward to theirs.
			err = n.askOthers(ctx, "set target grade", func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
				var err error
				resp, err = clusterv1.NewClusterServiceClient(conn).UpdateInstance(ctx, req, opts...)
				return err
			})
		}
		if err == nil {
			if v == meta.Online {
				n.onlineIndex.Store(resp.GetInstance().GetCommitIndex())
			}
			n.targetRefused.Store(nil)
			return true
		}
		if status.Code(err) == codes.PermissionDenied {
			n.log.Warn("the cluster refuses this instance", "err", err)
			n.expelledOnce.Do(func() { close(n.expelled) })
			return false
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			n.log.Info("cannot set own target grade yet", "target", meta.VariantName(v), "err", err)
		default:
			// Refused by group 0 (an address another instance has, say):
			// retrying only helps once the cause is gone.
			why := meta.VariantName(v) + ": " + status.Convert(err).Message()
			n.targetRefused.Store(&why)
			n.log.Warn("group 0 refuses this instance's target grade; asking again", "target", meta.VariantName(v), "err", err)
		}
		if retry.Sleep(ctx, backoff.Next()) != nil {
			return false
		}
	}
}

// TargetRefused is the target grade this instance last asked for and why
// group 0 refused it ("Online: advertise address ... belongs to ..."), or
// "" when its latest request was recorded.
func (n *Node) TargetRefused() string {
	if why := n.targetRefused.Load(); why != nil {
		return *why
	}
	return ""
}

// askOthers tries call on the other instances group 0 knows, in turn,
// until one answers with anything but Unavailable (the client package's
// failover, Client.Do, which runs on the one retry policy of package
// retry), and returns that answer.
func (n *Node) askOthers(ctx context.Context, op string, call client.CallFunc) error {
	self := n.Identity().RaftID
	var others []string
	for _, inst := range n.meta.State().SortedInstances() {
		if inst.GetRaftId() == self || inst.GetCurrentGrade().GetVariant() == meta.Expelled || inst.GetAddress() == "" {
			continue
		}
		others = append(others, inst.GetAddress())
	}
	if len(others) == 0 {
		return status.Error(codes.Unavailable, "no other instance is known")
	}
	cl, err := client.New(ctx, client.Config{Peers: others, Credentials: n.cfg.Credentials, Timeout: n.cfg.Timeouts.PeerCall, Logger: n.log})
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer cl.Close()
	return cl.Do(ctx, op, true, call)
}

// shutdownNoQuorum is how long a shutdown waits for its current grade
// Offline while group 0 has no quorum before it stops waiting: the other
// voters stopped too (a whole cluster stopped together), and nothing
// would apply it before the shutdown timeout.
const shutdownNoQuorum = 5 * time.Second

// shutdown asks for target Offline and waits, bounded, until current
// Offline is applied here (K13). Without a quorum it gives up at the
// bound, or once group 0 has had none for shutdownNoQuorum.
func (n *Node) shutdown() {
	n.shuttingDown.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	n.log.Info("shutting down: asking for target grade Offline", "timeout", n.cfg.ShutdownTimeout)
	if !n.requestTarget(ctx, meta.Offline, "shutdown") {
		n.log.Warn("shutdown: target Offline not recorded in time (no leader or no quorum?)")
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var noQuorumSince time.Time
	for {
		ch := n.meta.Changed()
		inst := n.selfInstance()
		if v := inst.GetCurrentGrade().GetVariant(); v == meta.Offline || v == meta.Expelled {
			n.log.Info("shutdown: current grade is Offline")
			return
		}
		select {
		case <-ctx.Done():
			n.log.Warn("shutdown: current grade Offline not applied in time", "current", meta.FormatGrade(inst.GetCurrentGrade()))
			return
		case <-ch:
		case <-tick.C:
			if n.groupZeroHasQuorum(ctx) {
				noQuorumSince = time.Time{}
				continue
			}
			if noQuorumSince.IsZero() {
				noQuorumSince = time.Now()
			}
			if time.Since(noQuorumSince) >= shutdownNoQuorum {
				n.log.Warn("shutdown: group 0 has had no quorum for "+shutdownNoQuorum.String()+" (its other voters stopped too?); not waiting for the current grade Offline",
					"current", meta.FormatGrade(inst.GetCurrentGrade()))
				return
			}
		}
	}
}

// groupZeroHasQuorum reports whether group 0 confirms a read index within
// a second: it has a leader that a majority follows.
func (n *Node) groupZeroHasQuorum(ctx context.Context) bool {
	g0 := n.g0.Load()
	if g0 == nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return g0.ReadIndex(rctx) == nil
}

// roundObserver is the metrics as the raft host's observer (nil without
// metrics: a nil *Metrics in the interface would be called).
func (n *Node) roundObserver() multiraft.RoundObserver {
	if n.metrics == nil {
		return nil
	}
	return n.metrics
}
