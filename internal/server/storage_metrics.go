package server

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardkit/shardkit/internal/storage"
)

// storageMetrics tells an operator how the instance's Pebble database keeps
// up with its writes: the stalls in which every commit (a round's fsync, a
// state machine's apply) waited for a flush or a compaction (registered
// before the database opens: Open takes writeStall), and the gauges that
// lead up to them, read from Pebble when scraped (registered by
// watchDB once it is open).
type storageMetrics struct {
	stalls     *prometheus.CounterVec
	stallTime  *prometheus.CounterVec
	db         *pebble.DB
	descL0     *prometheus.Desc
	descMem    *prometheus.Desc
	descDebt   *prometheus.Desc
	descCompac *prometheus.Desc
	descFlush  *prometheus.Desc
	descIngest *prometheus.Desc
	descFlushT *prometheus.Desc
}

func newStorageMetrics(reg prometheus.Registerer) *storageMetrics {
	m := &storageMetrics{
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_storage_write_stalls_total",
			Help: "Write stalls of this instance's database: every commit waited until a flush (reason \"memtable count limit reached\") or a compaction (\"L0 file count limit exceeded\") caught up.",
		}, []string{"reason"}),
		stallTime: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_storage_write_stall_seconds_total",
			Help: "Time this instance's database held every commit back in write stalls, by reason.",
		}, []string{"reason"}),
		descL0:     prometheus.NewDesc("shardkit_storage_l0_sublevels", fmt.Sprintf("Sublevels of level 0 of this instance's database (compacted from %d, writes stall at %d).", storage.L0CompactionSublevels, storage.L0StopWritesThreshold), nil, nil),
		descMem:    prometheus.NewDesc("shardkit_storage_memtables", "Memtables of this instance's database, the one being written and those waiting to be flushed.", nil, nil),
		descDebt:   prometheus.NewDesc("shardkit_storage_compaction_debt_bytes", "Bytes this instance's database estimates it must compact to bring its levels into shape.", nil, nil),
		descCompac: prometheus.NewDesc("shardkit_storage_compactions_running", "Compactions of this instance's database under way.", nil, nil),
		descFlush:  prometheus.NewDesc("shardkit_storage_flushes_total", "Memtable flushes of this instance's database since it opened.", nil, nil),
		descIngest: prometheus.NewDesc("shardkit_storage_ingests_total", "Ingests of tables (a bucket copy's) into this instance's database since it opened.", nil, nil),
		descFlushT: prometheus.NewDesc("shardkit_storage_flushable_tables_total", "Tables ingested into this instance's database over keys still in its memtable, as flushables (each rotated the memtable, flushed before its time), since it opened; counted when the flushable is flushed.", nil, nil),
	}
	// Every reason is served from the start, at 0: a stall counter that
	// appears only with the first stall cannot be told apart from one
	// that is not scraped, and rate() and increase() miss that stall.
	for _, r := range writeStallReasons {
		m.stalls.WithLabelValues(r)
		m.stallTime.WithLabelValues(r)
	}
	reg.MustRegister(m.stalls, m.stallTime)
	return m
}

// writeStallReasons are the reasons Pebble gives a write stall
// (pebble.WriteStallBeginInfo.Reason, set only in DB.maybeInduceWriteStall
// of cockroachdb/pebble/v2): too many memtables queued for a flush, or too
// many sublevels in level 0 waiting for a compaction. A reason a later
// Pebble adds still gets its series, at its first stall.
var writeStallReasons = []string{
	"memtable count limit reached",
	"L0 file count limit exceeded",
}

// watchDB registers the gauges of the open database db.
func (m *storageMetrics) watchDB(reg prometheus.Registerer, db *pebble.DB) {
	m.db = db
	reg.MustRegister(m)
}

// writeStall is storage.Options.OnWriteStall.
func (m *storageMetrics) writeStall(reason string, took time.Duration) {
	m.stalls.WithLabelValues(reason).Inc()
	m.stallTime.WithLabelValues(reason).Add(took.Seconds())
}

// Describe implements prometheus.Collector.
func (m *storageMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.descL0
	ch <- m.descMem
	ch <- m.descDebt
	ch <- m.descCompac
	ch <- m.descFlush
	ch <- m.descIngest
	ch <- m.descFlushT
}

// Collect implements prometheus.Collector.
func (m *storageMetrics) Collect(ch chan<- prometheus.Metric) {
	g := storage.ReadGauges(m.db)
	ch <- prometheus.MustNewConstMetric(m.descL0, prometheus.GaugeValue, float64(g.L0Sublevels))
	ch <- prometheus.MustNewConstMetric(m.descMem, prometheus.GaugeValue, float64(g.Memtables))
	ch <- prometheus.MustNewConstMetric(m.descDebt, prometheus.GaugeValue, float64(g.CompactionDebt))
	ch <- prometheus.MustNewConstMetric(m.descCompac, prometheus.GaugeValue, float64(g.Compactions))
	ch <- prometheus.MustNewConstMetric(m.descFlush, prometheus.CounterValue, float64(g.Flushes))
	ch <- prometheus.MustNewConstMetric(m.descIngest, prometheus.CounterValue, float64(g.Ingests))
	ch <- prometheus.MustNewConstMetric(m.descFlushT, prometheus.CounterValue, float64(g.FlushableTables))
}
