package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Runner's per-stage metrics. With a nil Registerer they are
// kept but never exported.
type metrics struct {
	processed  *prometheus.CounterVec
	conflicts  *prometheus.CounterVec
	retries    *prometheus.CounterVec
	dead       *prometheus.CounterVec
	loopGuard  *prometheus.CounterVec
	asked      *prometheus.CounterVec
	queueStats *queueCollector
}

func newMetrics(reg prometheus.Registerer, r *Runner) *metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"stage"})
	}
	m := &metrics{
		processed: counter("shardkit_scheduler_processed_total", "Process calls whose result was saved, by stage."),
		conflicts: counter("shardkit_scheduler_conflicts_total", "Saves refused because the offer or the state changed since it was read (the stage ran again), by stage."),
		retries:   counter("shardkit_scheduler_retries_total", "Failed Process or AfterSave calls (error, panic, timeout) retried with backoff, by stage."),
		dead:      counter("shardkit_scheduler_dead_letters_total", "Offers moved to a stage's dead letters after MaxAttempts failures, by stage."),
		loopGuard: counter("shardkit_scheduler_loop_guard_trips_total", "Changes not passed on because their chain of stage-made changes exceeded MaxChain, by the stage that made the last one (\"\" for an outside write)."),
		asked:     counter("shardkit_scheduler_should_process_total", "ShouldProcess calls made for changed offers, by stage."),
		queueStats: &queueCollector{
			r:     r,
			depth: prometheus.NewDesc("shardkit_scheduler_queue_depth", "Entries in a stage's queue (both lanes, every shard).", []string{"stage"}, nil),
			lag:   prometheus.NewDesc("shardkit_scheduler_oldest_due_lag_seconds", "How long the earliest due entry of a stage's queue has been due (0 when none is due).", []string{"stage"}, nil),
		},
	}
	if reg != nil {
		reg.MustRegister(m.processed, m.conflicts, m.retries, m.dead, m.loopGuard, m.asked, m.queueStats)
	}
	return m
}

// queueCollector reads each stage's queue depth and oldest due entry from
// the store when scraped.
type queueCollector struct {
	r          *Runner
	depth, lag *prometheus.Desc
}

// statsTimeout bounds one scrape's reads of the store.
const statsTimeout = 5 * time.Second

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.lag
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	now := c.r.clock.Now()
	for _, st := range c.r.stages {
		depth, earliest, err := c.r.store.Stats(ctx, st.cfg.ID)
		if err != nil {
			c.r.log.Warn("scheduler: queue stats", "stage", st.cfg.ID, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(depth), st.cfg.ID)
		lag := 0.0
		if !earliest.IsZero() && earliest.Before(now) {
			lag = now.Sub(earliest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag, st.cfg.ID)
	}
}
