package router

import (
	"sync/atomic"
	"time"
)

// workers runs the router's calls (a stream request's, a Multi item's) on
// goroutines that wait for the next call when one is done, instead of on a
// new goroutine each. A new goroutine starts with an 8 KiB stack, and a
// write's path (routing, the proposal's protobuf encoding) outgrows it: the
// stack copies were 6% of a leader's CPU under a write load
// (docs/benchmarks.md, "Fuller rounds, fuller messages"). A worker keeps
// the stack it grew (until the garbage collector shrinks an idle one).
type workers struct {
	idle    chan func() // unbuffered: a send succeeds only when a worker waits
	started atomic.Int64
}

// workerIdle is how long a worker waits for a call before it ends.
const workerIdle = 10 * time.Second

func newWorkers() *workers { return &workers{idle: make(chan func())} }

// Go runs f on a waiting worker, or on a new one.
func (w *workers) Go(f func()) {
	select {
	case w.idle <- f:
	default:
		w.started.Add(1)
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil // what the call kept alive is not kept while the worker waits
		t.Reset(workerIdle)
		select {
		case f = <-w.idle:
		case <-t.C:
			return
		}
	}
}
