package pgstore_test

import (
	"context"
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/pgstore"
)

// price sets a price band from the price; its state is the last price seen
// (the stage of docs/scheduler.md, "A Go stage").
type price struct{}

func (price) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	var b struct{ Price *float64 }
	if err := json.Unmarshal(o.Body, &b); err != nil || b.Price == nil {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (price) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	var b struct{ Price float64 }
	if err := json.Unmarshal(o.Body, &b); err != nil {
		return scheduler.Result{}, err
	}
	band := `"high"`
	if b.Price < 100 {
		band = `"low"`
	}
	last, err := anypb.New(wrapperspb.Double(b.Price))
	if err != nil {
		return scheduler.Result{}, err
	}
	return scheduler.Result{Patch: scheduler.Patch{"band": json.RawMessage(band)}, State: last}, nil
}

func run(ctx context.Context, dsn string) error {
	store, err := pgstore.Open(ctx, dsn, pgstore.Options{Shards: 64})
	if err != nil {
		return err
	}
	defer store.Close()
	r, err := scheduler.NewRunner(scheduler.Config{
		Store: store,
		Stages: []scheduler.StageConfig{{
			ID: "price", Stage: price{},
			Fields:      []string{"price"}, // asked only when the price changed
			OwnFields:   []string{"band"},  // may patch the band
			MaxParallel: 8, RateLimit: 100,
		}},
		Registerer: prometheus.DefaultRegisterer,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Example_stage runs a Go stage on PostgreSQL (compiled, not run: it
// needs a database).
func Example_stage() {
	_ = run
}
