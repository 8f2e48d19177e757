package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// changefeed run's wrong command lines exit 2 and name what was wrong.
func TestChangefeedRunRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--brokers", "b:1", "--topic", "t"}, "give --space"},
		{[]string{"--space", "s"}, "give --brokers, --topic"},
		{[]string{"--space", "s", "--brokers", "b:1", "--topic", "t", "--format", "avro"}, `invalid --format "avro": want json or protobuf`},
		{[]string{"--space", "s", "--brokers", "b:1", "--topic", "t", "--parts", "0"}, "--parts 0: want 1 to 1024"},
		{[]string{"--space", "s", "--brokers", "b:1", "--topic", "t", "--lease-ttl", "10ms"}, "--lease-ttl 10ms: want at least 300ms"},
		{[]string{"--space", "s", "--brokers", "b:1", "--topic", "t", "--log-level", "loud"}, `invalid --log-level "loud"`},
		{[]string{"--space", "s", "--brokers", "b:1", "--topic", "t", "extra"}, "unknown command"},
	} {
		code, _, errOut := runMainIn(t, "", append([]string{"changefeed", "run", "--peer", "127.0.0.1:1"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// changefeed run --format protobuf sends each change written after it
// started to the topic, keyed by the sharding key, until it is stopped.
func TestChangefeedRunSendsProtobufRecords(t *testing.T) {
	addr := dataCluster(t)
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := newRootCmd(nil)
	cmd.SetArgs([]string{"changefeed", "run", "--peer", addr, "--space", "ready", "--brokers", k.ListenAddrs()[0], "--topic", "t",
		"--format", "protobuf", "--parts", "2", "--lease-ttl", "1s"})
	var stderr strings.Builder
	cmd.SetErr(&stderr)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(rctx) }()
	c, err := client.New(ctx, client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Write until the feed has started: keys from 100 on, one at a time,
	// until one reaches the topic; then 20 more, which all must.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	read := func() {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			r, err := changefeed.ParseProtoRecord(rec.Value)
			if err != nil {
				t.Fatalf("record %x: %v", rec.Value, err)
			}
			n, _ := r.Key[0].AsInt()
			if r.Space != "ready" || r.Kind != client.ChangeReplace || string(rec.Key) != fmt.Sprintf("[%d]", n) {
				t.Fatalf("record %+v has Kafka key %s, want its space's sharding key", r, rec.Key)
			}
			got[string(rec.Key)] = true
		})
	}
	for k := 100; len(got) == 0; k++ {
		if code, _, errOut := runMain(t, "replace", "--peer", addr, "ready", fmt.Sprintf("[%d]", k)); code != 0 {
			t.Fatal(errOut)
		}
		read()
		select {
		case err := <-done:
			t.Fatalf("the feed ended: %v: %s", err, stderr.String())
		default:
		}
		if ctx.Err() != nil {
			t.Fatalf("nothing reached the topic: %s", stderr.String())
		}
	}
	for k := 1; k <= 20; k++ {
		if code, _, errOut := runMain(t, "replace", "--peer", addr, "ready", fmt.Sprintf("[%d]", k)); code != 0 {
			t.Fatal(errOut)
		}
	}
	for k := 1; k <= 20; k++ {
		for !got[fmt.Sprintf("[%d]", k)] {
			if ctx.Err() != nil {
				t.Fatalf("key %d did not reach the topic: %s", k, stderr.String())
			}
			read()
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the stopped feed: %v", err)
	}
}

// changefeed run --initial-scan first sends every row the space holds,
// as records of kind scan, then the changes written after.
func TestChangefeedRunInitialScan(t *testing.T) {
	addr := dataCluster(t)
	if code, _, errOut := runMain(t, "space", "create", "scanned", "--peer", addr, "--field", "k:unsigned", "--primary", "k", "--if-not-exists"); code != 0 {
		t.Fatal(errOut)
	}
	for k := 1; k <= 30; k++ {
		if code, _, errOut := runMain(t, "replace", "--peer", addr, "scanned", fmt.Sprintf("[%d]", k)); code != 0 {
			t.Fatal(errOut)
		}
	}
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := newRootCmd(nil)
	cmd.SetArgs([]string{"changefeed", "run", "--peer", addr, "--space", "scanned", "--brokers", k.ListenAddrs()[0], "--topic", "t",
		"--name", "scanfeed", "--initial-scan", "--parts", "2", "--lease-ttl", "1s"})
	var stderr strings.Builder
	cmd.SetErr(&stderr)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(rctx) }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	kinds := map[int64]client.ChangeKind{} // key -> the kind of its first record
	read := func() {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			r, err := changefeed.ParseRecord(rec.Value)
			if err != nil {
				t.Fatalf("record %s: %v", rec.Value, err)
			}
			n, _ := r.Key[0].AsInt()
			if _, ok := kinds[n]; !ok {
				kinds[n] = r.Kind
			}
		})
	}
	for k := int64(1); k <= 30; k++ {
		for kinds[k] == "" {
			select {
			case err := <-done:
				t.Fatalf("the feed ended: %v: %s", err, stderr.String())
			default:
			}
			if ctx.Err() != nil {
				t.Fatalf("row %d did not reach the topic: %s", k, stderr.String())
			}
			read()
		}
		if kinds[k] != client.ChangeScan {
			t.Errorf("row %d came first as %s, want scan", k, kinds[k])
		}
	}
	// Once both parts saved a cursor with no scan left, a row written
	// comes as its change.
	c, err := client.New(ctx, client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for part := range 2 {
		for {
			res, _, err := c.Space(changefeed.CursorSpace).Select(ctx, []tuple.Value{tuple.String("scanfeed"), tuple.Uint(uint64(part))}, client.RW)
			if err != nil {
				t.Fatal(err)
			}
			if res.Tuple != nil { // the part has begun
				if cur, _ := res.Tuple[4].AsString(); strings.HasPrefix(cur, "c1.") && !strings.Contains(cur, " scan:") {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("part %d saved no cursor past its scan: %s", part, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for kinds[100] == "" {
		if code, _, errOut := runMain(t, "replace", "--peer", addr, "scanned", "[100]"); code != 0 {
			t.Fatal(errOut)
		}
		if ctx.Err() != nil {
			t.Fatalf("row 100 did not reach the topic: %s", stderr.String())
		}
		read()
	}
	if kinds[100] != client.ChangeReplace {
		t.Errorf("row 100, written after the scan, came as %s, want replace", kinds[100])
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the stopped feed: %v", err)
	}
}
