package coordinator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// ShardkitCoordinator keeps the write lock and the state record in a
// shardkit cluster's group 0, as one lease with a fencing ticket:
//
//   - the lock is the lease: a master acquires it for --lock-timeout, and
//     the cluster grants it only when it is free or expired, with a ticket
//     one above the last;
//   - the state record is the lease's value, written only by a release
//     that carries the current, unexpired ticket (a fenced write), so a
//     holder that timed out can never record its state;
//   - expiry is judged by the cluster leader's clock as written in its log,
//     never by the masters' clocks.
//
// Each Acquire uses a holder string of the master's name and a random
// suffix, so a second run of the same master does not pass for the first.
type ShardkitCoordinator struct {
	conns []*grpc.ClientConn
	addrs []string
	name  string

	mu      sync.Mutex
	holders map[uint64]string // ticket -> cluster holder string, for this process's grants
}

// errNoLease: the cluster has no lease of that name yet.
var errNoLease = errors.New("coordinator: no such lease in the cluster")

// DefaultShardkitLease is the lease used when the address names none.
const DefaultShardkitLease = "numerator/coordinator"

// ParseShardkitAddr splits "host:port,host:port/lease/name" into instance
// addresses and the lease name (DefaultShardkitLease when absent).
func ParseShardkitAddr(addr string) ([]string, string, error) {
	hosts, name := addr, DefaultShardkitLease
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		hosts, name = addr[:i], strings.Trim(addr[i+1:], "/")
	}
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	if len(out) == 0 || name == "" {
		return nil, "", fmt.Errorf("%w: shardkit address %q: want host:port[,host:port...][/lease-name]", ErrInvalid, addr)
	}
	return out, name, nil
}

// NewShardkit connects to the cluster instances at addr (see
// ParseShardkitAddr); any instance will do, calls are forwarded to the
// leader of group 0.
func NewShardkit(addr string) (*ShardkitCoordinator, error) {
	addrs, name, err := ParseShardkitAddr(addr)
	if err != nil {
		return nil, err
	}
	c := &ShardkitCoordinator{addrs: addrs, name: name, holders: map[uint64]string{}}
	for _, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, a, err)
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// Close closes the connections.
func (c *ShardkitCoordinator) Close() error {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	return nil
}

// call runs f against each instance in turn until one answers with
// something other than "unavailable".
func (c *ShardkitCoordinator) call(ctx context.Context, f func(context.Context, clusterv1.ClusterServiceClient) error) error {
	var last error
	for i, conn := range c.conns {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := f(cctx, clusterv1.NewClusterServiceClient(conn))
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded:
			last = fmt.Errorf("%s: %w", c.addrs[i], err)
			continue
		case codes.InvalidArgument:
			return fmt.Errorf("%w: %s", ErrInvalid, status.Convert(err).Message())
		case codes.NotFound:
			return fmt.Errorf("%w: %s", errNoLease, status.Convert(err).Message())
		}
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, c.addrs[i], status.Convert(err).Message())
	}
	return fmt.Errorf("%w: no cluster instance answered: %w", ErrUnavailable, last)
}

func newHolder(master string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return master + "#" + hex.EncodeToString(b[:])
}

// masterOf returns the master's name from a cluster holder string.
func masterOf(holder string) string {
	if i := strings.LastIndexByte(holder, '#'); i >= 0 {
		return holder[:i]
	}
	return holder
}

func decodeState(v []byte) (State, error) {
	var st State
	if len(v) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(v, &st); err != nil {
		return st, fmt.Errorf("%w: state record in the lease: %w", ErrCorrupt, err)
	}
	return st, nil
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func leaseOf(l *clusterv1.Lease) Lease {
	return Lease{Holder: masterOf(l.GetHolder()), Ticket: l.GetTicket(),
		Acquired: msTime(l.GetGrantedUnixMs()), Expires: msTime(l.GetExpiresUnixMs())}
}

// Acquire implements Coordinator.
func (c *ShardkitCoordinator) Acquire(ctx context.Context, holder string, timeout time.Duration) (Lease, error) {
	if holder == "" || timeout <= 0 {
		return Lease{}, fmt.Errorf("%w: acquire needs a holder and a positive timeout (got %q, %v)", ErrInvalid, holder, timeout)
	}
	h := newHolder(holder)
	var resp *clusterv1.AcquireLeaseResponse
	err := c.call(ctx, func(ctx context.Context, cl clusterv1.ClusterServiceClient) error {
		var err error
		resp, err = cl.AcquireLease(ctx, &clusterv1.AcquireLeaseRequest{Name: c.name, Holder: h, TtlMs: timeout.Milliseconds()})
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	if !resp.GetGranted() {
		l := resp.GetLease()
		return Lease{}, fmt.Errorf("%w: %s holds it (ticket %d) until %s", ErrLocked, masterOf(l.GetHolder()), l.GetTicket(),
			msTime(l.GetExpiresUnixMs()).Format(time.RFC3339))
	}
	st, err := decodeState(resp.GetLease().GetValue())
	if err != nil {
		return Lease{}, err
	}
	c.mu.Lock()
	c.holders[resp.GetLease().GetTicket()] = h
	c.mu.Unlock()
	out := leaseOf(resp.GetLease())
	out.State = st
	return out, nil
}

func (c *ShardkitCoordinator) holderOf(ticket uint64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.holders[ticket]
	if !ok {
		return "", fmt.Errorf("%w: ticket %d was not granted to this master", ErrStale, ticket)
	}
	return h, nil
}

// Renew implements Coordinator.
func (c *ShardkitCoordinator) Renew(ctx context.Context, ticket uint64, timeout time.Duration) (Lease, error) {
	if timeout <= 0 {
		return Lease{}, fmt.Errorf("%w: renew needs a positive timeout", ErrInvalid)
	}
	h, err := c.holderOf(ticket)
	if err != nil {
		return Lease{}, err
	}
	var resp *clusterv1.RenewLeaseResponse
	err = c.call(ctx, func(ctx context.Context, cl clusterv1.ClusterServiceClient) error {
		var err error
		resp, err = cl.RenewLease(ctx, &clusterv1.RenewLeaseRequest{Name: c.name, Holder: h, Ticket: ticket, TtlMs: timeout.Milliseconds()})
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	if !resp.GetRenewed() {
		return Lease{}, fmt.Errorf("%w: ticket %d is no longer the lock's (now ticket %d of %s)", ErrStale, ticket,
			resp.GetLease().GetTicket(), masterOf(resp.GetLease().GetHolder()))
	}
	return leaseOf(resp.GetLease()), nil
}

// Report implements Coordinator: a release that, for a successful run,
// also records the new state, in one fenced step.
func (c *ShardkitCoordinator) Report(ctx context.Context, ticket uint64, r Report) (State, error) {
	if r.OK && r.Location == "" {
		return State{}, fmt.Errorf("%w: a successful report needs the new state's location", ErrInvalid)
	}
	h, err := c.holderOf(ticket)
	if err != nil {
		return State{}, err
	}
	// The record to write, and the one kept when the run failed.
	cur, err := c.Status(ctx)
	if err != nil {
		return State{}, err
	}
	req := &clusterv1.ReleaseLeaseRequest{Name: c.name, Holder: h, Ticket: ticket}
	next := cur.State
	if r.OK {
		next = State{Location: r.Location, Version: r.Version, Master: masterOf(h), Ticket: ticket, Updated: time.Now().UTC()}
		v, err := json.Marshal(next)
		if err != nil {
			return State{}, err
		}
		req.SetValue, req.Value = true, v
	}
	var resp *clusterv1.ReleaseLeaseResponse
	err = c.call(ctx, func(ctx context.Context, cl clusterv1.ClusterServiceClient) error {
		var err error
		resp, err = cl.ReleaseLease(ctx, req)
		return err
	})
	if err == nil && !resp.GetReleased() {
		err = fmt.Errorf("%w: ticket %d is no longer the lock's, or it timed out; the report is refused", ErrStale, ticket)
	}
	// A refusal or no answer may follow a release that was applied: call
	// retries on the next instance after a DeadlineExceeded, and that
	// retry is refused because the first one released the lock. The
	// lease then says so.
	if err != nil && (errors.Is(err, ErrStale) || errors.Is(err, ErrUnavailable)) && c.releasedBy(ctx, req) {
		err = nil
	}
	if err != nil {
		return State{}, err
	}
	c.mu.Lock()
	delete(c.holders, ticket)
	c.mu.Unlock()
	return next, nil
}

// releasedBy reports whether the cluster's lease shows req applied: the
// ticket is still the last one granted, nobody holds it (only a release by
// its holder clears it) and the value is the one req set.
func (c *ShardkitCoordinator) releasedBy(ctx context.Context, req *clusterv1.ReleaseLeaseRequest) bool {
	var resp *clusterv1.GetLeaseResponse
	err := c.call(ctx, func(ctx context.Context, cl clusterv1.ClusterServiceClient) error {
		var err error
		resp, err = cl.GetLease(ctx, &clusterv1.GetLeaseRequest{Name: req.GetName()})
		return err
	})
	if err != nil {
		return false
	}
	l := resp.GetLease()
	return l.GetTicket() == req.GetTicket() && l.GetHolder() == "" &&
		(!req.GetSetValue() || bytes.Equal(l.GetValue(), req.GetValue()))
}

// Status implements Coordinator.
func (c *ShardkitCoordinator) Status(ctx context.Context) (Status, error) {
	var resp *clusterv1.GetLeaseResponse
	err := c.call(ctx, func(ctx context.Context, cl clusterv1.ClusterServiceClient) error {
		var err error
		resp, err = cl.GetLease(ctx, &clusterv1.GetLeaseRequest{Name: c.name})
		return err
	})
	if errors.Is(err, errNoLease) {
		return Status{}, nil // never acquired: the empty record
	}
	if err != nil {
		return Status{}, err
	}
	l := resp.GetLease()
	st, err := decodeState(l.GetValue())
	if err != nil {
		return Status{}, err
	}
	out := Status{State: st, LastTicket: l.GetTicket()}
	if l.GetHolder() != "" {
		lk := leaseOf(l)
		out.Lock = &lk
	}
	return out, nil
}

var _ Coordinator = (*ShardkitCoordinator)(nil)
