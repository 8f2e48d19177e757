package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Handler answers a service's Get on the server side (SPEC C3–C5): it
// answers an empty Get with the shard, answers only the shard and
// all_matched=false when any key is outside the shard, and answers nothing
// (gRPC FailedPrecondition) while the server holds no shard.
//
// Call Handle from the generated service method:
//
//	func (s *server) MatchSharded(ctx context.Context, req *pb.Req) (*pb.Resp, error) {
//		return s.handler.Handle(ctx, req)
//	}
type Handler[K any, Req, Resp proto.Message] struct {
	// Shards says which shard the server may answer for (LeaseShards).
	Shards ShardSource
	// Keys decodes the request's keys.
	Keys func(Req) ([]K, error)
	// ShardingKey returns a key's position in the uint64 space.
	ShardingKey func(K) uint64
	// Lookup fills resp with the entries of keys, all inside shard.
	Lookup func(ctx context.Context, shard Shard, keys []K, resp Resp) error
	// SetShard writes the shard and all_matched into resp.
	SetShard func(resp Resp, shard Shard, allMatched bool)
	// Metrics, from NewServerMetrics (nil: none).
	Metrics *ServerMetrics
}

// Handle answers one request.
func (h *Handler[K, Req, Resp]) Handle(ctx context.Context, req Req) (Resp, error) {
	start := time.Now()
	resp, result, err := h.handle(ctx, req)
	h.Metrics.observe(result, time.Since(start))
	return resp, err
}

func (h *Handler[K, Req, Resp]) handle(ctx context.Context, req Req) (Resp, string, error) {
	var zero Resp
	shard, ok := h.Shards.Current()
	if !ok {
		return zero, resultNoLease, status.Error(codes.FailedPrecondition, ErrNoShard.Error())
	}
	keys, err := h.Keys(req)
	if err != nil {
		return zero, resultBadRequest, status.Errorf(codes.InvalidArgument, "cache: bad request: %v", err)
	}
	resp := newMessage[Resp]()
	for _, k := range keys {
		if !shard.Contains(h.ShardingKey(k)) {
			h.SetShard(resp, shard, false)
			return resp, resultWrongShard, nil
		}
	}
	if len(keys) == 0 {
		h.SetShard(resp, shard, true)
		return resp, resultPing, nil
	}
	if err := h.Lookup(ctx, shard, keys, resp); err != nil {
		if _, isStatus := status.FromError(err); isStatus {
			return zero, resultError, err
		}
		code := codes.Internal
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			code = status.FromContextError(err).Code()
		}
		return zero, resultError, status.Error(code, fmt.Sprintf("cache: lookup: %v", err))
	}
	// The lookup may have outlived the lease: answer only if the server
	// still holds the same shard at the same epoch.
	if now, ok := h.Shards.Current(); !ok || now != shard {
		return zero, resultNoLease, status.Error(codes.FailedPrecondition, ErrNoShard.Error())
	}
	h.SetShard(resp, shard, true)
	return resp, resultOK, nil
}
