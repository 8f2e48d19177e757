package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// RoutingRefresh is how old the client's routing table may grow before a
// call refreshes it; a redirect refreshes it at once.
const RoutingRefresh = 30 * time.Second

// routing is the client's copy of the cluster's routing table.
type routing struct {
	fetched     time.Time
	readFrom    time.Time // when its read began (refresh)
	bucketCount uint32
	buckets     []string // buckets[b] is bucket b's replicaset ("" unknown)
	leaders     map[string]string
	members     map[string][]*datav1.Member
	spaces      map[string]*schema.Space
	schema      uint64
}

func newRouting(r *datav1.GetRoutingResponse) *routing {
	rt := &routing{
		fetched:     time.Now(),
		bucketCount: r.GetBucketCount(),
		buckets:     make([]string, r.GetBucketCount()+1),
		leaders:     map[string]string{},
		members:     map[string][]*datav1.Member{},
		spaces:      map[string]*schema.Space{},
		schema:      r.GetSchemaVersion(),
	}
	for _, br := range r.GetBuckets() {
		for b := br.GetFirst(); b <= br.GetLast() && b <= rt.bucketCount; b++ {
			rt.buckets[b] = br.GetReplicasetId()
		}
	}
	for _, rs := range r.GetReplicasets() {
		rt.leaders[rs.GetReplicasetId()] = rs.GetLeaderAddress()
		rt.members[rs.GetReplicasetId()] = rs.GetMembers()
	}
	for _, sp := range r.GetSpaces() {
		// A space this client cannot compile (a newer server's type) is
		// left out: a call naming it is refused as naming no space.
		if s, err := schema.CompileAPI(sp); err == nil {
			rt.spaces[sp.GetName()] = s
		}
	}
	return rt
}

// router is the client's routing state.
type router struct {
	mu sync.Mutex
	rt *routing
	// flight is the routing read under way, if any (refresh).
	flight *routingFlight
	// unreachable are the instances a data call found unreachable:
	// addressFor passes them over (retry.Unreachable).
	unreachable retry.Unreachable
}

// routingFlight is one read of the routing table, shared by the callers of
// refresh that it is fresh enough for.
type routingFlight struct {
	started time.Time
	joined  int           // callers that waited for it, its owner aside (under router.mu; for tests)
	done    chan struct{} // closed when rt, err and abandoned are set
	rt      *routing
	err     error
	// abandoned: the read ended because its owner's context did, which
	// says nothing of the cluster: the callers waiting for it read again.
	abandoned bool
}

func (c *Client) table() *routing {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	return c.rt.rt
}

// refresh returns a routing table read from an instance after refresh was
// called (a caller refreshes because of something it has just seen, such
// as a redirect: an older read may not show it). Concurrent callers share
// one read: during a mass move every call to a moving bucket refreshes,
// and each read costs the instance a table of every bucket. A caller that
// finds a read under way that began before it waits for that one to end
// and shares (or starts) the next.
func (c *Client) refresh(ctx context.Context) (*routing, error) {
	asked := time.Now()
	for {
		c.rt.mu.Lock()
		if rt := c.rt.rt; rt != nil && !rt.readFrom.Before(asked) {
			c.rt.mu.Unlock() // read by a flight that began after this call, and ended
			return rt, nil
		}
		f := c.rt.flight
		if f == nil {
			f = &routingFlight{started: time.Now(), done: make(chan struct{})}
			c.rt.flight = f
			c.rt.mu.Unlock()
			f.rt, f.err = c.readRouting(ctx)
			f.abandoned = f.err != nil && ctx.Err() != nil
			c.rt.mu.Lock()
			if f.err == nil {
				f.rt.readFrom = f.started
				c.rt.rt = f.rt
			}
			c.rt.flight = nil
			c.rt.mu.Unlock()
			close(f.done)
			return f.rt, f.err
		}
		f.joined++
		c.rt.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, newError("get routing", "", ctx.Err(), true)
		}
		// A read that began before this call, or that its owner gave up,
		// is not this caller's answer.
		if !f.started.Before(asked) && !f.abandoned {
			return f.rt, f.err
		}
	}
}

// readRouting reads the routing table from any instance.
func (c *Client) readRouting(ctx context.Context) (*routing, error) {
	var resp *datav1.GetRoutingResponse
	err := c.invoke(ctx, "get routing", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).GetRouting(ctx, &datav1.GetRoutingRequest{}, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return newRouting(resp), nil
}

// routingFor returns a routing table no older than RoutingRefresh (nil
// when none can be had: the call then goes through any instance).
func (c *Client) routingFor(ctx context.Context) *routing {
	if rt := c.table(); rt != nil && time.Since(rt.fetched) < RoutingRefresh {
		return rt
	}
	rt, err := c.refresh(ctx)
	if err != nil {
		return c.table()
	}
	return rt
}

// learnLeader records a replicaset's leader named by a redirect.
func (c *Client) learnLeader(rs, addr string) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if c.rt.rt != nil && rs != "" {
		c.rt.rt.leaders[rs] = addr
	}
}

// space returns a space's definition, refreshing the table once when the
// name is unknown.
func (c *Client) space(ctx context.Context, name string) (*schema.Space, *routing, error) {
	rt := c.routingFor(ctx)
	if rt != nil {
		if sp := rt.spaces[name]; sp != nil {
			return sp, rt, nil
		}
	}
	rt, err := c.refresh(ctx)
	if err != nil {
		return nil, nil, err
	}
	if sp := rt.spaces[name]; sp != nil {
		return sp, rt, nil
	}
	return nil, rt, &Error{Op: "space " + name, Msg: "no space \"" + name + "\" (shardkit space list shows the spaces)", kind: ErrNotFound}
}

// bucketOf returns the bucket of a key of sp.
func bucketOf(sp *schema.Space, key []tuple.Value, count uint32) (uint32, error) {
	b, err := sp.BucketOf(key, count)
	if err != nil {
		return 0, invalidf("space %s: %v", sp.Name(), err)
	}
	return b, nil
}

// keyOf returns a tuple's primary key.
func keyOf(sp *schema.Space, t tuple.Tuple) ([]tuple.Value, error) {
	key, err := sp.KeyOf(t)
	if err != nil {
		return nil, invalidf("space %s: %v", sp.Name(), err)
	}
	return key, nil
}

// addressFor returns where a call for bucket b goes: its replicaset's
// leader (rw) or the nearest member, a follower where one is as near
// (ro, sharding.Nearest); "" when the table does not say.
func (c *Client) addressFor(rt *routing, b uint32, rw bool) (string, string) {
	if rt == nil || b == 0 || int(b) >= len(rt.buckets) {
		return "", ""
	}
	rs := rt.buckets[b]
	if rs == "" {
		return "", ""
	}
	c.rt.mu.Lock()
	leader := rt.leaders[rs]
	members := rt.members[rs]
	c.rt.mu.Unlock()
	if rw && leader != "" && !c.rt.unreachable.Recent(leader) {
		return rs, leader
	}
	known := members
	if slices.ContainsFunc(members, noAddress) {
		known = slices.DeleteFunc(slices.Clone(members), noAddress)
	}
	isLeader := func(m *datav1.Member) bool { return m.GetAddress() == leader }
	isDown := func(m *datav1.Member) bool { return c.rt.unreachable.Recent(m.GetAddress()) }
	if m, ok := sharding.Nearest(c.cfg.FailureDomain, known, (*datav1.Member).GetFailureDomain, isLeader, isDown); ok {
		return rs, m.GetAddress()
	}
	return rs, leader
}

// noAddress tells a member the routing table knows no address of.
func noAddress(m *datav1.Member) bool { return m.GetAddress() == "" }
