package clusterstore_test

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

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
)

// The changelog: each write that changes an offer or a state is one
// record on the topic, keyed by the offer id, the scheduler.Record of
// that write as its value, in the order of the writes; a write that
// changes neither sends none.
func TestTheChangelogIsARecordPerSave(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := testCluster(t)
	st, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: "log", Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	cfg := st.Changelog()
	cfg.Brokers, cfg.Topic, cfg.LeaseTTL, cfg.SaveEvery = k.ListenAddrs(), "changelog", 2*time.Second, 50*time.Millisecond
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- changefeed.Run(fctx, cfg) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the changefeed ended with: %v", err)
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics("changelog"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []scheduler.Record
	poll := func() (probes int) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var rec scheduler.Record
			if err := json.Unmarshal(r.Value, &rec); err != nil {
				t.Fatalf("record %q: %v", r.Value, err)
			}
			if string(r.Key) != rec.OfferID {
				t.Errorf("record of %s keyed %q", rec.OfferID, r.Key)
			}
			if rec.OfferID == "probe" {
				probes++
				return
			}
			got = append(got, rec)
		})
		return probes
	}
	// Writes made before the feed's watch began are not sent (no initial
	// scan): a probe is written until one of its records comes.
	for deadline, n := time.Now().Add(time.Minute), 0; poll() == 0; n++ {
		if time.Now().After(deadline) {
			t.Fatal("no record of the probe came within a minute")
		}
		if _, err := st.Put(ctx, "probe", []byte(fmt.Sprintf(`{"n":%d}`, n)), scheduler.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}

	id := "offer-1"
	v, err := st.Put(ctx, id, []byte(`{"price":1}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.Claim(ctx, "r", []int{scheduler.ShardOf(id, 4)}, time.Minute)
	if err != nil || len(l) != 1 {
		t.Fatalf("Claim = %v, %v", l, err)
	}
	if _, err := st.Offer(ctx, l[0], scheduler.Entry{Stage: "price", OfferID: id, Due: time.Now()}); err != nil {
		t.Fatal(err)
	}
	state, _ := anypb.New(wrapperspb.Int64(5))
	saved, err := st.Save(ctx, l[0], scheduler.Save{OfferID: id, Stage: "price", ReadVersion: v, Body: []byte(`{"price":2}`), State: state})
	if err != nil {
		t.Fatal(err)
	}
	// A save of neither offer nor state publishes nothing.
	if _, err := st.Save(ctx, l[0], scheduler.Save{OfferID: id, Stage: "price", ReadVersion: saved.OfferVersion}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, id, []byte(`{"price":3}`), saved.OfferVersion); err != nil {
		t.Fatal(err)
	}

	for deadline := time.Now().Add(time.Minute); len(got) < 3; poll() {
		if time.Now().After(deadline) {
			t.Fatalf("%d records came: %+v", len(got), got)
		}
	}
	poll() // and nothing more
	want := []struct {
		version int64
		body    string
		stage   string
		sv      int64
	}{{1, `{"price":1}`, "", 0}, {2, `{"price":2}`, "price", 1}, {3, `{"price":3}`, "", 0}}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(got), len(want), got)
	}
	for j, w := range want {
		r := got[j]
		if r.OfferID != id || r.OfferVersion != w.version || string(r.Body) != w.body || r.Stage != w.stage || r.StateVersion != w.sv {
			t.Errorf("record %d = %+v, want version %d body %s stage %q state version %d", j, r, w.version, w.body, w.stage, w.sv)
		}
	}
	var n wrapperspb.Int64Value
	if err := (&anypb.Any{TypeUrl: got[1].StateType, Value: got[1].State}).UnmarshalTo(&n); err != nil || n.GetValue() != 5 {
		t.Errorf("the save's record holds state %v (%v), want 5", n.GetValue(), err)
	}
}
