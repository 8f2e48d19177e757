package router

import (
	"sync"
	"testing"
)

// Concurrent calls each start a worker; once done, those workers take the
// calls that follow instead of new ones.
func TestWorkersAreReused(t *testing.T) {
	w := newWorkers()
	const n = 20
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(n)
	for range n {
		w.Go(func() {
			defer wg.Done()
			<-release
		})
	}
	if got := w.started.Load(); got != n {
		t.Fatalf("%d workers started for %d calls that all wait", got, n)
	}
	close(release)
	wg.Wait()
	// Each of them now waits for a call: a send that blocks until one
	// takes it (Go would start a new worker if none were waiting yet).
	wg.Add(n)
	for range n {
		w.idle <- wg.Done
	}
	wg.Wait()
	// Calls one after another find a waiting worker (all but the one that
	// ran the last call wait by now): Go starts none for them. Two more are
	// allowed, for calls that come before any of them is back waiting.
	const calls = 100
	for range calls {
		done := make(chan struct{})
		w.Go(func() { close(done) })
		<-done
	}
	if got := w.started.Load(); got > n+2 {
		t.Fatalf("%d workers started for %d calls at once and %d one after another, want at most %d", got, n, calls, n+2)
	}
}
