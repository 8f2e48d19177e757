package client

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

func clusterService(conn *grpc.ClientConn) clusterv1.ClusterServiceClient {
	return clusterv1.NewClusterServiceClient(conn)
}

// Status returns the cluster as an instance sees it after catching up with
// the group-0 leader (ClusterService.GetStatus). all includes expelled
// instances and replicasets.
func (c *Client) Status(ctx context.Context, all bool) (*clusterv1.GetStatusResponse, error) {
	var resp *clusterv1.GetStatusResponse
	err := c.invoke(ctx, "status", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).GetStatus(ctx, &clusterv1.GetStatusRequest{All: all}, opts...)
		return err
	})
	return resp, err
}

// StatusOf returns the status as the instance at addr sees it, without
// trying another (the demo and tests look at each instance in turn).
func (c *Client) StatusOf(ctx context.Context, addr string, all bool) (*clusterv1.GetStatusResponse, error) {
	conn, err := c.Conn(addr)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := clusterService(conn).GetStatus(actx, &clusterv1.GetStatusRequest{All: all})
	if err != nil {
		return nil, newError("status", addr, err, true)
	}
	return resp, nil
}

// ExpelOptions tune Expel.
type ExpelOptions struct {
	// Force expels an instance that is not Offline.
	Force bool
	// Wait is how long the cluster waits for the current grade Expelled
	// (the cluster's default, 60s, when zero).
	Wait time.Duration
	// LoseBuckets expels even the last instance of a replicaset that holds
	// buckets, giving up their data (ExpelResult says how many). Without
	// it such an expel is refused (ErrRefused).
	LoseBuckets bool
}

// expelMargin is added to ExpelOptions.Wait for each attempt's deadline,
// so that the cluster's own "not confirmed in time" answer arrives first.
const expelMargin = 10 * time.Second

// Expel sets an instance's target grade Expelled and returns its record
// once its current grade is Expelled (K14). It is idempotent.
func (c *Client) Expel(ctx context.Context, instanceID string, o ExpelOptions) (*clusterv1.Instance, error) {
	resp, err := c.ExpelResult(ctx, instanceID, o)
	return resp.GetInstance(), err
}

// ExpelResult is Expel with the whole answer: the instance's record and,
// with LoseBuckets, the buckets whose data the expel gave up.
func (c *Client) ExpelResult(ctx context.Context, instanceID string, o ExpelOptions) (*clusterv1.ExpelResponse, error) {
	wait := o.Wait
	if wait <= 0 {
		wait = 60 * time.Second
	}
	req := &clusterv1.ExpelRequest{InstanceId: instanceID, Force: o.Force, TimeoutMs: wait.Milliseconds(), LoseBuckets: o.LoseBuckets}
	var resp *clusterv1.ExpelResponse
	err := c.invoke(ctx, "expel", callOptions{idempotent: true, timeout: wait + expelMargin}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).Expel(ctx, req, opts...)
		return err
	})
	return resp, err
}

// GradeName returns a grade variant's name as users see it (Offline,
// RaftSynced, Replicated, ShardingInitialized, Online, Expelled; Unknown
// for any other value).
func GradeName(v clusterv1.GradeVariant) string {
	switch v {
	case clusterv1.GradeVariant_GRADE_VARIANT_OFFLINE:
		return "Offline"
	case clusterv1.GradeVariant_GRADE_VARIANT_RAFT_SYNCED:
		return "RaftSynced"
	case clusterv1.GradeVariant_GRADE_VARIANT_REPLICATED:
		return "Replicated"
	case clusterv1.GradeVariant_GRADE_VARIANT_SHARDING_INITIALIZED:
		return "ShardingInitialized"
	case clusterv1.GradeVariant_GRADE_VARIANT_ONLINE:
		return "Online"
	case clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED:
		return "Expelled"
	}
	return "Unknown"
}

// FormatGrade renders a grade as Variant(incarnation), e.g. Online(2).
func FormatGrade(g *clusterv1.Grade) string {
	return GradeName(g.GetVariant()) + "(" + strconv.FormatUint(g.GetIncarnation(), 10) + ")"
}
