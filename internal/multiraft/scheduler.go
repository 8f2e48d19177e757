package multiraft

import "sync"

// schedFlags say what work a group has waiting.
type schedFlags uint8

const (
	flagInput schedFlags = 1 << iota // messages, proposals, reads, reports
	flagTick                         // one Raft tick is due
	flagReady                        // the group may have a Ready to handle
)

// schedState is a group's place in the scheduler, guarded by scheduler.mu.
type schedState struct {
	queued     bool
	processing bool
	pending    schedFlags
}

// scheduler hands groups that have work to a small pool of workers. A group
// is in the queue at most once and is never processed by two workers at
// once: work that arrives while a worker holds the group is remembered in
// its pending flags and re-queues it when the worker is done. Each worker
// takes up to maxBatch groups per round so their writes share one fsync.
type scheduler struct {
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*group
	stopped  bool
	maxBatch int
}

func newScheduler(maxBatch int) *scheduler {
	s := &scheduler{maxBatch: maxBatch}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// enqueue records work for g and queues it unless it is already queued or
// being processed.
func (s *scheduler) enqueue(g *group, f schedFlags) {
	s.mu.Lock()
	st := &g.sched
	st.pending |= f
	if !st.queued && !st.processing && !s.stopped {
		st.queued = true
		s.queue = append(s.queue, g)
		s.cond.Signal()
	}
	s.mu.Unlock()
}

// take blocks until there is work (or the scheduler stops, then it returns
// nil) and claims up to maxBatch groups with their pending flags.
func (s *scheduler) take(block bool) ([]*group, []schedFlags) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for block && len(s.queue) == 0 && !s.stopped {
		s.cond.Wait()
	}
	if s.stopped || len(s.queue) == 0 {
		return nil, nil
	}
	n := min(len(s.queue), s.maxBatch)
	gs := make([]*group, n)
	copy(gs, s.queue[:n])
	s.queue = append(s.queue[:0], s.queue[n:]...)
	fs := make([]schedFlags, n)
	for i, g := range gs {
		g.sched.queued = false
		g.sched.processing = true
		fs[i] = g.sched.pending
		g.sched.pending = 0
	}
	return gs, fs
}

// done releases groups after a round; those that got new work meanwhile go
// back to the queue. again marks groups that still have a Ready to handle.
func (s *scheduler) done(gs []*group, again []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, g := range gs {
		st := &g.sched
		st.processing = false
		if again[i] {
			st.pending |= flagReady
		}
		if st.pending != 0 && !st.queued && !s.stopped {
			st.queued = true
			s.queue = append(s.queue, g)
			s.cond.Signal()
		}
	}
}

func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	s.queue = nil
	s.cond.Broadcast()
	s.mu.Unlock()
}
