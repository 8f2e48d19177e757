package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// With SHARDKIT_ROBUSTNESS_REPLICASETS above 1, the keys' buckets move
// between the replicasets at random while the clients run and the nemesis
// strikes (a move interrupted anywhere must lose and double
// nothing), and the run ends with an audit of every replicaset's own
// bucket records.

// moveStats counts the mover's requests.
type moveStats struct {
	asked, refused int
	last           string
}

// moveBuckets asks, every 0.3–1.5 s until stop closes, for the bucket of a
// random key (k0..keys) to move to another replicaset. A request the
// cluster refuses (a move of that bucket under way, no leader now) is
// counted and skipped: the point is moves interrupted by the faults.
func (r *run) moveBuckets(ctx context.Context, stop <-chan struct{}) moveStats {
	rng := rand.New(rand.NewPCG(r.cfg.seed, 7))
	var st moveStats
	sp := r.c.admin.Space(spaceName)
	for {
		select {
		case <-stop:
			return st
		case <-time.After(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))):
		}
		k := uint64(rng.IntN(r.cfg.traffic.keys + 1))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := func() error {
			b, err := sp.Bucket(cctx, tuple.Uint(k))
			if err != nil {
				return err
			}
			from, all, err := r.holderOf(cctx, b)
			if err != nil {
				return err
			}
			others := slices.DeleteFunc(all, func(id string) bool { return id == from })
			if len(others) == 0 {
				return fmt.Errorf("no replicaset to move bucket %d to", b)
			}
			to := others[rng.IntN(len(others))]
			_, err = r.c.admin.Sharding().MoveBucket(cctx, b, to)
			if err == nil {
				r.t.Logf("mover: bucket %d of k%d: %s -> %s", b, k, from, to)
			}
			return err
		}()
		cancel()
		st.asked++
		if err != nil {
			st.refused++
			st.last = err.Error()
		}
	}
}

// holderOf returns the replicaset group 0 places bucket b on, as an
// instance sees it, and every replicaset's id.
func (r *run) holderOf(ctx context.Context, b uint32) (string, []string, error) {
	conn, err := r.c.admin.Conn(r.c.addrs[int(b)%len(r.c.addrs)])
	if err != nil {
		return "", nil, err
	}
	resp, err := datav1.NewDataServiceClient(conn).GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		return "", nil, err
	}
	var ids []string
	for _, rs := range resp.GetReplicasets() {
		ids = append(ids, rs.GetReplicasetId())
	}
	for _, br := range resp.GetBuckets() {
		if br.GetFirst() <= b && b <= br.GetLast() {
			return br.GetReplicasetId(), ids, nil
		}
	}
	return "", nil, fmt.Errorf("bucket %d is in no range of the routing table", b)
}

// auditBuckets checks every replicaset's own records (its leader's): each
// bucket is held (active, or receiving a copy) by exactly one replicaset
// and the held buckets add up to the bucket count.
func (r *run) auditBuckets(ctx context.Context) {
	t := r.t
	// Moves still under way (resumed after the last fault) end first: a
	// bucket between its destination's RECEIVING and the switch is on
	// both records (active on its source, receiving on its destination,
	// which serves nothing of it until the source freezes), as it should be.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := r.c.admin.Sharding().Status(sctx)
		cancel()
		if err == nil && !st.GetStale() && len(st.GetMoves()) == 0 { // a stale view may miss moves
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("audit: moves still under way 2 minutes after the faults: %v %v", st.GetMoves(), err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	conn, err := r.c.admin.Conn(r.c.addrs[0])
	if err != nil {
		t.Errorf("audit: %v", err)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	routing, err := datav1.NewDataServiceClient(conn).GetRouting(rctx, &datav1.GetRoutingRequest{})
	cancel()
	if err != nil {
		t.Errorf("audit: routing: %v", err)
		return
	}
	holder := map[uint32]string{}
	problems := 0
	for _, rs := range routing.GetReplicasets() {
		var resp *rspb.BucketsResponse
		for _, m := range rs.GetMembers() {
			mc, err := r.c.admin.Conn(m.GetAddress())
			if err != nil {
				continue
			}
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err = rspb.NewBucketServiceClient(mc).Buckets(bctx, &rspb.BucketsRequest{ReplicasetId: rs.GetReplicasetId()})
			cancel()
			if err == nil {
				break
			}
			resp = nil
		}
		if resp == nil {
			t.Errorf("audit: no member of %s answered for its buckets", rs.GetReplicasetId())
			return
		}
		for b, s := range resp.GetBuckets() {
			if s.GetState() != rspb.BucketState_STATE_ACTIVE && s.GetState() != rspb.BucketState_STATE_RECEIVING {
				continue
			}
			if holder[b] != "" {
				t.Errorf("audit: bucket %d is held by %s and %s", b, holder[b], rs.GetReplicasetId())
				problems++
			}
			holder[b] = rs.GetReplicasetId()
		}
	}
	for b := uint32(1); b <= routing.GetBucketCount(); b++ {
		if holder[b] == "" {
			t.Errorf("audit: bucket %d is held by no replicaset", b)
			problems++
		}
	}
	if problems == 0 {
		t.Logf("audit: %d buckets, each held by exactly one of %d replicasets", routing.GetBucketCount(), len(routing.GetReplicasets()))
	}
}
