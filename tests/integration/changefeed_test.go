package integration

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// feedProcess starts `shardkit changefeed run` and returns it with a
// channel closed once each of its parts logged that it started.
func feedProcess(t *testing.T, c *cluster, brokers string, parts int) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(binary, "changefeed", "run", "--peer", strings.Join(c.peers, ","), "--space", "cf",
		"--brokers", brokers, "--topic", "cf", "--parts", fmt.Sprint(parts), "--lease-ttl", "2s", "--save-every", "100ms")
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errOut)
		n := 0
		for sc.Scan() {
			if strings.Contains(sc.Text(), "part started") {
				if n++; n == parts {
					close(started)
				}
			}
			if strings.Contains(sc.Text(), "level=ERROR") || strings.Contains(sc.Text(), "Error:") {
				t.Logf("changefeed: %s", sc.Text())
			}
		}
	}()
	return cmd, started
}

// A changefeed process killed (SIGKILL) while writes go on, and another
// started after it: every write reaches the topic, each key's in order,
// and whatever came twice came with the bucket and revision it had.
func TestAKilledChangefeedProcessLosesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, cl, brokers := changefeedSetup(ctx, t)
	first, started := feedProcess(t, c, brokers, 4)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the changefeed's parts did not start")
	}
	w := &cfWriter{cl: cl, want: map[uint64][]uint64{}}
	w.write(ctx, t, 300)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	w.write(ctx, t, 200)
	_, started = feedProcess(t, c, brokers, 4)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the second changefeed's parts did not start")
	}
	w.write(ctx, t, 300)
	repeats := consumeCF(ctx, t, brokers, w.want)
	t.Logf("%d writes, %d repeats after the kill", w.n, repeats)
}

// A changefeed process paused (SIGSTOP) past its lease while another
// takes its parts over, then resumed, the two sending side by side until
// the first sees its lease lost: a consumer that drops repeats by
// (partition, bucket) and revision gets every write, in each key's order
// (each process's records are gapless and in revision order, so their
// mix deduplicated is too; the first's cursor saves are fenced).
func TestAPausedChangefeedProcessSendsNothingStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, cl, brokers := changefeedSetup(ctx, t)
	a, started := feedProcess(t, c, brokers, 2)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the changefeed's parts did not start")
	}
	w := &cfWriter{cl: cl, want: map[uint64][]uint64{}}
	w.write(ctx, t, 200)
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w.write(ctx, t, 100)
	_, started = feedProcess(t, c, brokers, 2) // takes the parts once a's leases expire
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the second changefeed's parts did not start")
	}
	w.write(ctx, t, 100)
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	w.write(ctx, t, 300)
	repeats := consumeCF(ctx, t, brokers, w.want)
	t.Logf("%d writes, %d repeats", w.n, repeats)
}

// cfWriter replaces rows of 50 keys of space cf, one at a time, each with
// the next number, remembering each key's values in order.
type cfWriter struct {
	cl   *client.Client
	n    uint64
	want map[uint64][]uint64
}

func (w *cfWriter) write(ctx context.Context, t *testing.T, count int) {
	t.Helper()
	for range count {
		key := w.n % 50
		if _, err := w.cl.Space("cf").Replace(ctx, tuple.Tuple{tuple.Uint(key), tuple.Uint(w.n)}); err != nil {
			t.Fatal(err)
		}
		w.want[key] = append(w.want[key], w.n)
		w.n++
	}
}

// changefeedSetup starts a one-instance cluster with a space cf(k, v) and
// a kfake broker with a topic cf of 3 partitions.
func changefeedSetup(ctx context.Context, t *testing.T) (*cluster, *client.Client, string) {
	t.Helper()
	c := newCluster(t, 1)
	c.startAll()
	c.waitOnline(1)
	cl, err := client.New(ctx, client.Config{Peers: c.peers, Timeout: 5 * time.Second, Credentials: testCredentials(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if _, err := cl.CreateSpace(ctx, client.SpaceDef{Name: "cf", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeUnsigned}},
		PrimaryKey: []string{"k"}}, true); err != nil {
		t.Fatal(err)
	}
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "cf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	brokers := k.ListenAddrs()[0]
	return c, cl, brokers
}

// consumeCF reads topic cf from its start until every key has as many
// changes as want says, dropping repeats by (partition, bucket) and
// (revision, index) as docs/changes.md says a consumer does; each key's
// changes must be its writes, in order, and each repeat equal to its
// first. It returns the number of repeats.
func consumeCF(ctx context.Context, t *testing.T, brokers string, want map[uint64][]uint64) int {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("cf"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	type pos struct{ rev, index uint64 }
	last := map[[2]int64]pos{}
	first1 := map[[3]uint64]string{}
	got := map[uint64][]uint64{}
	repeats := 0
	complete := func() bool {
		for key, vs := range want {
			if len(got[key]) < len(vs) {
				return false
			}
		}
		return true
	}
	for !complete() {
		if ctx.Err() != nil {
			t.Fatalf("the topic lacks writes: %d of %d keys complete", len(got), len(want))
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := consumer.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(rec *kgo.Record) {
			b, rev, i, err := changefeed.Position(rec)
			if err != nil {
				t.Fatal(err)
			}
			r, err := changefeed.ParseRecord(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			id := [3]uint64{uint64(b), rev, uint64(i)}
			pk := [2]int64{int64(rec.Partition), int64(b)}
			if p, ok := last[pk]; ok && (rev < p.rev || rev == p.rev && uint64(i) <= p.index) {
				repeats++
				if first1[id] != string(rec.Value) {
					t.Fatalf("a repeat of bucket %d revision %d index %d: %s, first %q", b, rev, i, rec.Value, first1[id])
				}
				return
			}
			last[pk] = pos{rev, uint64(i)}
			first1[id] = string(rec.Value)
			key, _ := r.Key[0].AsInt()
			v, _ := r.Tuple[1].AsInt()
			got[uint64(key)] = append(got[uint64(key)], uint64(v))
		})
	}
	for key, vs := range want {
		if !slices.Equal(got[key], vs) {
			t.Errorf("key %d: the topic has %v, the writes were %v", key, got[key], vs)
		}
	}
	return repeats
}
