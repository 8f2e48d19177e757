package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/grpcstage"
	"github.com/shardkit/shardkit/tuple"
)

// stamp stamps an offer once: its state counts its saves of the offer,
// so a save made twice shows as a state at version 2 (and a count of 2).
// Process takes a while, so that a kill lands mid-Process.
type stamp struct{ calls atomic.Int64 }

func (*stamp) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	if strings.Contains(string(o.Body), `"stamped"`) {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (s *stamp) Process(ctx context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
	s.calls.Add(1)
	var n wrapperspb.Int64Value
	if st.Value != nil {
		if err := st.Value.UnmarshalTo(&n); err != nil {
			return scheduler.Result{}, err
		}
	}
	select {
	case <-ctx.Done():
		return scheduler.Result{}, ctx.Err()
	case <-time.After(20 * time.Millisecond):
	}
	state, err := anypb.New(wrapperspb.Int64(n.GetValue() + 1))
	return scheduler.Result{Patch: scheduler.Patch{"stamped": []byte("true")}, State: state}, err
}

// A `scheduler run` on the shardkit store killed -9 mid-Process loses no
// offer and saves none twice: the next runner takes its shards once their
// leases expire and processes what it left; all along, the shards'
// buckets move between the cluster's two replicasets, so saves are in
// flight while their bucket switches.
func TestAKilledSchedulerRunnerLosesAndDoublesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var addrs []string
	var liss []net.Listener
	for range 2 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	for i := range liss {
		servertest.Run(t, server.InstanceConfig{Listener: liss[i], Peers: addrs[:1], AutoOfflineTimeout: 10 * time.Second,
			ShutdownTimeout: 5 * time.Second, InitBucketCount: 60})
	}
	c, err := client.New(ctx, client.Config{Peers: addrs, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const shards, offers = 8, 300
	var store *clusterstore.Store
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if store, err = clusterstore.Open(ctx, c, clusterstore.Options{Prefix: "killed", Shards: shards}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("open the store: %v", err)
		}
	}

	st := &stamp{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterStageServiceServer(g, grpcstage.Server(map[string]scheduler.Stage{"stamp": st}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	config := filepath.Join(t.TempDir(), "stages.yaml")
	file := fmt.Sprintf(`store: {shardkit: {peers: [%q, %q], prefix: killed}, shards: %d}
runner: {lease_ttl: 2s}
stages:
  - {id: stamp, address: %q, own_fields: [stamped], max_attempts: 1000, max_parallel: 16}
`, addrs[0], addrs[1], shards, lis.Addr())
	if err := os.WriteFile(config, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}

	// The shards' buckets move back and forth until the end.
	moverCtx, stopMover := context.WithCancel(ctx)
	moved := make(chan int, 1)
	go func() { moved <- moveShardsBuckets(moverCtx, c, store) }()
	defer func() {
		stopMover()
		t.Logf("%d moves of the shards' buckets", <-moved)
	}()

	first, out, _ := startShardkit(t, "scheduler", "run", "--config", config)
	ids := make([]string, offers)
	for i := range ids {
		ids[i] = fmt.Sprintf("o%03d", i)
		if _, err := store.Put(ctx, ids[i], []byte(`{"n":1}`), 0); err != nil {
			t.Fatal(err)
		}
	}
	pollFor(t, "the first runner to process some offers", func() bool { return st.calls.Load() >= offers/5 })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := st.calls.Load()
	_, out2, _ := startShardkit(t, "scheduler", "run", "--config", config)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first runner:\n%s\nthe second:\n%s", out, out2)
		}
	})
	stamped := func(id string) (scheduler.Offer, scheduler.State, bool) {
		o, s, err := store.Load(ctx, id, "stamp")
		return o, s, err == nil && strings.Contains(string(o.Body), `"stamped"`)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		left := 0
		for _, id := range ids {
			if _, _, ok := stamped(id); !ok {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d offers were never stamped", left, offers)
		}
	}
	for _, id := range ids {
		o, s, _ := stamped(id)
		var n wrapperspb.Int64Value
		if s.Value != nil {
			_ = s.Value.UnmarshalTo(&n)
		}
		if o.Version != 2 || s.Version != 1 || n.GetValue() != 1 {
			t.Errorf("offer %s: version %d, stamp's state version %d counting %d saves; want 2, 1, 1 (one save)", id, o.Version, s.Version, n.GetValue())
		}
	}
	t.Logf("%d Process calls for %d offers (%d by the killed runner)", st.calls.Load(), offers, killedAt)
}

// moveShardsBuckets moves the store's shards' buckets to the other
// replicaset, one after another, until ctx ends; it returns how many
// moves it started.
func moveShardsBuckets(ctx context.Context, c *client.Client, s *clusterstore.Store) int {
	n := 0
	for ctx.Err() == nil {
		stat, err := c.Status(ctx, false)
		if err != nil || len(stat.GetReplicasets()) < 2 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var names []string
		for _, rs := range stat.GetReplicasets() {
			names = append(names, rs.GetReplicaset().GetReplicasetId())
		}
		for sh := range s.Shards() {
			b, err := c.Space(s.Prefix()+"_fences").Bucket(ctx, tuple.Uint(uint64(sh)))
			if err != nil {
				continue
			}
			from, err := c.Sharding().BucketReplicaset(ctx, b)
			if err != nil {
				continue
			}
			to := names[0]
			if from == to {
				to = names[1]
			}
			if _, err := c.Sharding().MoveBucket(ctx, b, to); err == nil {
				n++
			}
			select {
			case <-ctx.Done():
				return n
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return n
}
