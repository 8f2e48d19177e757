package changefeed

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/tuple"
)

// BenchmarkFeedLag: 32 writers replace rows of 200 entities, first with
// no feed, then with one (4 parts, JSON) into kfake; it reports the
// writers' rate each time and the lag from a batch's commit (its
// leader-stamped time) to a consumer reading its record, p50 and p99.
// Everything (cluster, broker, feed, writers, consumer) shares the
// machine: a rough figure, for a short run.
//
//	go test -run '^$' -bench FeedLag -benchtime 1x ./changefeed/
func BenchmarkFeedLag(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, b, 1)
	k := broker(b, 0, "")
	defer k.Close()
	const writers, perWriter = 32, 200
	writeAll := func() float64 {
		start := time.Now()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					e := uint64(w*perWriter+i) % 200
					if _, err := c.Batch().Replace("o", tuple.Tuple{tuple.Uint(e), tuple.Uint(1), tuple.String("x")}).Do(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(writers*perWriter) / time.Since(start).Seconds()
	}
	for range b.N {
		without := writeAll()
		p := startFeed(ctx, b, baseConfig(c, k, "a"))
		waitStarted(ctx, b, c, "f", 4, p)
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics(testTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		var lags []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			for len(lags) < writers*perWriter && ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				now := time.Now()
				fs.EachRecord(func(rec *kgo.Record) {
					r, err := ParseRecord(rec.Value)
					if err == nil {
						lags = append(lags, now.Sub(r.Time))
					}
				})
			}
		}()
		with := writeAll()
		<-done
		cl.Close()
		p.stop(b)
		slices.Sort(lags)
		if len(lags) < writers*perWriter {
			b.Fatalf("%d records of %d", len(lags), writers*perWriter)
		}
		b.ReportMetric(without, "writes/s-no-feed")
		b.ReportMetric(with, "writes/s-feed")
		b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "lag-p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "lag-p99-ms")
	}
}
