package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/pgstore"
	"github.com/shardkit/shardkit/scheduler/storetest"
)

const relayTopic = "offers-changelog"

func startRelay(t *testing.T, s *pgstore.Store, brokers []string) (stop func()) {
	t.Helper()
	r, err := pgstore.NewRelay(s, pgstore.RelayConfig{Brokers: brokers, Topic: relayTopic, Batch: 7, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay Run: %v", err)
		}
		r.Close()
	}
	t.Cleanup(stop)
	return stop
}

// changelog reads the topic from its start until want distinct records
// (by the dedupe key) arrived, and checks every offer's records come in
// version order.
func changelog(t *testing.T, brokers []string, want int) map[string][]scheduler.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(relayTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type key struct {
		id           string
		offerVersion int64
		stage        string
		stateVersion int64
	}
	seen := map[key]bool{}
	out := map[string][]scheduler.Record{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct records arrived, want %d", len(seen), want)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(rec *kgo.Record) {
			var r scheduler.Record
			if err := json.Unmarshal(rec.Value, &r); err != nil {
				t.Fatalf("record %s: %v", rec.Value, err)
			}
			if string(rec.Key) != r.OfferID {
				t.Fatalf("record of %s keyed %q", r.OfferID, rec.Key)
			}
			k := key{r.OfferID, r.OfferVersion, r.Stage, r.StateVersion}
			if seen[k] {
				return // a duplicate (at least once)
			}
			seen[k] = true
			if prev := out[r.OfferID]; len(prev) > 0 {
				last := prev[len(prev)-1]
				if r.OfferVersion < last.OfferVersion {
					t.Fatalf("offer %s: version %d after version %d", r.OfferID, r.OfferVersion, last.OfferVersion)
				}
			}
			out[r.OfferID] = append(out[r.OfferID], r)
		})
	}
	return out
}

func outboxEmpty(t *testing.T, s *pgstore.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := s.Pool().QueryRow(t.Context(), "SELECT count(*) FROM "+s.Schema()+".outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outbox rows were never sent", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRelaySendsTheChangelog: every save's record reaches Kafka keyed by
// its offer, in version order per offer, also across a relay's restart
// and with two relays running (one sends at a time); the outbox empties.
func TestRelaySendsTheChangelog(t *testing.T) {
	t.Parallel()
	open := factory(t)(t, 4)
	s := open(t).(*pgstore.Store)
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, relayTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	brokers := k.ListenAddrs()

	const offers, updates = 10, 3
	write := func(from int) {
		for i := range offers {
			id := fmt.Sprintf("offer-%d", i)
			for u := from; u < from+updates; u++ {
				if _, err := s.Put(t.Context(), id, fmt.Appendf(nil, `{"u":%d}`, u), scheduler.AnyVersion); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write(0)
	// A stage's save: the record carries the state.
	id := "offer-0"
	sh := scheduler.ShardOf(id, 4)
	ls, err := s.Claim(t.Context(), "runner", []int{sh}, time.Minute)
	if err != nil || len(ls) != 1 {
		t.Fatalf("Claim = %v, %v", ls, err)
	}
	o, _, err := s.Load(t.Context(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(t.Context(), ls[0], scheduler.Save{OfferID: id, Stage: "pricer", ReadVersion: o.Version, Patch: scheduler.Patch{"band": json.RawMessage(`"low"`)}, State: stateOf(t, "10")}); err != nil {
		t.Fatal(err)
	}

	stop := startRelay(t, s, brokers)
	got := changelog(t, brokers, offers*updates+1)
	outboxEmpty(t, s)
	last := got[id][len(got[id])-1]
	if last.Stage != "pricer" || last.StateVersion != 1 || storetest.Field(last.Body, "band") != `"low"` || last.StateType == "" {
		t.Fatalf("the stage's record = %+v, want stage pricer, its state and the patched body", last)
	}
	// The relay stops; writes go on; two relays start: all arrives.
	stop()
	write(updates)
	startRelay(t, s, brokers)
	startRelay(t, open(t).(*pgstore.Store), brokers)
	got = changelog(t, brokers, 2*offers*updates+1)
	outboxEmpty(t, s)
	for i := range offers {
		if n := len(got[fmt.Sprintf("offer-%d", i)]); n < 2*updates {
			t.Errorf("offer-%d: %d records, want at least %d", i, n, 2*updates)
		}
	}
}

func stateOf(t *testing.T, v string) *anypb.Any {
	t.Helper()
	a, err := anypb.New(wrapperspb.String(v))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
