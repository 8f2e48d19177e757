package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/client"
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
	client *client.Client
	owned  bool // Close closes client
	leases client.Leases
	name   string

	mu      sync.Mutex
	holders map[uint64]string // ticket -> cluster holder string, for this process's grants
}

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
	return NewShardkitWithCredentials(addr, nil)
}

// NewShardkitWithCredentials is NewShardkit for a cluster run with
// --certs-dir: creds (client.LoadCredentials) secure the connections; nil
// is plaintext. The user needs the writer role (leases).
func NewShardkitWithCredentials(addr string, creds credentials.TransportCredentials) (*ShardkitCoordinator, error) {
	addrs, name, err := ParseShardkitAddr(addr)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(context.Background(), client.Config{Peers: addrs, Timeout: callTimeout, Credentials: creds})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c := NewShardkitClient(cl, name)
	c.owned = true
	return c, nil
}

// NewShardkitClient keeps the lock and the record in the lease named name
// of the cluster that cl talks to; the caller keeps owning cl (Close does
// not close it).
func NewShardkitClient(cl *client.Client, name string) *ShardkitCoordinator {
	return &ShardkitCoordinator{client: cl, leases: cl.Leases(), name: name, holders: map[uint64]string{}}
}

// callTimeout bounds one call on one cluster instance.
const callTimeout = 15 * time.Second

// Close closes the client if NewShardkit made it.
func (c *ShardkitCoordinator) Close() error {
	if c.owned {
		return c.client.Close()
	}
	return nil
}

// callErr maps the client's errors to the coordinator's.
func callErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
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

func leaseOf(l client.Lease) Lease {
	return Lease{Holder: masterOf(l.Holder), Ticket: l.Ticket, Acquired: l.Granted, Expires: l.Expires}
}

// Acquire implements Coordinator.
func (c *ShardkitCoordinator) Acquire(ctx context.Context, holder string, timeout time.Duration) (Lease, error) {
	if holder == "" || timeout <= 0 {
		return Lease{}, fmt.Errorf("%w: acquire needs a holder and a positive timeout (got %q, %v)", ErrInvalid, holder, timeout)
	}
	h := newHolder(holder)
	l, granted, err := c.leases.Acquire(ctx, c.name, h, timeout)
	if err != nil {
		return Lease{}, callErr(err)
	}
	if !granted {
		return Lease{}, fmt.Errorf("%w: %s holds it (ticket %d) until %s", ErrLocked, masterOf(l.Holder), l.Ticket,
			l.Expires.Format(time.RFC3339))
	}
	st, err := decodeState(l.Value)
	if err != nil {
		return Lease{}, err
	}
	c.mu.Lock()
	c.holders[l.Ticket] = h
	c.mu.Unlock()
	out := leaseOf(l)
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
	l, renewed, err := c.leases.Renew(ctx, c.name, h, ticket, timeout)
	if err != nil {
		return Lease{}, callErr(err)
	}
	if !renewed {
		return Lease{}, fmt.Errorf("%w: ticket %d is no longer the lock's (now ticket %d of %s)", ErrStale, ticket,
			l.Ticket, masterOf(l.Holder))
	}
	return leaseOf(l), nil
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
	next := cur.State
	var released bool
	if r.OK {
		next = State{Location: r.Location, Version: r.Version, Master: masterOf(h), Ticket: ticket, Updated: time.Now().UTC()}
		v, merr := json.Marshal(next)
		if merr != nil {
			return State{}, merr
		}
		// The client checks a release whose answer was lost against the
		// lease, so an applied release is reported as one.
		released, err = c.leases.ReleaseWithValue(ctx, c.name, h, ticket, v)
	} else {
		released, err = c.leases.Release(ctx, c.name, h, ticket)
	}
	if err != nil {
		return State{}, callErr(err)
	}
	if !released {
		return State{}, fmt.Errorf("%w: ticket %d is no longer the lock's, or it timed out; the report is refused", ErrStale, ticket)
	}
	c.mu.Lock()
	delete(c.holders, ticket)
	c.mu.Unlock()
	return next, nil
}

// Status implements Coordinator.
func (c *ShardkitCoordinator) Status(ctx context.Context) (Status, error) {
	l, _, err := c.leases.Get(ctx, c.name)
	if errors.Is(err, client.ErrNotFound) {
		return Status{}, nil // never acquired: the empty record
	}
	if err != nil {
		return Status{}, callErr(err)
	}
	st, err := decodeState(l.Value)
	if err != nil {
		return Status{}, err
	}
	out := Status{State: st, LastTicket: l.Ticket}
	if l.Holder != "" {
		lk := leaseOf(l)
		out.Lock = &lk
	}
	return out, nil
}

// ForceUnlock implements Coordinator: it releases the lease as its
// current holder (the cluster checks holder and ticket only), so the
// holder's later renewals and its release with the state are refused.
func (c *ShardkitCoordinator) ForceUnlock(ctx context.Context) (*Lease, error) {
	for range 3 {
		l, _, err := c.leases.Get(ctx, c.name)
		if errors.Is(err, client.ErrNotFound) {
			return nil, nil // never acquired
		}
		if err != nil {
			return nil, callErr(err)
		}
		if l.Holder == "" {
			return nil, nil
		}
		released, err := c.leases.Release(ctx, c.name, l.Holder, l.Ticket)
		if err != nil {
			return nil, callErr(err)
		}
		if released {
			out := leaseOf(l)
			return &out, nil
		}
		// Taken over or released between the read and the release: look again.
	}
	return nil, fmt.Errorf("%w: the lease %s changed holders three times while it was being dropped; try again", ErrUnavailable, c.name)
}

var _ Coordinator = (*ShardkitCoordinator)(nil)
