package client

import (
	"bytes"
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// Lease is a named lease with a fencing ticket, kept in the cluster's
// group 0. Times are the group-0 leader's clock as written in its log.
type Lease struct {
	Name string
	// Holder is "" when nobody holds it (released, or never granted).
	Holder string
	// Ticket grows by one with every new grant of the name: a holder
	// passes it along with what it writes, and a store that has seen a
	// higher ticket refuses the write (fencing).
	Ticket  uint64
	Granted time.Time
	Expires time.Time
	// Value is kept across holders; only a holder releasing with
	// ReleaseWithValue while its ticket is current changes it.
	Value []byte
}

func leaseOf(l *clusterv1.Lease) Lease {
	if l == nil {
		return Lease{}
	}
	return Lease{
		Name: l.GetName(), Holder: l.GetHolder(), Ticket: l.GetTicket(),
		Granted: time.UnixMilli(l.GetGrantedUnixMs()).UTC(), Expires: time.UnixMilli(l.GetExpiresUnixMs()).UTC(),
		Value: l.GetValue(),
	}
}

// Leases is the area of lease calls; get it with Client.Leases.
type Leases struct{ c *Client }

// Leases returns the lease calls of the client.
func (c *Client) Leases() Leases { return Leases{c: c} }

// Acquire asks for the lease name for holder, for ttl. It is granted when
// free, expired or already holder's (then with the same ticket and a new
// expiry); otherwise granted is false and the lease is the current
// holder's. Asking again with the same holder is safe, so an attempt whose
// outcome is unknown is repeated.
func (l Leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease Lease, granted bool, err error) {
	var resp *clusterv1.AcquireLeaseResponse
	err = l.c.invoke(ctx, "acquire lease", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).AcquireLease(ctx, &clusterv1.AcquireLeaseRequest{Name: name, Holder: holder, TtlMs: ttl.Milliseconds()}, opts...)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	return leaseOf(resp.GetLease()), resp.GetGranted(), nil
}

// Renew extends a held lease while holder still holds it with ticket;
// renewed is false when it does not (then lease is the current one).
func (l Leases) Renew(ctx context.Context, name, holder string, ticket uint64, ttl time.Duration) (lease Lease, renewed bool, err error) {
	var resp *clusterv1.RenewLeaseResponse
	err = l.c.invoke(ctx, "renew lease", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).RenewLease(ctx, &clusterv1.RenewLeaseRequest{Name: name, Holder: holder, Ticket: ticket, TtlMs: ttl.Milliseconds()}, opts...)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	return leaseOf(resp.GetLease()), resp.GetRenewed(), nil
}

// Release gives the lease up; released is false when holder did not hold
// it with ticket (it had been taken over, or released already).
func (l Leases) Release(ctx context.Context, name, holder string, ticket uint64) (released bool, err error) {
	return l.release(ctx, &clusterv1.ReleaseLeaseRequest{Name: name, Holder: holder, Ticket: ticket})
}

// ReleaseWithValue releases the lease and stores value in it, in one
// fenced step: only while holder holds it with ticket and it has not
// expired. released is false when it did not happen.
func (l Leases) ReleaseWithValue(ctx context.Context, name, holder string, ticket uint64, value []byte) (released bool, err error) {
	return l.release(ctx, &clusterv1.ReleaseLeaseRequest{Name: name, Holder: holder, Ticket: ticket, SetValue: true, Value: value})
}

// release is not idempotent (a second release of the same ticket is
// refused), so an attempt that did not answer in time is repeated and a
// refusal after it is checked against the lease: if the lease shows the
// release applied, it was.
func (l Leases) release(ctx context.Context, req *clusterv1.ReleaseLeaseRequest) (bool, error) {
	var resp *clusterv1.ReleaseLeaseResponse
	unknown := false
	err := l.c.invoke(ctx, "release lease", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).ReleaseLease(ctx, req, opts...)
		if c := status.Code(err); c == codes.DeadlineExceeded || c == codes.Canceled {
			unknown = true
		}
		return err
	})
	if err == nil && resp.GetReleased() {
		return true, nil
	}
	if unknown || errors.Is(err, ErrUnavailable) {
		if cur, _, gerr := l.Get(ctx, req.GetName()); gerr == nil && releasedBy(cur, req) {
			return true, nil
		}
	}
	return false, err
}

// releasedBy reports whether the lease shows req applied: the ticket is
// still the last one granted, nobody holds it (only a release by its
// holder clears it), and the value is the one req set.
func releasedBy(cur Lease, req *clusterv1.ReleaseLeaseRequest) bool {
	return cur.Ticket == req.GetTicket() && cur.Holder == "" && (!req.GetSetValue() || bytes.Equal(cur.Value, req.GetValue()))
}

// Get reads the lease linearizably from the group-0 leader; held says
// whether it is held now by the leader's clock. A name never acquired is
// ErrNotFound.
func (l Leases) Get(ctx context.Context, name string) (lease Lease, held bool, err error) {
	var resp *clusterv1.GetLeaseResponse
	err = l.c.invoke(ctx, "get lease", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).GetLease(ctx, &clusterv1.GetLeaseRequest{Name: name}, opts...)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	return leaseOf(resp.GetLease()), resp.GetHeld(), nil
}
