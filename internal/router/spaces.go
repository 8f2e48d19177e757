package router

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

// GetRouting implements DataService.
func (r *Router) GetRouting(context.Context, *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	t := r.cfg.GroupZero
	resp := &datav1.GetRoutingResponse{BucketCount: t.BucketCount(), Spaces: t.Spaces(), SchemaVersion: t.SchemaVersion(), ShardingVersion: t.ShardingVersion()}
	var cur *datav1.BucketRange
	for b := uint32(1); b <= t.BucketCount(); b++ {
		rs := t.ReplicasetOf(b)
		if cur != nil && cur.GetReplicasetId() == rs && rs != "" {
			cur.Last = b
			continue
		}
		if rs == "" {
			cur = nil
			continue
		}
		cur = &datav1.BucketRange{First: b, Last: b, ReplicasetId: rs}
		resp.Buckets = append(resp.Buckets, cur)
	}
	for _, rs := range t.Replicasets() {
		route := &datav1.ReplicasetRoute{ReplicasetId: rs.ID, LeaderAddress: rs.LeaderAddress, Weight: rs.Weight}
		r.mu.Lock()
		if addr := r.leaders[rs.ID]; addr != "" {
			route.LeaderAddress = addr
		}
		r.mu.Unlock()
		if l := r.local(); l != nil && l.ReplicasetID() == rs.ID && l.LeaderAddress() != "" {
			route.LeaderAddress = l.LeaderAddress()
		}
		for _, m := range rs.Members {
			route.Members = append(route.Members, &datav1.Member{InstanceId: m.InstanceID, Address: m.Address, FailureDomain: m.FailureDomain})
		}
		resp.Replicasets = append(resp.Replicasets, route)
	}
	return resp, nil
}

// ListSpaces implements DataService.
func (r *Router) ListSpaces(context.Context, *datav1.ListSpacesRequest) (*datav1.ListSpacesResponse, error) {
	return &datav1.ListSpacesResponse{Spaces: r.cfg.GroupZero.Spaces(), SchemaVersion: r.cfg.GroupZero.SchemaVersion()}, nil
}

// CreateSpace implements DataService (on the group-0 leader).
func (r *Router) CreateSpace(ctx context.Context, req *datav1.CreateSpaceRequest) (*datav1.CreateSpaceResponse, error) {
	if req.GetSpace() == nil {
		return nil, status.Error(codes.InvalidArgument, "no space to create")
	}
	sp, err := r.cfg.DDL.CreateSpace(ctx, req.GetSpace(), req.GetIfNotExists())
	if err != nil {
		return nil, err
	}
	return &datav1.CreateSpaceResponse{Space: sp}, nil
}

// DropSpace implements DataService (on the group-0 leader): without force
// it is refused while the space holds tuples (counted on every replicaset
// just before; a write racing the drop is dropped with it).
func (r *Router) DropSpace(ctx context.Context, req *datav1.DropSpaceRequest) (*datav1.DropSpaceResponse, error) {
	if _, ok := r.cfg.GroupZero.Space(req.GetName()); !ok {
		return nil, status.Errorf(codes.NotFound, "no space %q", req.GetName())
	}
	n, err := r.Count(ctx, req.GetName())
	if err != nil && !req.GetForce() {
		return nil, fmt.Errorf("cannot count the tuples of space %s before dropping it (--force drops it anyway): %w", req.GetName(), err)
	}
	if n > 0 && !req.GetForce() {
		noun := "tuples"
		if n == 1 {
			noun = "tuple"
		}
		return nil, status.Errorf(codes.FailedPrecondition, "space %s holds %d %s; delete them first, or drop it with them (--force)", req.GetName(), n, noun)
	}
	if err := r.cfg.DDL.DropSpace(ctx, req.GetName()); err != nil {
		return nil, err
	}
	return &datav1.DropSpaceResponse{Tuples: n}, nil
}

// Count returns the number of tuples of a space in the cluster, each
// bucket counted once (proc.CountCluster: the built-in count_buckets on
// every replicaset, summed, counted again while a bucket moved between
// two replicasets' counts).
func (r *Router) Count(ctx context.Context, space string) (uint64, error) {
	args := tuple.AppendTuple(nil, tuple.Tuple{tuple.String(space)})
	n, err := proc.CountCluster(ctx, r.cfg.GroupZero.BucketCount(), func(ctx context.Context) ([]tuple.Tuple, error) {
		resp, err := r.MapCall(ctx, &datav1.MapCallRequest{Procedure: "count_buckets", Args: args, Mode: datav1.Mode_MODE_RW})
		if err != nil {
			return nil, err
		}
		results := make([]tuple.Tuple, 0, len(resp.GetResults()))
		var failed []string
		for _, res := range resp.GetResults() {
			if res.GetError() != "" {
				failed = append(failed, res.GetReplicasetId()+": "+res.GetError())
				continue
			}
			t, err := tuple.DecodeTuple(res.GetResult())
			if err != nil {
				failed = append(failed, res.GetReplicasetId()+": a bad count result: "+err.Error())
				continue
			}
			results = append(results, t)
		}
		if len(failed) > 0 {
			slices.Sort(failed)
			return nil, status.Errorf(codes.Unavailable, "counting failed on %d replicasets: %v", len(failed), failed)
		}
		return results, nil
	})
	switch {
	case errors.Is(err, proc.ErrCountInFlux):
		return 0, status.Errorf(codes.Unavailable, "count %s: %v", space, err)
	case errors.Is(err, proc.ErrBadCount):
		return 0, status.Errorf(codes.Internal, "count %s: %v", space, err)
	}
	return n, err
}
