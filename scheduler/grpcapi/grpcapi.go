// Package grpcapi serves shardkit.scheduler.v1.OfferService
// (api/scheduler/v1/offers.proto) over a scheduler.Store: the offer and
// state API of the seed's requirement 19 and offer writes for programs in
// any language. A write is a Store.Put, so it marks the offer changed and
// every stage is asked about it, as for a Go program's Put.
//
// It must never decide anything the store decides: it converts requests
// and answers, and maps the scheduler's errors to gRPC codes.
package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/scheduler"
)

// Server returns the OfferService of store.
func Server(store scheduler.Store) schedulerv1.OfferServiceServer { return &server{s: store} }

type server struct {
	schedulerv1.UnimplementedOfferServiceServer
	s scheduler.Store
}

// statusOf maps the scheduler's errors to gRPC codes, keeping the message.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	code := codes.Internal
	switch {
	case errors.Is(err, scheduler.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, scheduler.ErrConflict):
		code = codes.Aborted
	case errors.Is(err, scheduler.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

func (s *server) PutOffer(ctx context.Context, req *schedulerv1.PutOfferRequest) (*schedulerv1.PutOfferResponse, error) {
	v, err := s.s.Put(ctx, req.GetId(), req.GetBody(), req.GetIfVersion())
	if err != nil {
		return nil, statusOf(err)
	}
	return &schedulerv1.PutOfferResponse{Version: v}, nil
}

func (s *server) GetOffer(ctx context.Context, req *schedulerv1.GetOfferRequest) (*schedulerv1.GetOfferResponse, error) {
	o, st, err := s.s.Load(ctx, req.GetId(), req.GetStage())
	if err != nil {
		return nil, statusOf(err)
	}
	return &schedulerv1.GetOfferResponse{
		Offer: &schedulerv1.Offer{Id: o.ID, Version: o.Version, Body: o.Body, Chain: int32(min(o.Chain, 1<<31-1))}, //nolint:gosec // bounded
		State: &schedulerv1.State{Value: st.Value, Version: st.Version},
	}, nil
}

func (s *server) UpdateState(ctx context.Context, req *schedulerv1.UpdateStateRequest) (*schedulerv1.UpdateStateResponse, error) {
	ok, err := s.s.UpdateState(ctx, req.GetId(), req.GetStage(), req.GetState(), req.GetVersion())
	if err != nil {
		return nil, statusOf(err)
	}
	return &schedulerv1.UpdateStateResponse{Updated: ok}, nil
}

func (s *server) CheckOffer(ctx context.Context, req *schedulerv1.CheckOfferRequest) (*schedulerv1.CheckOfferResponse, error) {
	if err := scheduler.ValidateID("offer", req.GetId()); err != nil {
		return nil, statusOf(err)
	}
	es, err := s.s.Check(ctx, scheduler.ShardOf(req.GetId(), s.s.Shards()), req.GetId())
	if err != nil {
		return nil, statusOf(err)
	}
	out := &schedulerv1.CheckOfferResponse{}
	for _, e := range es {
		out.Entries = append(out.Entries, &schedulerv1.QueueEntry{Stage: e.Stage, Due: timestamppb.New(e.Due), Rescan: e.Lane == scheduler.LaneRescan,
			Timer: e.Timer, Attempts: int32(min(e.Attempts, 1<<31-1)), LastError: e.LastError}) //nolint:gosec // bounded
	}
	return out, nil
}
