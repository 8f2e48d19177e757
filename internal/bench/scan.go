package bench

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardkit/shardkit/client"
)

// scanFailures is how many failed pages in a row end a client's scan.
const scanFailures = 10

// scanWork is one client's scan loop: it reads the space from its start,
// page by page, and again when it ends, until the count of rows (shared by
// the clients) or the deadline. A failed page is counted and the scan
// resumes after the last whole page read (scanFailures in a row end it).
// Each row read is an operation (a read); each page's latency (the time
// its rows took to arrive, decoded) is recorded.
func scanWork(ctx context.Context, cfg Config, c *client.Client, deadline time.Time, issued, done, failed *atomic.Int64) worker {
	r := worker{hist: newHist(cfg.Timeout)}
	page := cmp.Or(cfg.PageSize, 1000)
	sp := c.Space(cfg.Space)
	cursor, failures := "", 0
	for ctx.Err() == nil && failures < scanFailures {
		read, stop, pageFailed := 0, false, false
		t0 := time.Now()
		for row, err := range sp.Scan(ctx, client.ScanOptions{Cursor: cursor, PageSize: page}) {
			if err != nil {
				if ctx.Err() != nil {
					return r
				}
				r.errors++
				failed.Add(1)
				if r.firstErr == nil {
					r.firstErr = err
				}
				pageFailed = true
				break
			}
			if cfg.Count > 0 && issued.Add(1) > cfg.Count {
				stop = true
				break
			}
			read++
			r.reads++
			done.Add(1)
			if read%page == 0 {
				now := time.Now()
				_ = r.hist.RecordValue(max(now.Sub(t0).Microseconds(), 1))
				t0 = now
				cursor, failures = row.Cursor(), 0
				if !deadline.IsZero() && !now.Before(deadline) {
					stop = true
					break
				}
			}
		}
		switch {
		case stop:
			return r
		case pageFailed:
			failures++
		case read == 0 && cursor == "":
			r.errors++
			failed.Add(1)
			r.firstErr = fmt.Errorf("a scan of %s read no row (preload it)", cfg.Space)
			return r
		default:
			cursor = "" // the scan ended: from the start again
		}
	}
	return r
}

// bucketCount returns the cluster's bucket count, from its status (1 when
// it cannot be read: a range then reads bucket 1).
func bucketCount(ctx context.Context, c *client.Client) uint32 {
	st, err := c.Status(ctx, false)
	if err != nil {
		return 1
	}
	var n uint32
	for _, rs := range st.GetReplicasets() {
		n += rs.GetBucketCount()
	}
	return max(n, 1)
}
