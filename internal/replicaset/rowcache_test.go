package replicaset

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// A point read of the database, through the row cache, never returns a
// tuple older than the last write committed before the read began, nor a
// tuple that a committed delete or bucket cleanup removed: readers run
// beside the applying goroutine, which replaces the keys again and again,
// deletes them, and sends their bucket away and takes it back (a range
// deletion of all its tuples).
func TestReadsThroughTheRowCacheAreNeverStale(t *testing.T) {
	for _, size := range []int64{DefaultRowCacheBytes, 2 << 10} { // roomy, and evicting all the time
		t.Run(fmt.Sprintf("cache=%d", size), func(t *testing.T) {
			f := newFixture(t)
			f.sm.SetRowCacheBytes(size)
			f.setup()
			const shop, bucket = 4, 4
			sp := f.sm.Schema().ByID(1)
			keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			// Ops are numbered n = 1, 2, ...; a replace at n writes price n.
			// floor[i]: the n of the last op on key i whose commit has
			// finished; delStarted[i]: the n of the last delete (or
			// cleanup) of key i that has started. A read that began when
			// floor was f0 must find a price of at least f0 (no older
			// write), or nothing only if a delete at f0 or later started.
			floor := make([]atomic.Int64, len(keys))
			delStarted := make([]atomic.Int64, len(keys))
			var stop atomic.Bool
			var wg sync.WaitGroup
			var reads atomic.Int64
			errs := make(chan error, 4)
			defer func() { stop.Store(true); wg.Wait() }() // also when the writer fails the test
			for range 3 {
				wg.Go(func() {
					for n := 0; !stop.Load(); n++ {
						i := n % len(keys)
						f0 := floor[i].Load()
						st, found, err := f.sm.Get(f.db, bucket, sp.ID(), key(t, tuple.Uint(shop), tuple.String(keys[i])))
						if err != nil {
							errs <- err
							return
						}
						reads.Add(1)
						if !found {
							if d := delStarted[i].Load(); d < f0 {
								errs <- fmt.Errorf("key %s: not found, but op %d (committed before the read) wrote it and no delete since", keys[i], f0)
								return
							}
							continue
						}
						tp, err := tuple.DecodeTuple(st.Tuple)
						if err != nil {
							errs <- err
							return
						}
						price, _ := tp[2].AsDouble()
						if got := int64(price); got < f0 {
							errs <- fmt.Errorf("key %s: read the write of op %d; op %d was committed before the read began", keys[i], got, f0)
							return
						}
					}
				})
			}
			gen := uint64(1)
			for n := int64(1); n <= 600 && len(errs) == 0; n++ {
				i := int(n) % len(keys)
				switch {
				case n%97 == 0:
					// The bucket goes away and comes back empty: every key
					// is gone.
					for j := range keys {
						delStarted[j].Store(n)
					}
					gen++
					f.setBucket(bucket, rspb.BucketState_STATE_SENDING, gen, "rs2")
					f.setBucket(bucket, rspb.BucketState_STATE_GARBAGE, gen, "rs2")
					gen++
					f.setBucket(bucket, rspb.BucketState_STATE_RECEIVING, gen, "rs2")
					f.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: bucket, Generation: gen, Last: true}}}}})
					if out := f.setBucket(bucket, rspb.BucketState_STATE_ACTIVE, gen, "rs2"); out.Refused != nil {
						t.Fatalf("bucket %d not active again: %s", bucket, out.Refused)
					}
					for j := range keys {
						floor[j].Store(n)
					}
				case n%5 == 0:
					delStarted[i].Store(n)
					f.ok(&rspb.Batch{Bucket: bucket, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: key(t, tuple.Uint(shop), tuple.String(keys[i]))}}})
					floor[i].Store(n)
				default:
					tp := offer(shop, keys[i], float64(n))
					f.ok(&rspb.Batch{Bucket: bucket, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: key(t, tp[0], tp[1]), Tuple: enc(tp)}}})
					floor[i].Store(n)
				}
			}
			stop.Store(true)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if reads.Load() == 0 {
				t.Fatal("no read ran")
			}
			// The cache served reads at all: a key just written is a hit.
			tk := f.sm.k.tuple(bucket, 1, key(t, tuple.Uint(shop), tuple.String("zz")))
			tp := offer(shop, "zz", 1)
			f.ok(&rspb.Batch{Bucket: bucket, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: key(t, tp[0], tp[1]), Tuple: enc(tp)}}})
			if _, hit, _ := f.sm.rows.read(bucket, tk); !hit && size == DefaultRowCacheBytes {
				t.Fatal("a row just written is not in the row cache")
			}
		})
	}
}

// A reader's fill of a miss is refused once a commit came after the
// reader's lookup: the value it read may be older than that commit's.
func TestARowCacheFillAfterACommitIsRefused(t *testing.T) {
	k := newKeys(7)
	c := newRowCache(1 << 20)
	key := k.tuple(9, 1, []byte("k"))
	_, hit, seq := c.read(9, key)
	if hit {
		t.Fatal("hit in an empty cache")
	}
	c.stage(9, key, []byte("new"))
	c.commit()
	c.fill(9, key, []byte("old"), seq)
	if v, hit, _ := c.read(9, key); !hit || string(v) != "new" {
		t.Fatalf("after a commit and a late fill: %q, %v; want the commit's row", v, hit)
	}
	// A range deletion of the bucket outdates its rows; a fill from before
	// it is refused, one after it is kept.
	_, _, seq = c.read(9, key)
	c.stageRange(k, k.bucketTuples(9), storage.PrefixEnd(k.bucketTuples(9)))
	c.commit()
	if _, hit, _ := c.read(9, key); hit {
		t.Fatal("a row of a cleaned-up bucket is still a hit")
	}
	c.fill(9, key, []byte("new"), seq)
	if _, hit, _ := c.read(9, key); hit {
		t.Fatal("a fill from before the cleanup was kept")
	}
	_, _, seq = c.read(9, key)
	c.fill(9, key, nil, seq)
	if v, hit, _ := c.read(9, key); !hit || v != nil {
		t.Fatalf("a fill of an absent key: %q, %v; want a hit saying no tuple", v, hit)
	}
	// Other buckets' rows and other kinds of keys are untouched by it.
	other := k.tuple(10, 1, []byte("k"))
	c.stage(10, other, []byte("x"))
	c.commit()
	c.stageRange(k, k.bucketCounts(10), storage.PrefixEnd(k.bucketCounts(10)))
	c.stageRange(k, k.bucketTuples(9), storage.PrefixEnd(k.bucketTuples(9)))
	c.commit()
	if v, hit, _ := c.read(10, other); !hit || string(v) != "x" {
		t.Fatalf("bucket 10's row after deletions elsewhere: %q, %v", v, hit)
	}
	// A deletion wider than one bucket outdates everything.
	c.stageRange(k, k.sub(storage.DataTuple, 0), storage.PrefixEnd(k.sub(storage.DataTuple, 0)))
	c.commit()
	if _, hit, _ := c.read(10, other); hit {
		t.Fatal("a row survived a deletion of every tuple")
	}
}

// The copy into a receiving bucket keeps its rows out of the row cache,
// and no row cached before it (a reader's "no such key") survives it.
func TestTheCopyLeavesNoStaleRowInTheCache(t *testing.T) {
	f := newFixture(t)
	f.setup()
	const bucket = 9
	sp := f.sm.Schema().ByID(1)
	f.setBucket(bucket, rspb.BucketState_STATE_SENDING, 2, "rs2")
	f.setBucket(bucket, rspb.BucketState_STATE_GARBAGE, 2, "rs2")
	f.setBucket(bucket, rspb.BucketState_STATE_RECEIVING, 3, "rs2")
	tp := offer(bucket, "k", 5)
	k := key(t, tp[0], tp[1])
	if _, found, err := f.sm.Get(f.db, bucket, sp.ID(), k); err != nil || found {
		t.Fatalf("before the copy: found %v, err %v", found, err)
	}
	if _, hit, _ := f.sm.rows.read(bucket, f.sm.k.tuple(bucket, 1, k)); !hit {
		t.Fatal("the reader's miss was not cached: the test tests nothing")
	}
	f.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: bucket, Generation: 3, Last: true,
		Tuples: []*rspb.CopiedTuple{{SpaceId: 1, Key: k, Version: 77, Tuple: enc(tp)}}}}}}})
	st, found, err := f.sm.Get(f.db, bucket, sp.ID(), k)
	if err != nil || !found || st.Version != 77 {
		t.Fatalf("after the copy: %+v, found %v, err %v; want the copied tuple (version 77)", st, found, err)
	}
}
