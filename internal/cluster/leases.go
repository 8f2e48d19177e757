package cluster

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// Leases with fencing tickets live in group 0 (see internal/meta): every
// call goes to the leader, which stamps it with its clock; expiry is judged
// by that leader-stamped time as written in the log.

// AcquireLease implements clusterv1.ClusterServiceServer.
func (s *Service) AcquireLease(ctx context.Context, req *clusterv1.AcquireLeaseRequest) (*clusterv1.AcquireLeaseResponse, error) {
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_AcquireLease{AcquireLease: &metapb.AcquireLease{
		Name: req.GetName(), Holder: req.GetHolder(), TtlMs: req.GetTtlMs()}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.AcquireLeaseResponse{Granted: res.Granted, Lease: apiLease(res.Lease)}, nil
}

// RenewLease implements clusterv1.ClusterServiceServer.
func (s *Service) RenewLease(ctx context.Context, req *clusterv1.RenewLeaseRequest) (*clusterv1.RenewLeaseResponse, error) {
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_RenewLease{RenewLease: &metapb.RenewLease{
		Name: req.GetName(), Holder: req.GetHolder(), Ticket: req.GetTicket(), TtlMs: req.GetTtlMs()}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.RenewLeaseResponse{Renewed: res.Granted, Lease: apiLease(res.Lease)}, nil
}

// ReleaseLease implements clusterv1.ClusterServiceServer.
func (s *Service) ReleaseLease(ctx context.Context, req *clusterv1.ReleaseLeaseRequest) (*clusterv1.ReleaseLeaseResponse, error) {
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_ReleaseLease{ReleaseLease: &metapb.ReleaseLease{
		Name: req.GetName(), Holder: req.GetHolder(), Ticket: req.GetTicket(),
		SetValue: req.GetSetValue(), Value: req.GetValue()}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.ReleaseLeaseResponse{Released: res.Granted}, nil
}

// GetLease implements clusterv1.ClusterServiceServer: a linearizable read on the leader.
func (s *Service) GetLease(ctx context.Context, req *clusterv1.GetLeaseRequest) (*clusterv1.GetLeaseResponse, error) {
	n := s.n
	if err := n.g0.Load().ReadIndex(ctx); err != nil {
		return nil, StatusError(err)
	}
	l := n.meta.State().Leases[req.GetName()]
	if l == nil {
		return nil, status.Errorf(codes.NotFound, "no lease %q", req.GetName())
	}
	// The leader's clock, never behind the log's.
	now := max(n.clock.Now().UnixMilli(), n.meta.State().Clock)
	return &clusterv1.GetLeaseResponse{Lease: apiLease(l), Held: meta.LeaseHeld(l, now)}, nil
}
