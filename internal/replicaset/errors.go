package replicaset

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// The storage's answers are gRPC statuses, as the router and the client
// see them. A redirect (not the leader, not the bucket's replicaset) is
// Unavailable with a datav1.Redirect detail: nothing was done, go there.
// A refusal of a write carries a datav1.Refusal detail.

func withDetail(code codes.Code, msg string, detail proto.Message) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(protoadapt.MessageV1Of(detail)); err == nil {
		return d.Err()
	}
	return st.Err()
}

// Redirect returns the error that sends a caller elsewhere.
func Redirect(reason datav1.Redirect_Reason, bucket uint32, replicaset, leader, msg string) error {
	return withDetail(codes.Unavailable, msg, &datav1.Redirect{Reason: reason, Bucket: bucket, ReplicasetId: replicaset, LeaderAddress: leader})
}

func refusalError(r *rspb.Refusal) error {
	var code codes.Code
	var api datav1.Refusal_Code
	switch r.GetCode() {
	case rspb.Refusal_CODE_DUPLICATE_KEY:
		code, api = codes.AlreadyExists, datav1.Refusal_CODE_DUPLICATE_KEY
	case rspb.Refusal_CODE_CONDITION_FAILED:
		code, api = codes.FailedPrecondition, datav1.Refusal_CODE_CONDITION_FAILED
	case rspb.Refusal_CODE_NO_SUCH_SPACE:
		code, api = codes.NotFound, datav1.Refusal_CODE_NO_SUCH_SPACE
	case rspb.Refusal_CODE_INVALID:
		code, api = codes.InvalidArgument, datav1.Refusal_CODE_INVALID
	case rspb.Refusal_CODE_SCHEMA_BEHIND:
		return status.Error(codes.Unavailable, r.GetMessage())
	default:
		return status.Error(codes.Internal, r.GetMessage())
	}
	return withDetail(code, r.GetMessage(), &datav1.Refusal{Code: api, Op: r.GetOp(), ActualVersion: r.GetActualVersion(),
		Condition: r.GetCondition(), ActualValue: r.GetActualValue()})
}

func invalid(op int, format string, args ...any) error {
	return withDetail(codes.InvalidArgument, fmt.Sprintf(format, args...), &datav1.Refusal{Code: datav1.Refusal_CODE_INVALID, Op: uint32(op)})
}

func noSpace(op int, name string) error {
	return withDetail(codes.NotFound, fmt.Sprintf("no space %q (shardkit space list shows the spaces)", name),
		&datav1.Refusal{Code: datav1.Refusal_CODE_NO_SUCH_SPACE, Op: uint32(op)})
}

// engineError maps an error of the raft engine or of the context.
func engineError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, multiraft.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "the write's outcome is unknown (%v); retrying it with the same request id on this replicaset is safe", err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, multiraft.ErrProposalDropped), errors.Is(err, multiraft.ErrStopped), errors.Is(err, multiraft.ErrGroupNotFound):
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return status.Error(codes.Internal, err.Error())
}
