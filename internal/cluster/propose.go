package cluster

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// errNoGroup0: the node does not run group 0 yet (discovering or joining).
var errNoGroup0 = status.Error(codes.Unavailable, "this instance is not part of a running cluster yet")

// proposeMeta stamps a command with this node's clock and proposes it to
// group 0, returning the state machine's result once applied here.
func (n *Node) proposeMeta(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	g := n.g0.Load()
	if g == nil {
		return meta.Result{}, errNoGroup0
	}
	c.NowUnixMs = n.clock.Now().UnixMilli()
	data, err := meta.Encode(c)
	if err != nil {
		return meta.Result{}, err
	}
	return multiraft.ProposeAs[meta.Result](ctx, g, data)
}

// StatusError maps a group-0 refusal or an engine error to the gRPC
// status the node answers with (the mover's tests answer as it does).
func StatusError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ref *meta.Refusal
	if errors.As(err, &ref) {
		code := codes.FailedPrecondition
		switch ref.Code {
		case meta.CodeInvalid:
			code = codes.InvalidArgument
		case meta.CodeNotFound:
			code = codes.NotFound
		case meta.CodeAlreadyExists:
			code = codes.AlreadyExists
		case meta.CodeExpelled:
			code = codes.PermissionDenied
		case meta.CodeUnavailable:
			code = codes.Unavailable
		}
		return status.Error(code, ref.Msg)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, multiraft.ErrOutcomeUnknown):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, multiraft.ErrProposalDropped), errors.Is(err, multiraft.ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Propose proposes a group-0 command (on the leader: the caller routes
// there) and returns its result, a refusal mapped to a gRPC status.
func (n *Node) Propose(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	return n.metaCall(ctx, c)
}

// metaCall proposes and turns a refusal into an error.
func (n *Node) metaCall(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	res, err := n.proposeMeta(ctx, c)
	if err != nil {
		return res, StatusError(err)
	}
	if res.Err != nil {
		return res, StatusError(res.Err)
	}
	return res, nil
}
