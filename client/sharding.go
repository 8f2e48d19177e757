package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// Sharding is the area of the operator's calls on bucket placement; get it
// with Client.Sharding.
type Sharding struct{ c *Client }

// Sharding returns the client's bucket-placement calls.
func (c *Client) Sharding() Sharding { return Sharding{c: c} }

func (s Sharding) call(ctx context.Context, op string, idempotent bool, f func(context.Context, datav1.ShardingServiceClient, ...grpc.CallOption) error) error {
	return s.c.invoke(ctx, op, callOptions{idempotent: idempotent}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		return f(ctx, datav1.NewShardingServiceClient(conn), opts...)
	})
}

// Status returns the rebalancer's view: targets, actual counts, moves.
// An instance that cannot confirm its view of group 0 with the leader
// answers from its own view, marked Stale; Status then asks the Client's
// other instances, and returns a stale answer (the first) only when none
// of them gives a confirmed one.
func (s Sharding) Status(ctx context.Context) (*datav1.RebalanceStatusResponse, error) {
	var resp, stale *datav1.RebalanceStatusResponse
	err := s.call(ctx, "rebalance status", true, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		r, err := c.RebalanceStatus(ctx, &datav1.RebalanceStatusRequest{}, opts...)
		if err != nil {
			return err
		}
		if r.GetStale() {
			if stale == nil {
				stale = r
			}
			return status.Error(codes.Unavailable, r.GetStaleReason())
		}
		resp = r
		return nil
	})
	if resp == nil && stale != nil && IsRetryable(err) {
		return stale, nil // no instance confirmed: the best there is
	}
	return resp, err
}

// SetWeight sets a replicaset's weight (0 drains it).
func (s Sharding) SetWeight(ctx context.Context, replicaset string, weight uint32) error {
	return s.call(ctx, "set weight", true, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		_, err := c.SetWeight(ctx, &datav1.SetWeightRequest{ReplicasetId: replicaset, Weight: weight}, opts...)
		return err
	})
}

// SetLocked locks or unlocks a replicaset.
func (s Sharding) SetLocked(ctx context.Context, replicaset string, locked bool) error {
	return s.call(ctx, "lock replicaset", true, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		_, err := c.SetLocked(ctx, &datav1.SetLockedRequest{ReplicasetId: replicaset, Locked: locked}, opts...)
		return err
	})
}

// MoveBucket starts moving a bucket to a replicaset (not idempotent: a
// second start of the same move is refused while the first runs).
func (s Sharding) MoveBucket(ctx context.Context, bucket uint32, to string) (*datav1.MoveInfo, error) {
	var resp *datav1.MoveBucketResponse
	err := s.call(ctx, "move bucket", false, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.MoveBucket(ctx, &datav1.MoveBucketRequest{Bucket: bucket, To: to}, opts...)
		return err
	})
	return resp.GetMove(), err
}

// BucketReplicaset returns the replicaset that serves bucket now, as a
// routing table read from the cluster for this call says (a bucket in a
// move counts on its destination once switched, as routers send it).
func (s Sharding) BucketReplicaset(ctx context.Context, bucket uint32) (string, error) {
	rt, err := s.c.refresh(ctx)
	if err != nil {
		return "", err
	}
	if bucket < 1 || bucket > rt.bucketCount {
		return "", invalidf("bucket %d is outside [1, %d]", bucket, rt.bucketCount)
	}
	if rs := rt.buckets[bucket]; rs != "" {
		return rs, nil
	}
	return "", newError("bucket replicaset", "", status.Errorf(codes.Unavailable, "the routing table places bucket %d nowhere yet (buckets not bootstrapped?); retry", bucket), true)
}

// PinBucket pins or unpins a bucket.
func (s Sharding) PinBucket(ctx context.Context, bucket uint32, pinned bool) error {
	return s.call(ctx, "pin bucket", true, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		_, err := c.PinBucket(ctx, &datav1.PinBucketRequest{Bucket: bucket, Pinned: pinned}, opts...)
		return err
	})
}

// SetRebalancer changes the rebalancer's settings named in fields, by
// their names in RebalancerSettings ("disabled", "threshold_percent",
// "max_sending", "max_receiving", "copy_bytes_per_s", "copy_pace_off",
// "paused_by_reshard"), to their values in settings; the others keep
// theirs. Group 0 merges them as one command, so a change made meanwhile
// by someone else to another setting stands. With no fields, every
// setting is replaced by settings' (0 and false too): SetRebalancer(ctx,
// &RebalancerSettings{CopyBytesPerS: n}) alone would also turn a disabled
// rebalancer on. An instance of a build before the names takes settings
// whole even with fields: send the settings Status read with the named
// ones changed (as `shardkit rebalance config` does) where builds may
// differ.
func (s Sharding) SetRebalancer(ctx context.Context, settings *datav1.RebalancerSettings, fields ...string) error {
	return s.call(ctx, "set rebalancer", true, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		_, err := c.SetRebalancer(ctx, &datav1.SetRebalancerRequest{Settings: settings, Fields: fields}, opts...)
		return err
	})
}

// Reshard runs one step of the seed's procedure.
func (s Sharding) Reshard(ctx context.Context, step datav1.ReshardStep) (*datav1.ReshardResponse, error) {
	var resp *datav1.ReshardResponse
	err := s.call(ctx, "reshard", step == datav1.ReshardStep_RESHARD_STEP_PLAN, func(ctx context.Context, c datav1.ShardingServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.Reshard(ctx, &datav1.ReshardRequest{Step: step}, opts...)
		return err
	})
	return resp, err
}
