package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// auditBuckets asks each replicaset's leader for its bucket records and
// returns how many buckets are held (active or receiving) by each, and
// the buckets held by none or by two. With no move under way each bucket
// is held by exactly one (while one is prepared, its destination records
// it receiving before its source freezes it: held by both, served by the
// source alone).
func auditBuckets(ctx context.Context, t *testing.T, addrs map[string]string, count int) (map[string]int, []string) {
	t.Helper()
	holder := make([]string, count+1)
	held := map[string]int{}
	var problems []string
	for rs, addr := range addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rspb.NewBucketServiceClient(conn).Buckets(ctx, &rspb.BucketsRequest{ReplicasetId: rs})
		conn.Close()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", rs, err))
			continue
		}
		for b, st := range resp.GetBuckets() {
			if st.GetState() != rspb.BucketState_STATE_ACTIVE && st.GetState() != rspb.BucketState_STATE_RECEIVING {
				continue
			}
			if holder[b] != "" {
				problems = append(problems, fmt.Sprintf("bucket %d held by %s and %s", b, holder[b], rs))
			}
			holder[b] = rs
			held[rs]++
		}
	}
	for b := 1; b <= count; b++ {
		if holder[b] == "" {
			problems = append(problems, fmt.Sprintf("bucket %d held by none", b))
		}
	}
	return held, problems
}

// Two replicasets of one instance each: the second joins empty, gets its
// weight, and the rebalancer moves half the buckets to it while the data
// stays readable; afterwards every bucket is held by exactly one
// replicaset and no row is lost or doubled.
func TestBucketsRebalanceToANewReplicaset(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	addrs, startSecond, c := twoInstances(ctx, t, 5*time.Second)
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "m", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = c.Space("m").Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.String("v0")})
		}
		return err
	})
	const rows = 2000
	for k := range uint64(rows) {
		if _, err := c.Space("m").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String(fmt.Sprint("v", k))}); err != nil {
			t.Fatalf("replace %d: %v", k, err)
		}
	}
	// The second replicaset joins; writes go on while buckets move.
	startSecond()
	deadline := time.Now().Add(4 * time.Minute)
	for round := 0; ; round++ {
		k := uint64(round % rows)
		if _, err := c.Space("m").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String(fmt.Sprint("w", k))}); err != nil {
			t.Fatalf("a write during the rebalance failed (a user must see latency, not errors): %v", err)
		}
		if round%100 == 0 {
			st, err := c.Status(ctx, false)
			if err == nil && len(st.GetReplicasets()) == 2 {
				a, b := st.GetReplicasets()[0].GetBucketCount(), st.GetReplicasets()[1].GetBucketCount()
				if a == buckets/2 && b == buckets/2 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("buckets did not balance in time: %v", st.GetReplicasets())
			}
		}
	}
	held, problems := auditBuckets(ctx, t, map[string]string{"r1": addrs[0], "r2": addrs[1]}, buckets)
	if len(problems) > 0 || held["r1"] != buckets/2 || held["r2"] != buckets/2 {
		t.Fatalf("audit: held %v, problems %v", held, problems)
	}
	n, err := c.Count(ctx, "m")
	if err != nil || n != rows {
		t.Fatalf("count %d, %v, want %d", n, err, rows)
	}
	for k := range uint64(rows) {
		r, _, err := c.Space("m").Select(ctx, []tuple.Value{tuple.Uint(k)}, client.RW)
		if err != nil || !r.Found {
			t.Fatalf("row %d after the rebalance: %+v, %v", k, r, err)
		}
	}
}

// buckets is the test clusters' bucket count: a tenth of the default, so
// that the moves take seconds on a loaded machine, through the same code.
const buckets = 300

// twoInstances starts the first of two instances (replication factor 1,
// so the second makes a second replicaset when startSecond starts it) and
// a client of both with the given per-attempt timeout.
func twoInstances(ctx context.Context, t *testing.T, timeout time.Duration) (addrs []string, startSecond func(), c *client.Client) {
	t.Helper()
	var liss []net.Listener
	for range 2 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	start := func(i int) {
		servertest.Run(t, server.InstanceConfig{Listener: liss[i], Peers: addrs[:1], AutoOfflineTimeout: 10 * time.Second,
			ShutdownTimeout: 5 * time.Second, InitBucketCount: buckets})
	}
	start(0)
	c, err := client.New(ctx, client.Config{Peers: addrs, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return addrs, func() { start(1) }, c
}

// lookupFrozen asks r1, the frozen source of k's switched bucket, for k
// as the destination does (BucketService.Lookup): at the move's
// generation it answers from its own state (k is there: deleted on r2
// only); at any other generation it refuses, naming it.
func lookupFrozen(ctx context.Context, t *testing.T, c *client.Client, r1 string, k uint64) {
	t.Helper()
	b, err := c.Space("r").Bucket(ctx, tuple.Uint(k))
	if err != nil {
		t.Fatal(err)
	}
	defs, err := c.Spaces(ctx)
	if err != nil || len(defs) != 1 {
		t.Fatalf("spaces %v, %v", defs, err)
	}
	key, err := tuple.AppendKey(nil, tuple.Uint(k))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(r1, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bs := rspb.NewBucketServiceClient(conn)
	all, err := bs.Buckets(ctx, &rspb.BucketsRequest{ReplicasetId: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	rec := all.GetBuckets()[b]
	if rec.GetState() != rspb.BucketState_STATE_SENDING {
		t.Fatalf("bucket %d of k%d on r1: %v, want SENDING", b, k, rec)
	}
	req := &rspb.LookupRequest{ReplicasetId: "r1", Bucket: b, Generation: rec.GetGeneration(),
		Keys: []*rspb.LookupKey{{SpaceId: defs[0].ID, Key: key}}}
	resp, err := bs.Lookup(ctx, req)
	if err != nil || len(resp.GetFacts()) != 1 || !resp.GetFacts()[0].GetFound() {
		t.Fatalf("lookup of k%d on its frozen source at generation %d: %v, %v", k, rec.GetGeneration(), resp, err)
	}
	req.Generation++
	want := fmt.Sprintf("not being sent at generation %d", req.Generation)
	if _, err := bs.Lookup(ctx, req); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Fatalf("lookup at another generation: %v, want FailedPrecondition %q", err, want)
	}
}

// The seed's procedure (R14) by an operator: plan, start (switch), copy,
// finish (drop prev), cleanup; then a drain by weight 0.
func TestReshardStepByStepThenDrain(t *testing.T) {
	const copyRate = 64 << 20
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	addrs, startSecond, c := twoInstances(ctx, t, 10*time.Minute)
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "r", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			// The copies below run paced (a rate they never reach here).
			err = c.Sharding().SetRebalancer(ctx, &datav1.RebalancerSettings{Disabled: true, CopyBytesPerS: copyRate})
		}
		return err
	})
	const rows = 600
	for k := range uint64(rows) {
		if _, err := c.Space("r").Replace(ctx, tuple.Tuple{tuple.Uint(k)}); err != nil {
			t.Fatal(err)
		}
	}
	startSecond()
	var plan *datav1.ReshardResponse
	pollOK(t, "a plan to move buckets to r2", func() error {
		var err error
		plan, err = c.Sharding().Reshard(ctx, datav1.ReshardStep_RESHARD_STEP_PLAN)
		if err == nil && len(plan.GetMoves()) != buckets/2 {
			err = fmt.Errorf("plan moves %d buckets, want %d (%s)", len(plan.GetMoves()), buckets/2, plan.GetSummary())
		}
		return err
	})
	step := func(s datav1.ReshardStep) *datav1.ReshardResponse {
		t.Helper()
		r, err := c.Sharding().Reshard(ctx, s)
		if err != nil {
			t.Fatalf("reshard %v: %v", s, err)
		}
		return r
	}
	// A bucket whose switch takes longer than the mover's SwitchTimeout
	// (a loaded machine) is aborted and stays on r1.
	started := step(datav1.ReshardStep_RESHARD_STEP_START)
	switched := len(started.GetMoves())
	if switched == 0 || switched > buckets/2 {
		t.Fatalf("start switched %d buckets: %s", switched, started.GetSummary())
	}
	// Between start and copy every row is still readable (prev) and writable.
	if r, _, err := c.Space("r").Select(ctx, []tuple.Value{tuple.Uint(7)}, client.RW); err != nil || !r.Found {
		t.Fatalf("a row during the reshard: %+v, %v", r, err)
	}
	// Between start and copy the switched buckets are receiving on r2 with
	// nothing copied: Count merges r1's frozen rows with r2's own and its
	// tombstones (a plain sum of the active buckets' counts would miss
	// every switched bucket). One row of a switched bucket is deleted (a
	// tombstone on r2), one is added (on r2 only).
	switchedBucket := map[uint32]bool{}
	for _, m := range started.GetMoves() {
		switchedBucket[m.GetBucket()] = true
	}
	inSwitched := func(from uint64) uint64 {
		t.Helper()
		for k := from; ; k++ {
			b, err := c.Space("r").Bucket(ctx, tuple.Uint(k))
			if err != nil {
				t.Fatal(err)
			}
			if switchedBucket[b] {
				return k
			}
		}
	}
	gone, added := inSwitched(0), inSwitched(rows)
	if r, err := c.Space("r").Delete(ctx, []tuple.Value{tuple.Uint(gone)}); err != nil || !r.Found {
		t.Fatalf("delete k%d during the reshard: %+v, %v", gone, r, err)
	}
	if _, err := c.Space("r").Insert(ctx, tuple.Tuple{tuple.Uint(added)}); err != nil {
		t.Fatalf("insert k%d during the reshard: %v", added, err)
	}
	if n, err := c.Count(ctx, "r"); err != nil || n != rows {
		t.Fatalf("count %d, %v between start and copy, want %d", n, err, rows)
	}
	lookupFrozen(ctx, t, c, addrs[0], gone)
	// Finishing before the copy is refused: it would lose the rows.
	if _, err := c.Sharding().Reshard(ctx, datav1.ReshardStep_RESHARD_STEP_FINISH); err == nil {
		t.Fatal("finish before copy was allowed")
	}
	copied := step(datav1.ReshardStep_RESHARD_STEP_COPY)
	if len(copied.GetCounts()) != 1 || copied.GetCounts()[0].GetSpace() != "r" || copied.GetCounts()[0].GetCount() == 0 {
		t.Fatalf("copy counts %v", copied.GetCounts())
	}
	step(datav1.ReshardStep_RESHARD_STEP_FINISH)
	// Audited before the cleanup, which turns the rebalancer on again: when
	// start aborted some buckets, it would move them at once, and the audit
	// would see those moves under way. r1's switched buckets are SENDING
	// (not held) until the cleanup.
	held, problems := auditBuckets(ctx, t, map[string]string{"r1": addrs[0], "r2": addrs[1]}, buckets)
	if len(problems) > 0 || held["r2"] != switched {
		t.Fatalf("after the reshard: held %v, problems %v", held, problems)
	}
	cleaned := step(datav1.ReshardStep_RESHARD_STEP_CLEANUP)
	if n, err := c.Count(ctx, "r"); err != nil || n != rows {
		t.Fatalf("count %d, %v after the cleanup, want %d", n, err, rows)
	}
	if cleaned.GetCounts()[0].GetCount() != copied.GetCounts()[0].GetCount()+1 { // the deleted row was not copied
		t.Fatalf("cleanup deleted %v, copy copied %v", cleaned.GetCounts(), copied.GetCounts())
	}
	// The rebalancer was off before start (the operator's setting): the
	// cleanup leaves it so, and says so; the operator turns it on.
	if !strings.Contains(cleaned.GetSummary(), "the rebalancer is off") {
		t.Errorf("cleanup's summary %q", cleaned.GetSummary())
	}
	if st, err := c.Sharding().Status(ctx); err != nil || !st.GetSettings().GetDisabled() || st.GetSettings().GetCopyBytesPerS() != copyRate {
		t.Fatalf("rebalancer settings after the cleanup: %v, %v; want off as before, with the copy rate %d", st.GetSettings(), err, copyRate)
	}
	if err := c.Sharding().SetRebalancer(ctx, &datav1.RebalancerSettings{Disabled: false}, "disabled"); err != nil { // on, the copy rate kept
		t.Fatal(err)
	}
	if n, err := c.Count(ctx, "r"); err != nil || n != rows {
		t.Fatalf("count %d, %v after the reshard, want %d", n, err, rows)
	}
	// Drain r2: weight 0, the rebalancer (on now) takes every bucket back.
	if err := c.Sharding().SetWeight(ctx, "r2", 0); err != nil {
		t.Fatal(err)
	}
	pollOK(t, "r2 drained", func() error {
		st, err := c.Sharding().Status(ctx)
		if err != nil {
			return err
		}
		for _, r := range st.GetReplicasets() {
			if r.GetReplicasetId() == "r2" && (r.GetBuckets() != 0 || len(st.GetMoves()) > 0) {
				return fmt.Errorf("r2 still holds %d buckets, %d moves in progress", r.GetBuckets(), len(st.GetMoves()))
			}
		}
		return nil
	})
	held, problems = auditBuckets(ctx, t, map[string]string{"r1": addrs[0], "r2": addrs[1]}, buckets)
	if len(problems) > 0 || held["r1"] != buckets {
		t.Fatalf("after the drain: held %v, problems %v", held, problems)
	}
	if n, err := c.Count(ctx, "r"); err != nil || n != rows {
		t.Fatalf("count %d, %v after the drain, want %d", n, err, rows)
	}
}

// A write's request id moves with its bucket through a real move: writes
// applied on the first replicaset, sent again with their request ids
// after their buckets moved to the second, are answered as the first
// time, not applied again (each is an upsert adding 1: a second apply
// would show 2).
func TestRequestIDsMoveWithTheirBucketsInARealMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	addrs, startSecond, c := twoInstances(ctx, t, 5*time.Second)
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "u", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "n", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"k"}}, true)
		return err
	})
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dc := datav1.NewDataServiceClient(conn)
	const keys = 100
	reqs := make([]*datav1.WriteRequest, keys)
	for k := range reqs {
		ops := tuple.AppendOps(nil, []tuple.Op{{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "n"}, Arg: tuple.Uint(1)}})
		reqs[k] = &datav1.WriteRequest{RequestId: fmt.Appendf(nil, "req-%012d", k), Ops: []*datav1.Op{{Kind: datav1.OpKind_OP_KIND_UPSERT, Space: "u",
			Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(uint64(k)), tuple.Uint(1)}), Ops: ops}}}
		pollOK(t, "a write", func() error { _, err := dc.Write(ctx, reqs[k]); return err })
	}
	startSecond()
	pollOK(t, "the buckets balanced", func() error {
		st, err := c.Status(ctx, false)
		if err == nil && (len(st.GetReplicasets()) != 2 || st.GetReplicasets()[1].GetBucketCount() != buckets/2) {
			err = fmt.Errorf("replicasets %v", st.GetReplicasets())
		}
		return err
	})
	for k, req := range reqs {
		if _, err := dc.Write(ctx, req); err != nil {
			t.Fatalf("the retry of write %d: %v", k, err)
		}
	}
	rt, err := dc.GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[uint32]string{}
	for _, br := range rt.GetBuckets() {
		for b := br.GetFirst(); b <= br.GetLast(); b++ {
			holder[b] = br.GetReplicasetId()
		}
	}
	moved := 0
	for k := range uint64(keys) {
		r, _, err := c.Space("u").Select(ctx, []tuple.Value{tuple.Uint(k)}, client.RW)
		if err != nil || !r.Found {
			t.Fatalf("key %d: %+v, %v", k, r, err)
		}
		if n, _ := r.Tuple[1].AsUint(); n != 1 {
			t.Errorf("key %d holds %d after its write was sent twice under one request id, want 1", k, n)
		}
		if b, _ := c.Space("u").Bucket(ctx, tuple.Uint(k)); holder[b] == "r2" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key's bucket moved to r2: the test checked nothing across a move")
	}
	t.Logf("%d of %d keys' buckets moved to r2", moved, keys)
}
