package grpcapi_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/grpcapi"
)

// seen patches "seen": true on every offer it is asked about.
type seen struct{}

func (seen) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	if strings.Contains(string(o.Body), `"seen"`) {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (seen) Process(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
	return scheduler.Result{Patch: scheduler.Patch{"seen": []byte("true")}}, nil
}

// An offer written over gRPC is a change every stage is asked about; its
// state is read and compare-and-set over gRPC; refusals carry their codes
// and name what was wrong.
func TestTheOfferServiceOverAStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	addr := servertest.OneInstanceCluster(t)
	c, err := client.New(ctx, client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: "api", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: []scheduler.StageConfig{{ID: "seen", Stage: seen{}, OwnFields: []string{"seen"}}},
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the runner ended with %v", err)
		}
	}()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterOfferServiceServer(g, grpcapi.Server(store))
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := schedulerv1.NewOfferServiceClient(conn)

	put, err := api.PutOffer(ctx, &schedulerv1.PutOfferRequest{Id: "o1", Body: []byte(`{"price":1}`)})
	if err != nil || put.GetVersion() != 1 {
		t.Fatalf("PutOffer = %v, %v; want version 1", put, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		got, err := api.GetOffer(ctx, &schedulerv1.GetOfferRequest{Id: "o1"})
		if err == nil && strings.Contains(string(got.GetOffer().GetBody()), `"seen":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stage never saw the offer written over gRPC: %v, %v", got, err)
		}
	}

	state, _ := anypb.New(wrapperspb.String("mine"))
	if u, err := api.UpdateState(ctx, &schedulerv1.UpdateStateRequest{Id: "o1", Stage: "ext", State: state, Version: 0}); err != nil || !u.GetUpdated() {
		t.Fatalf("UpdateState at version 0 = %v, %v; want updated", u, err)
	}
	if u, err := api.UpdateState(ctx, &schedulerv1.UpdateStateRequest{Id: "o1", Stage: "ext", State: state, Version: 0}); err != nil || u.GetUpdated() {
		t.Fatalf("UpdateState at a stale version = %v, %v; want not updated", u, err)
	}
	got, err := api.GetOffer(ctx, &schedulerv1.GetOfferRequest{Id: "o1", Stage: "ext"})
	var s wrapperspb.StringValue
	if err != nil || got.GetState().GetVersion() != 1 || got.GetState().GetValue().UnmarshalTo(&s) != nil || s.GetValue() != "mine" {
		t.Fatalf("GetOffer with the stage = %v, %v; want state \"mine\" at version 1", got, err)
	}
	if chk, err := api.CheckOffer(ctx, &schedulerv1.CheckOfferRequest{Id: "o1"}); err != nil || len(chk.GetEntries()) != 0 {
		t.Fatalf("CheckOffer of a processed offer = %v, %v; want no queue", chk, err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		says string
	}{
		{"create an existing offer", func() error {
			_, err := api.PutOffer(ctx, &schedulerv1.PutOfferRequest{Id: "o1", Body: []byte(`{}`)})
			return err
		}, codes.Aborted, "version"},
		{"a body that is not an object", func() error {
			_, err := api.PutOffer(ctx, &schedulerv1.PutOfferRequest{Id: "o2", Body: []byte(`[1]`)})
			return err
		}, codes.InvalidArgument, "JSON object"},
		{"an empty id", func() error {
			_, err := api.GetOffer(ctx, &schedulerv1.GetOfferRequest{})
			return err
		}, codes.InvalidArgument, "offer"},
		{"a state of no offer", func() error {
			_, err := api.UpdateState(ctx, &schedulerv1.UpdateStateRequest{Id: "none", Stage: "ext", State: state})
			return err
		}, codes.NotFound, "none"},
		{"no state", func() error {
			_, err := api.UpdateState(ctx, &schedulerv1.UpdateStateRequest{Id: "o1", Stage: "ext"})
			return err
		}, codes.InvalidArgument, "no state"},
	} {
		err := tc.call()
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v naming %q", tc.name, err, tc.code, tc.says)
		}
	}
}
