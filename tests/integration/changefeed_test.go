package integration

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
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
	c := newCluster(t, 1)
	c.startAll()
	c.waitOnline(1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Peers: c.peers, Timeout: 5 * time.Second, Credentials: testCredentials(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateSpace(ctx, client.SpaceDef{Name: "cf", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeUnsigned}},
		PrimaryKey: []string{"k"}}, true); err != nil {
		t.Fatal(err)
	}
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "cf"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	brokers := k.ListenAddrs()[0]

	first, started := feedProcess(t, c, brokers, 4)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the changefeed's parts did not start")
	}
	const keys = 50
	var mu sync.Mutex
	want := map[uint64][]uint64{}
	n := uint64(0)
	write := func(count int) {
		for range count {
			key := n % keys
			if _, err := cl.Space("cf").Replace(ctx, tuple.Tuple{tuple.Uint(key), tuple.Uint(n)}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			want[key] = append(want[key], n)
			mu.Unlock()
			n++
		}
	}
	write(300)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	write(200)
	_, started = feedProcess(t, c, brokers, 4)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the second changefeed's parts did not start")
	}
	write(300)

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
			t.Fatalf("the topic lacks writes: %d of %d keys complete", len(got), keys)
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
	t.Logf("%d writes, %d repeats after the kill", n, repeats)
}
