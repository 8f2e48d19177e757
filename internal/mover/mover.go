package mover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rsclient"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/sharding"
)

// Defaults of the rebalancer's settings (group 0's Rebalancer record).
const (
	DefaultThresholdPercent = 1.0
	// DefaultMaxSending and DefaultMaxReceiving are the buckets a
	// replicaset sends and receives at once at most (vshard's
	// max_receiving default is 100 too); moves run in batches
	// (driver.go), so these bound how much of the data is in flight, not
	// how many steps run. They are upper bounds: the moves the
	// rebalancer starts into a replicaset follow its copy's pace (its
	// receive window), so that a busy one takes a few at once. Ten times
	// as many at once moved an idle cluster at most a fifth faster on
	// the benchmark machine (docs/benchmarks.md, "Level 0 compacted less
	// often").
	DefaultMaxSending   = 100
	DefaultMaxReceiving = 100
	// DefaultSwitchTimeout bounds how long a bucket refuses writes (from
	// its source freezing it to the switch), like vshard's
	// bucket_send_timeout.
	DefaultSwitchTimeout = 2 * time.Second
	// DefaultStepTimeout bounds each call of a move's step that changes a
	// bucket's record on a replicaset or a move's phase in group 0 (not
	// the copy, whose length is the data's): a call that gets no answer
	// in time (its instance stopped and came back, its answer lost) is
	// given up and the step retried, instead of holding the move, in
	// whatever phase, for as long as the driver leads.
	DefaultStepTimeout = 10 * time.Second
	// BatchSize is how many moves of one route the rebalancer starts in a
	// round at most, or a third of the smaller of the send and receive
	// quotas when that is more (batchSize): a large rebalance runs as
	// about three batches in flight (one copying while the next prepares),
	// each driven together. A batch's steps before its switch are one
	// entry each, whatever its size, so that a bucket's writes are refused
	// for about as long with quotas of 1,500 as with 100; many batches of
	// 50 each switching on its own queued their steps behind each other's
	// copies and froze buckets for up to 1.3 s (docs/benchmarks.md,
	// "Larger batches, the same copy streams").
	BatchSize = 50
	// CopyStreamBuckets is how many buckets of a batch one copy stream
	// (ReceiveBuckets) carries: a batch's copy runs as concurrent streams
	// of at most this many buckets.
	CopyStreamBuckets = 50
)

// batchSize is how many moves of a route a round starts at most, for the
// quotas maxSend and maxRecv (BatchSize).
func batchSize(maxSend, maxRecv int) int { return max(BatchSize, min(maxSend, maxRecv)/3) }

// GroupZero is what the mover needs of group 0 (the server adapts the cluster
// node and internal/meta).
type GroupZero interface {
	State() *meta.State
	// Changed returns a channel closed at the next change of group 0.
	Changed() <-chan struct{}
	// Leads reports whether this instance leads group 0.
	Leads() bool
	// Propose proposes a group-0 command on this instance (the leader).
	Propose(ctx context.Context, c *metapb.Command) (meta.Result, error)
}

// Config configures a Mover.
type Config struct {
	GroupZero GroupZero
	// Dial returns a connection to another instance (kept by the caller).
	Dial func(addr string) (grpc.ClientConnInterface, error)
	// SwitchTimeout: DefaultSwitchTimeout when zero.
	SwitchTimeout time.Duration
	// StepTimeout: DefaultStepTimeout when zero.
	StepTimeout time.Duration
	// Interval is how often the rebalancer looks when nothing changes
	// (default 1s).
	Interval time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// Failpoints are test hooks after each step (release builds: none).
	Failpoints *failpoint.Points
}

// Failpoints of the driver, each after a step is durable (a kill there
// leaves the move for the next group-0 leader to resume).
const (
	FailpointDestinationReceiving = "mover/after-destination-receiving"
	FailpointSourceSending        = "mover/after-source-sending"
	FailpointSwitched             = "mover/after-switch"
	FailpointCopied               = "mover/after-copy"
	FailpointDestinationActive    = "mover/after-destination-active"
	FailpointCleanupMarked        = "mover/after-cleanup-marked"
	FailpointSourceGarbage        = "mover/after-source-garbage"
)

// Steps lists the driver's failpoints in the order a move passes them.
var Steps = []string{FailpointDestinationReceiving, FailpointSourceSending, FailpointSwitched, FailpointCopied,
	FailpointDestinationActive, FailpointCleanupMarked, FailpointSourceGarbage}

// Mover runs the rebalancer and drives moves while this instance leads
// group 0.
type Mover struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	active map[uint32]bool // moves this mover is driving now
	// round is held through each rebalancer round (its plan and its
	// proposals), so that `reshard start`, once it has turned the
	// rebalancer off, can wait out a round planned before that and then
	// plan without racing it for the same buckets.
	round sync.Mutex
	wg    sync.WaitGroup
	// balancing: the disbalance exceeded the threshold, and the
	// rebalancer goes on until every replicaset has its target (as
	// vshard's does), not only until it is back under the threshold.
	balancing bool
	// windows holds, under mu, each destination's last receive window
	// (ReceiveBucketsResponse.window), which bounds the moves the
	// rebalancer starts into it (receiveRoom).
	windows map[string]receiveWindow
}

// receiveWindow is a destination's receive window as its last copy told
// it, and when.
type receiveWindow struct {
	buckets int // 0: no bound but the quotas
	at      time.Time
}

// windowFresh is how long a destination's receive window holds without a
// copy telling it again: about as long as its pace outlives a copy
// (a pace idle for 5 s starts again).
const windowFresh = 5 * time.Second

// firstWindow bounds the moves the rebalancer starts into a destination
// whose window no copy has told (none yet, or not for windowFresh): one
// batch's worth, whose copy tells the window for the next round.
const firstWindow = BatchSize

// recordWindow records a destination's receive window.
func (m *Mover) recordWindow(to string, buckets uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.windows[to] = receiveWindow{buckets: int(buckets), at: m.cfg.Now()}
}

// receiveRoom returns how many more moves the rebalancer may start into
// destination to, with copying of them in flight (switched or about to
// be, not yet copied): its receive window less those, firstWindow less
// those when the window is not known, and no bound (-1) when the window
// says none.
func (m *Mover) receiveRoom(to string, copying int) int {
	m.mu.Lock()
	w, ok := m.windows[to]
	m.mu.Unlock()
	switch {
	case !ok || m.cfg.Now().Sub(w.at) > windowFresh:
		return max(firstWindow-copying, 0)
	case w.buckets == 0:
		return -1
	default:
		return max(w.buckets-copying, 0)
	}
}

// New makes a mover.
func New(cfg Config) *Mover {
	if cfg.SwitchTimeout <= 0 {
		cfg.SwitchTimeout = DefaultSwitchTimeout
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Mover{cfg: cfg, log: cfg.Logger.With("component", "mover"), active: map[uint32]bool{}, windows: map[string]receiveWindow{}}
}

// Run drives moves and rebalances until ctx ends.
func (m *Mover) Run(ctx context.Context) {
	defer m.wg.Wait()
	for ctx.Err() == nil {
		ch := m.cfg.GroupZero.Changed()
		if m.cfg.GroupZero.Leads() && m.cfg.GroupZero.State().Booted() {
			m.startDrivers(ctx)
			m.round.Lock()
			err := m.rebalance(ctx)
			m.round.Unlock()
			if err != nil && ctx.Err() == nil {
				m.log.Warn("rebalancer", "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-time.After(m.cfg.Interval):
		}
	}
}

// Settings returns the rebalancer's settings with defaults filled in.
func Settings(r *metapb.Rebalancer) (thresholdPercent float64, maxSending, maxReceiving int, disabled bool) {
	thresholdPercent = DefaultThresholdPercent
	if r.GetThresholdCentiPercent() > 0 {
		thresholdPercent = float64(r.GetThresholdCentiPercent()) / 100
	}
	maxSending, maxReceiving = DefaultMaxSending, DefaultMaxReceiving
	if r.GetMaxSending() > 0 {
		maxSending = int(r.GetMaxSending())
	}
	if r.GetMaxReceiving() > 0 {
		maxReceiving = int(r.GetMaxReceiving())
	}
	return thresholdPercent, maxSending, maxReceiving, r.GetDisabled()
}

// Plan is the rebalancer's view of the cluster.
type Plan struct {
	Groups     []sharding.Group
	Targets    map[string]int
	Disbalance map[string]float64
	// MaxDisbalance is the largest (percent; +Inf when a weight-0
	// replicaset still holds buckets).
	MaxDisbalance float64
	// Moving counts moves in progress from and to each replicaset.
	Sending, Receiving map[string]int
	Routes             []sharding.Route
}

// MakePlan computes the balance of a state: targets by weight (locked
// replicasets keep what they have), disbalance, and routes from the
// replicasets above their targets to those below, counting moves in
// progress as done.
func MakePlan(st *meta.State) Plan {
	p := Plan{Disbalance: map[string]float64{}, Sending: map[string]int{}, Receiving: map[string]int{}}
	for _, mv := range st.Moves {
		p.Sending[mv.GetFrom()]++
		p.Receiving[mv.GetTo()]++
	}
	p.Groups = st.BalanceGroups()
	for i := range p.Groups {
		g := &p.Groups[i]
		// A move still preparing has not switched the bucket yet.
		for _, mv := range st.Moves {
			if mv.GetPhase() == metapb.Move_PHASE_PREPARE {
				switch g.ID {
				case mv.GetFrom():
					g.Buckets--
				case mv.GetTo():
					g.Buckets++
				}
			}
		}
		if rs := st.Replicasets[g.ID]; rs.GetLocked() || !available(st, g.ID) {
			// A locked replicaset neither sends nor receives; one without
			// a majority of its voters in service (stopped or stopping) keeps
			// what it has until they are back (available). Its target is what it holds
			// (no share of its own, all of it pinned), also when that is
			// below its weight's share: the others share the rest.
			g.Weight, g.Pinned = 0, g.Buckets
		}
	}
	p.Targets = sharding.Targets(p.Groups, int(st.Props.GetBucketCount()))
	for _, g := range p.Groups {
		d := sharding.Disbalance(g.Buckets, p.Targets[g.ID])
		p.Disbalance[g.ID] = d
		p.MaxDisbalance = math.Max(p.MaxDisbalance, d)
	}
	p.Routes = sharding.Routes(p.Groups, p.Targets)
	return p
}

// available reports whether a majority of a replicaset's voters are
// Online and meant to stay so: fewer cannot commit its moves' steps, so a
// move to or from it would only wait and abort.
//
// A voter, as group 0's grades tell it: a member Online (even one meant to
// stop), one that went Offline after it had joined (incarnation 1 or
// more), or one on its way back from such a stop (its grades carry the
// incarnation of its next start, 2 or more). A member on its way through
// its first start (Offline(0), or RaftSynced, Replicated or
// ShardingInitialized of incarnation 1: a replacement, a new replicaset's
// later instances) does not count against the majority: it is up, so it
// does not stand in the way of a quorum, and counting it held a new
// replicaset's first moves back until a second member was Online.
//
// An instance being expelled is counted until it is (GroupMembers): it may
// still be a voter of the group.
func available(st *meta.State, rsID string) bool {
	voters, online := 0, 0
	for _, m := range st.GroupMembers(rsID) {
		cur := m.GetCurrentGrade()
		if cur.GetVariant() == meta.Online && m.GetTargetGrade().GetVariant() == meta.Online {
			online++
		}
		if cur.GetVariant() == meta.Online || cur.GetVariant() == meta.Offline && cur.GetIncarnation() >= 1 || cur.GetIncarnation() >= 2 {
			voters++
		}
	}
	return online > 0 && online > voters/2
}

// rebalance starts moves when the largest disbalance exceeds the
// threshold, within the send and receive quotas.
func (m *Mover) rebalance(ctx context.Context) error {
	st := m.cfg.GroupZero.State()
	if !st.Props.GetBucketsBootstrapped() {
		return nil
	}
	threshold, maxSend, maxRecv, disabled := Settings(st.Props.GetRebalancer())
	if disabled {
		return nil
	}
	p := MakePlan(st)
	if len(p.Routes) == 0 {
		if m.balancing {
			m.log.Info("rebalancer: balanced", "targets", p.Targets)
		}
		m.balancing = false
		return nil
	}
	if p.MaxDisbalance <= threshold && !m.balancing {
		return nil
	}
	if !m.balancing {
		m.log.Info("rebalancer: disbalance over the threshold; moving buckets to the targets",
			"max_disbalance_percent", p.MaxDisbalance, "threshold_percent", threshold, "targets", p.Targets)
		m.balancing = true
	}
	taken := map[uint32]bool{}
	copying := map[string]int{} // by destination: moves not yet copied
	for b, mv := range st.Moves {
		taken[b] = true
		if p := mv.GetPhase(); p == metapb.Move_PHASE_PREPARE || p == metapb.Move_PHASE_COPY {
			copying[mv.GetTo()]++
		}
	}
	// One group-0 entry starts the round's moves (each refused or not on
	// its own); the drivers take them in batches by route.
	var steps []*metapb.Command
	var routes []sharding.Route
	for _, r := range p.Routes {
		room := min(r.Count, maxSend-p.Sending[r.From], maxRecv-p.Receiving[r.To], batchSize(maxSend, maxRecv))
		if w := m.receiveRoom(r.To, copying[r.To]); w >= 0 {
			room = min(room, w)
		}
		for b := uint32(1); room > 0 && int(b) <= len(st.Buckets); b++ {
			if st.Buckets[b-1] != r.From || taken[b] || st.Pinned[b] {
				continue
			}
			steps = append(steps, &metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{Bucket: b, To: r.To, Reason: "rebalance"}}})
			routes = append(routes, r)
			taken[b] = true
			room--
			p.Sending[r.From]++
			p.Receiving[r.To]++
			copying[r.To]++
		}
	}
	if len(steps) == 0 {
		return nil
	}
	res, err := m.cfg.GroupZero.Propose(ctx, &metapb.Command{Op: &metapb.Command_MoveSteps{MoveSteps: &metapb.MoveSteps{Steps: steps}}})
	if err != nil {
		return fmt.Errorf("start moving %s: %w", meta.Count(len(steps), "bucket"), err)
	}
	started := 0
	for i, r := range res.Steps {
		b := steps[i].GetStartMove().GetBucket()
		if r.Err != nil {
			m.log.Debug("rebalancer: a move was not started", "bucket", b, "from", routes[i].From, "to", routes[i].To, "why", r.Err)
			continue
		}
		started++
		m.log.Debug("rebalancer: moving a bucket", "bucket", b, "from", routes[i].From, "to", routes[i].To, "generation", r.Move.GetGeneration())
	}
	m.log.Debug("rebalancer: moving buckets", "started", started, "max_disbalance_percent", p.MaxDisbalance, "routes", fmt.Sprint(p.Routes))
	return nil
}

// refusedError: a replicaset refused a step (its record does not allow it).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func isRefused(err error) bool {
	var r *refusedError
	return errors.As(err, &r)
}

// onLeader runs call on a replicaset's leader: the one group 0 recorded,
// then whoever a redirect names, then every member.
func (m *Mover) onLeader(ctx context.Context, rsID string, call func(context.Context, rspb.BucketServiceClient) error) error {
	st := m.cfg.GroupZero.State()
	var addrs []string
	if rs := st.Replicasets[rsID]; rs != nil {
		if l := st.Instance(rs.GetLeaderInstanceId()); l != nil {
			addrs = append(addrs, l.GetAddress())
		}
	}
	for _, mem := range st.Members(rsID) {
		addrs = append(addrs, mem.GetAddress())
	}
	return rsclient.OnLeader(ctx, m.cfg.Dial, rsID, addrs, call)
}
