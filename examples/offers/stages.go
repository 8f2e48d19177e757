// Command offers is the stage scheduler's example (docs/scheduler.md):
// three stages over offers, on the shardkit store (or the PostgreSQL
// one), and a consumer of their changelog.
//
//   - validate rejects an offer without a price (own fields valid and
//     reject_reason);
//   - price sets a price band from the price; its state is the last price
//     it saw, so it skips an offer whose price it already banded;
//   - withdraw withdraws an offer 180 days after its publication: a timer.
//
// Run it (README.md):
//
//	offers run --demo DIR [--brokers B --topic T]   the stages on `shardkit demo --data-dir DIR`, and the changelog
//	offers run --peer ADDRS [--certs-dir D]         the same on any cluster
//	offers run --postgres DSN                       the same on PostgreSQL
//	offers put ID JSON --demo DIR                   write an offer from outside (same store flags)
//	offers consume --brokers B --topic T            print the changelog, repeats dropped
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardkit/shardkit/scheduler"
)

// body is what the stages read of an offer.
type body struct {
	Price       *float64   `json:"price"`
	PublishedAt *time.Time `json:"published_at"`
	Withdrawn   bool       `json:"withdrawn"`
}

func decode(o scheduler.Offer) (body, error) {
	var b body
	if err := json.Unmarshal(o.Body, &b); err != nil {
		return body{}, fmt.Errorf("offer %s: %w", o.ID, err)
	}
	return b, nil
}

// validate rejects an offer without a positive price.
type validate struct{}

func (validate) ShouldProcess(context.Context, scheduler.Offer, scheduler.State) (scheduler.Decision, error) {
	return scheduler.Now(), nil
}

func (validate) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	b, err := decode(o)
	if err != nil {
		return scheduler.Result{}, err
	}
	if b.Price == nil || *b.Price <= 0 {
		return scheduler.Result{Patch: scheduler.Patch{"valid": json.RawMessage(`false`), "reject_reason": json.RawMessage(`"no price"`)}}, nil
	}
	return scheduler.Result{Patch: scheduler.Patch{"valid": json.RawMessage(`true`), "reject_reason": nil}}, nil
}

// price bands the price; its state is the last price it banded.
type price struct{}

func lastPrice(st scheduler.State) (float64, bool) {
	if st.Value == nil {
		return 0, false
	}
	var d wrapperspb.DoubleValue
	if err := st.Value.UnmarshalTo(&d); err != nil {
		return 0, false
	}
	return d.GetValue(), true
}

func (price) ShouldProcess(_ context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
	b, err := decode(o)
	if err != nil {
		return scheduler.Decision{}, err
	}
	if last, ok := lastPrice(st); b.Price == nil || (ok && last == *b.Price) {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (price) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	b, err := decode(o)
	if err != nil || b.Price == nil {
		return scheduler.Result{}, err
	}
	band := "high"
	switch {
	case *b.Price < 100:
		band = "low"
	case *b.Price < 1000:
		band = "mid"
	}
	state, err := anypb.New(wrapperspb.Double(*b.Price))
	if err != nil {
		return scheduler.Result{}, err
	}
	return scheduler.Result{Patch: scheduler.Patch{"price_band": json.RawMessage(`"` + band + `"`)}, State: state}, nil
}

// WithdrawAfter is how long an offer stays published.
const WithdrawAfter = 180 * 24 * time.Hour

// withdraw withdraws an offer WithdrawAfter its publication.
type withdraw struct{ clock scheduler.Clock }

func (withdraw) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	b, err := decode(o)
	if err != nil {
		return scheduler.Decision{}, err
	}
	if b.PublishedAt == nil || b.Withdrawn {
		return scheduler.Skip(), nil
	}
	return scheduler.At(b.PublishedAt.Add(WithdrawAfter)), nil
}

func (w withdraw) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	b, err := decode(o)
	if err != nil || b.PublishedAt == nil || b.Withdrawn {
		return scheduler.Result{}, err
	}
	if due := b.PublishedAt.Add(WithdrawAfter); w.clock.Now().Before(due) {
		return scheduler.Result{Timer: due}, nil // republished later: wait again
	}
	return scheduler.Result{Patch: scheduler.Patch{"withdrawn": json.RawMessage(`true`)}}, nil
}

// Stages are the example's stages, withdraw on clock.
func Stages(clock scheduler.Clock) []scheduler.StageConfig {
	return []scheduler.StageConfig{
		{ID: "validate", Stage: validate{}, Fields: []string{"price"}, OwnFields: []string{"valid", "reject_reason"}},
		{ID: "price", Stage: price{}, Fields: []string{"price"}, OwnFields: []string{"price_band"}, MaxParallel: 8},
		{ID: "withdraw", Stage: withdraw{clock: clock}, Fields: []string{"published_at", "withdrawn"}, OwnFields: []string{"withdrawn"}},
	}
}
