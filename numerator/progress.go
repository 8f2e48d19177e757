package numerator

import (
	"sync"
	"sync/atomic"
	"time"
)

// Phases of a run, in order, as Progress names them.
const (
	PhaseLoad  = "load"  // reading the offers (and a state that is not streamed) into per-shard sorters
	PhasePlan  = "plan"  // joining every shard's state and offers to decide what the run does
	PhaseWrite = "write" // writing the output tables
)

// Progress is where a run is, for Options.Progress.
type Progress struct {
	Phase string
	// Rows the phase has processed, and the rows it will process in all
	// (from the tables' footers, so an estimate: duplicates are merged).
	Rows, Total int64
	// Elapsed is the time since the phase began.
	Elapsed time.Duration
	// Done is set on the phase's last report.
	Done bool
}

// Rate is the phase's rows per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Rows) / p.Elapsed.Seconds()
}

// ETA estimates the phase's remaining time at its rate so far; false when
// there is no rate or total yet.
func (p Progress) ETA() (time.Duration, bool) {
	r := p.Rate()
	if r <= 0 || p.Total <= 0 || p.Done {
		return 0, false
	}
	left := max(p.Total-p.Rows, 0)
	return time.Duration(float64(left) / r * float64(time.Second)), true
}

// tracker counts a run's rows per phase and reports them to
// Options.Progress: when a phase begins and ends, and every period in
// between (from its own goroutine). A nil tracker counts nothing.
type tracker struct {
	fn     func(Progress)
	period time.Duration
	rows   atomic.Int64

	mu    sync.Mutex // serializes fn and guards the phase
	phase string
	total int64
	start time.Time

	stop chan struct{}
	done chan struct{}
}

func newTracker(fn func(Progress), period time.Duration) *tracker {
	if fn == nil {
		return nil
	}
	t := &tracker{fn: fn, period: period, stop: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t
}

func (t *tracker) loop() {
	defer close(t.done)
	tk := time.NewTicker(t.period)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.mu.Lock()
			if t.phase != "" {
				t.report(false)
			}
			t.mu.Unlock()
		}
	}
}

// report calls fn; t.mu is held.
func (t *tracker) report(done bool) {
	t.fn(Progress{Phase: t.phase, Rows: t.rows.Load(), Total: t.total, Elapsed: time.Since(t.start), Done: done})
}

// begin ends the current phase (its last report) and starts phase.
func (t *tracker) begin(phase string, total int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != "" {
		t.report(true)
	}
	t.phase, t.total, t.start = phase, total, time.Now()
	t.rows.Store(0)
	t.report(false)
}

func (t *tracker) add(n int64) {
	if t != nil {
		t.rows.Add(n)
	}
}

// finish ends the current phase, if the run got to one, and stops the
// reports.
func (t *tracker) finish(ok bool) {
	if t == nil {
		return
	}
	close(t.stop)
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != "" && ok {
		t.report(true)
	}
	t.phase = ""
}

// rowCounter batches a shard's row counts into the tracker.
type rowCounter struct {
	t *tracker
	n int64
}

const counterFlush = 1 << 14

func (c *rowCounter) add(n int64) {
	c.n += n
	if c.n >= counterFlush {
		c.t.add(c.n)
		c.n = 0
	}
}

func (c *rowCounter) flush() {
	c.t.add(c.n)
	c.n = 0
}
