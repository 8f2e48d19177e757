package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// bucketCounts returns each replicaset's bucket count in the cluster's
// status ("r1=150 r2=150").
func bucketCounts(ctx context.Context, c *client.Client) string {
	st, err := c.Status(ctx, false)
	if err != nil {
		return "status: " + err.Error()
	}
	s := ""
	for _, rs := range st.GetReplicasets() {
		s += fmt.Sprintf("%s=%d ", rs.GetReplicaset().GetReplicasetId(), rs.GetBucketCount())
	}
	return s
}

// Scans run while the rebalancer moves half the buckets to a second
// replicaset and a writer replaces rows and inserts new ones: every scan
// reads every row written before it once, none missed or repeated, and a
// new row at most once, also a scan that stops every 97 rows and resumes
// from its cursor.
func TestAScanFollowsBucketsThatMove(t *testing.T) {
	if testing.Short() {
		t.Skip("moves buckets between two instances")
	}
	const buckets, rows = 300, 1500
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var addrs []string
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
	c, err := client.New(ctx, client.Config{Peers: addrs, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Space("m")
	for deadline := time.Now().Add(90 * time.Second); ; {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "m", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = s.Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.String("v")})
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the space: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for k := range uint64(rows) {
		if _, err := s.Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("v")}); err != nil {
			t.Fatalf("replace %d: %v", k, err)
		}
	}
	before := bucketCounts(ctx, c)
	start(1)

	// A writer replaces rows during the scans.
	var wg sync.WaitGroup
	var stop atomic.Bool
	var writes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k, n := uint64(0), uint64(rows); !stop.Load(); k = (k + 7) % rows {
			if _, err := s.Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String(fmt.Sprint("w", k))}); err == nil {
				writes.Add(1)
			}
			if k%5 == 0 { // and new rows, which a scan may read or not, but once
				if _, err := s.Insert(ctx, tuple.Tuple{tuple.Uint(n), tuple.String("new")}); err == nil {
					writes.Add(1)
				}
				n++
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	scan := func(resume bool) {
		t.Helper()
		seen := map[uint64]int{}
		where := map[uint64]string{}
		cursor := ""
		for pass := 0; ; pass++ {
			read := 0
			o := client.ScanOptions{Cursor: cursor, PageSize: 13}
			if resume {
				o.Limit = 97
			}
			for r, err := range s.Scan(ctx, o) {
				if err != nil {
					t.Fatalf("a scan during the moves (%s): %v", bucketCounts(ctx, c), err)
				}
				k, _ := r.Tuple[0].AsUint()
				seen[k]++
				where[k] += fmt.Sprintf(" [bucket %d after cursor %q]", r.Bucket, cursor)
				read++
				cursor = r.Cursor()
			}
			if !resume || read < 97 {
				break
			}
		}
		for k := range uint64(rows) {
			if seen[k] != 1 {
				t.Fatalf("a scan (resumed from cursors: %v) read row %d %d times (%s), while buckets moved (%s before, %s now)", resume, k, seen[k], where[k], before, bucketCounts(ctx, c))
			}
		}
		for k, n := range seen {
			if n > 1 {
				t.Fatalf("a scan (resumed from cursors: %v) read row %d, inserted during the scans, %d times (%s)", resume, k, n, where[k])
			}
		}
	}
	scans, moving := 0, 0
	for deadline := time.Now().Add(4 * time.Minute); ; {
		from := bucketCounts(ctx, c)
		scan(scans%2 == 1)
		scans++
		to := bucketCounts(ctx, c)
		if from != to {
			moving++
		}
		if to == fmt.Sprintf("r1=%d r2=%d ", buckets/2, buckets/2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("buckets did not balance in time (%s), %d scans, %d during moves", to, scans, moving)
		}
	}
	if moving == 0 {
		t.Fatalf("none of %d scans ran while buckets moved (%s before, balanced after)", scans, before)
	}
	t.Logf("%d scans, %d of them while buckets moved, %d writes meanwhile", scans, moving, writes.Load())
}
