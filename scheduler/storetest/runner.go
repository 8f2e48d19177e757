package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardkit/shardkit/scheduler"
)

// RunRunner runs the Runner's tests on stores of f as subtests of t.
func RunRunner(t *testing.T, f Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(e env)
	}{
		{"ChangesPassBetweenStagesByFieldInterest", testPassOn},
		{"OneStageAtATimeOnAnOffer", testOneAtATime},
		{"MaxParallelCapsAStage", testMaxParallel},
		{"FailuresAreRetriedThenDeadLettered", testFailures},
		{"LoopGuardTrips", testLoopGuard},
		{"TimersFireOnTheClock", testTimers},
		{"ConflictRerunsTheStage", testConflictRerun},
		{"FencedRunnerWritesNothing", testFencedRunner},
		{"ATriggerOutlivesItsRunner", testTriggerOutlivesRunner},
		{"AfterSaveIsCalledAtLeastOnce", testAfterSaveHook},
		{"RescanUsesTheLowPriorityLane", testRescan},
		{"AWakeupReadsItsShardAlone", testWakeupReadsItsShard},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(env{t: t, f: f})
		})
	}
}

// funcStage is a Stage of two functions; a nil Should answers Now.
type funcStage struct {
	should func(ctx context.Context, o scheduler.Offer, s scheduler.State) (scheduler.Decision, error)
	proc   func(ctx context.Context, o scheduler.Offer, s scheduler.State) (scheduler.Result, error)
}

func (f funcStage) ShouldProcess(ctx context.Context, o scheduler.Offer, s scheduler.State) (scheduler.Decision, error) {
	if f.should == nil {
		return scheduler.Now(), nil
	}
	return f.should(ctx, o, s)
}

func (f funcStage) Process(ctx context.Context, o scheduler.Offer, s scheduler.State) (scheduler.Result, error) {
	return f.proc(ctx, o, s)
}

type afterStage struct {
	funcStage
	after func(ctx context.Context, o scheduler.Offer, s scheduler.State) error
}

func (a afterStage) AfterSave(ctx context.Context, o scheduler.Offer, s scheduler.State) error {
	return a.after(ctx, o, s)
}

// running is a started Runner.
type running struct {
	r   *scheduler.Runner
	reg *prometheus.Registry
}

func startRunner(t *testing.T, cfg scheduler.Config) running {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	r, err := scheduler.NewRunner(cfg)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return running{r: r, reg: reg}
}

// waitFor polls cond until it holds, or fails the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric reads a counter of a stage from reg (0 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name, stage string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "stage" && lp.GetValue() == stage {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// metricSum adds a counter's values over all its labels.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// setField returns body with field f set to the JSON value v.
func setField(t *testing.T, body []byte, f string, v any) []byte {
	t.Helper()
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("decode body %s: %v", body, err)
	}
	b, _ := json.Marshal(v)
	m[f] = b
	out, _ := json.Marshal(m)
	return out
}

func intField(body []byte, f string) int {
	n, _ := strconv.Atoi(Field(body, f))
	return n
}

// quiet waits until no shard has a changed-offer mark and no queue holds
// an entry due by now.
func quiet(t *testing.T, s scheduler.Store, stages []string, now func() time.Time) {
	t.Helper()
	waitFor(t, "the runner to go quiet", func() bool {
		for sh := range s.Shards() {
			cs, err := s.Changes(ctx(t), scheduler.Lease{Shard: sh}, 1)
			if err != nil || len(cs) > 0 {
				return false
			}
		}
		for _, st := range stages {
			n, earliest, err := s.Stats(ctx(t), st)
			if err != nil || (n > 0 && !earliest.After(now())) {
				return false
			}
		}
		return true
	})
}

func testPassOn(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(k string) {
		mu.Lock()
		defer mu.Unlock()
		calls[k]++
	}
	got := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[k]
	}
	stages := []scheduler.StageConfig{
		{ID: "a", Stage: funcStage{
			should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
				if Field(o.Body, "a_done") != "" {
					return scheduler.Skip(), nil
				}
				return scheduler.Now(), nil
			},
			proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
				count("a.process")
				return scheduler.Result{Body: setField(t, o.Body, "a_done", true)}, nil
			}}},
		{ID: "b", Fields: []string{"a_done"}, OwnFields: []string{"b_done"}, Stage: funcStage{
			should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
				count("b.should")
				if Field(o.Body, "a_done") == "" || Field(o.Body, "b_done") != "" {
					return scheduler.Skip(), nil
				}
				return scheduler.Now(), nil
			},
			proc: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
				count("b.process")
				return scheduler.Result{Patch: scheduler.Patch{"b_done": json.RawMessage("true")}}, nil
			}}},
		{ID: "c", Fields: []string{"unrelated"}, Stage: funcStage{
			should: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Decision, error) {
				count("c.should")
				return scheduler.Skip(), nil
			},
			proc: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
				count("c.process")
				return scheduler.Result{}, nil
			}}},
		{ID: "d", Stage: funcStage{
			should: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Decision, error) {
				return scheduler.Decision{}, errors.New("d's ShouldProcess is broken")
			},
			proc: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
				count("d.process")
				return scheduler.Result{State: str("ran " + StateString(st))}, nil
			}}},
	}
	rn := startRunner(t, scheduler.Config{Store: s, Stages: stages})
	put(t, s, "offer-1", `{"n":1}`, 0)
	waitFor(t, "stage b's patch", func() bool {
		o, _ := load(t, s, "offer-1", "")
		return Field(o.Body, "b_done") == "true" && Field(o.Body, "a_done") == "true"
	})
	quiet(t, s, []string{"a", "b", "c", "d"}, time.Now)
	if got("a.process") != 1 || got("b.process") != 1 || got("c.process") != 0 {
		t.Errorf("a ran %d times, b %d, c %d; want once, once, never", got("a.process"), got("b.process"), got("c.process"))
	}
	// Now nothing runs on its own; a change of field n asks the stages
	// with an interest in every field (a, d), not b (a_done) or c
	// (unrelated); a change of unrelated asks c.
	bBefore, cBefore := got("b.should"), got("c.should")
	put(t, s, "offer-1", `{"n":2,"a_done":true,"b_done":true}`, scheduler.AnyVersion)
	quiet(t, s, []string{"a", "b", "c", "d"}, time.Now)
	if got("b.should") != bBefore || got("c.should") != cBefore {
		t.Errorf("a change of n asked b %d and c %d more times, want 0", got("b.should")-bBefore, got("c.should")-cBefore)
	}
	put(t, s, "offer-1", `{"n":2,"a_done":true,"b_done":true,"unrelated":1}`, scheduler.AnyVersion)
	waitFor(t, "c to be asked about unrelated", func() bool { return got("c.should") == cBefore+1 })
	// d's ShouldProcess fails: d is queued anyway, after every change it
	// hears of (creation, a's change, b's change).
	if _, st := load(t, s, "offer-1", "d"); got("d.process") == 0 || StateString(st) == "" {
		t.Errorf("stage d with a failing ShouldProcess never ran (%d calls, state %q)", got("d.process"), StateString(st))
	}
	if n := metric(t, rn.reg, "shardkit_scheduler_processed_total", "a"); n != 1 {
		t.Errorf("processed_total{a} = %v, want 1", n)
	}
}

func testOneAtATime(e env) {
	t, f := e.t, e.f
	open := f(t, 4)
	const offers, rounds = 12, 4
	stageIDs := []string{"s1", "s2", "s3"}
	var mu sync.Mutex
	active := map[string]int{}
	worst := 0
	enter := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		active[id]++
		worst = max(worst, active[id])
	}
	leave := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		active[id]--
	}
	var stages []scheduler.StageConfig
	for _, sid := range stageIDs {
		stages = append(stages, scheduler.StageConfig{ID: sid, OwnFields: []string{sid}, MaxParallel: 8, Stage: funcStage{
			should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
				if intField(o.Body, sid) >= rounds {
					return scheduler.Skip(), nil
				}
				return scheduler.Now(), nil
			},
			proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
				enter(o.ID)
				defer leave(o.ID)
				time.Sleep(time.Millisecond) // widen the window two calls would share
				n := intField(o.Body, sid)
				if n >= rounds {
					return scheduler.Result{}, nil
				}
				res := scheduler.Result{Patch: scheduler.Patch{sid: json.RawMessage(strconv.Itoa(n + 1))}}
				if n+1 < rounds {
					// Triggers that come while the offer is in the queue
					// make one entry (S2), and its own change asks only
					// the others: a stage with more to do asks for itself.
					res.Timer = time.Now()
				}
				return res, nil
			}}})
	}
	// Two runners split the shards; the offers' stages run on both.
	s := open(t)
	var runners []running
	for i := range 2 {
		runners = append(runners, startRunner(t, scheduler.Config{Store: open(t), Stages: stages, MaxChain: 1000, LeaseTTL: 1500 * time.Millisecond, Owner: fmt.Sprintf("runner-%d", i)}))
	}
	// The first runner may take every shard before the second announces
	// itself; then it lets half go.
	waitFor(t, "two shards for each runner", func() bool {
		return len(runners[0].r.Shards()) == 2 && len(runners[1].r.Shards()) == 2
	})
	for i := range offers {
		put(t, s, fmt.Sprintf("o%d", i), `{}`, 0)
	}
	waitFor(t, "every stage's rounds on every offer", func() bool {
		for i := range offers {
			o, _ := load(t, s, fmt.Sprintf("o%d", i), "")
			for _, sid := range stageIDs {
				if intField(o.Body, sid) < rounds {
					return false
				}
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if worst != 1 {
		t.Fatalf("%d Process calls ran at once on one offer, want 1", worst)
	}
}

func testFailures(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	clock := NewFakeClock(time.Now())
	good := func(sid string) func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
		return func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
			return scheduler.Result{State: str(sid + " done")}, nil
		}
	}
	failing := map[string]func(ctx context.Context) (scheduler.Result, error){
		"panics": func(context.Context) (scheduler.Result, error) { panic("a stage's bug") },
		"errors": func(context.Context) (scheduler.Result, error) {
			return scheduler.Result{}, errors.New("a stage's error")
		},
		"hangs": func(ctx context.Context) (scheduler.Result, error) {
			<-ctx.Done() // until the stage's timeout
			return scheduler.Result{}, nil
		},
	}
	const maxAttempts = 3
	var stages []scheduler.StageConfig
	for sid, fail := range failing {
		stages = append(stages, scheduler.StageConfig{ID: sid, MaxAttempts: maxAttempts, Timeout: 200 * time.Millisecond, Stage: funcStage{
			proc: func(ctx context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
				if o.ID == "bad" {
					return fail(ctx)
				}
				return good(sid)(ctx, o, st)
			}}})
	}
	rn := startRunner(t, scheduler.Config{Store: s, Stages: stages, Clock: clock, RetryInitial: time.Second, RetryMax: time.Minute})
	put(t, s, "bad", `{}`, 0)
	for sid := range failing {
		waitFor(t, sid+"'s first failure", func() bool { return metric(t, rn.reg, "shardkit_scheduler_retries_total", sid) >= 1 })
	}
	// The failing offer waits for its retry on the clock; another offer
	// passes every stage meanwhile.
	put(t, s, "good", `{}`, 0)
	for sid := range failing {
		waitFor(t, sid+" on the good offer", func() bool {
			_, st := load(t, s, "good", sid)
			return StateString(st) == sid+" done"
		})
		if dl, _ := s.DeadLetters(ctx(t), sid, 10); len(dl) != 0 {
			t.Fatalf("%s dead-lettered %v before its retries were due", sid, dl)
		}
	}
	for sid := range failing {
		waitFor(t, sid+"'s dead letter", func() bool {
			clock.Advance(time.Minute) // every retry's backoff is at most RetryMax
			dl, err := s.DeadLetters(ctx(t), sid, 10)
			// The counter follows the store's write: wait for both.
			return err == nil && len(dl) == 1 && dl[0].OfferID == "bad" && dl[0].Attempts == maxAttempts &&
				metric(t, rn.reg, "shardkit_scheduler_dead_letters_total", sid) == 1
		})
		if n := metric(t, rn.reg, "shardkit_scheduler_retries_total", sid); n < maxAttempts {
			t.Errorf("retries_total{%s} = %v, want at least %d", sid, n, maxAttempts)
		}
		if es := check(t, s, scheduler.ShardOf("bad", 2), "bad"); indexOf(es, sid) >= 0 {
			t.Errorf("the dead letter of %s is still in its queue: %+v", sid, es)
		}
	}
}

func indexOf(es []scheduler.Entry, stage string) int {
	for i, e := range es {
		if e.Stage == stage {
			return i
		}
	}
	return -1
}

func testLoopGuard(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	// ping moves x from even to odd, pong from odd to even: each change
	// triggers the other, for ever but for the guard.
	flip := func(parity int) scheduler.Stage {
		return funcStage{
			should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
				if intField(o.Body, "x")%2 != parity {
					return scheduler.Skip(), nil
				}
				return scheduler.Now(), nil
			},
			proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
				x := intField(o.Body, "x")
				if x%2 != parity {
					return scheduler.Result{}, nil
				}
				return scheduler.Result{Body: setField(t, o.Body, "x", x+1)}, nil
			}}
	}
	const maxChain = 5
	rn := startRunner(t, scheduler.Config{Store: s, MaxChain: maxChain, Stages: []scheduler.StageConfig{
		{ID: "ping", Fields: []string{"x"}, Stage: flip(0)},
		{ID: "pong", Fields: []string{"x"}, Stage: flip(1)},
	}})
	put(t, s, "o", `{"x":0}`, 0)
	trips := func() float64 { return metricSum(t, rn.reg, "shardkit_scheduler_loop_guard_trips_total") }
	waitFor(t, "the loop guard", func() bool { return trips() >= 1 })
	quiet(t, s, []string{"ping", "pong"}, time.Now)
	// The guard reads the chain of the change it passes on, and a stage
	// asked reads the offer as it is then, so the chain may run one save
	// past MaxChain+1, never further.
	if o, _ := load(t, s, "o", ""); intField(o.Body, "x") < maxChain+1 || intField(o.Body, "x") > maxChain+2 {
		t.Fatalf("x = %d after the guard, want %d or %d", intField(o.Body, "x"), maxChain+1, maxChain+2)
	}
	// An outside write starts a new chain.
	put(t, s, "o", `{"x":100}`, scheduler.AnyVersion)
	waitFor(t, "a second trip", func() bool { return trips() >= 2 })
	quiet(t, s, []string{"ping", "pong"}, time.Now)
	if o, _ := load(t, s, "o", ""); intField(o.Body, "x") < 100+maxChain+1 || intField(o.Body, "x") > 100+maxChain+2 {
		t.Fatalf("x = %d after the second chain, want %d or %d", intField(o.Body, "x"), 100+maxChain+1, 100+maxChain+2)
	}
}

func testTimers(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	clock := NewFakeClock(time.Now().Truncate(time.Second))
	const exposure = 180 * 24 * time.Hour
	withdraw := funcStage{
		should: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
			if st.Value == nil {
				return scheduler.Now(), nil
			}
			return scheduler.Skip(), nil
		},
		proc: func(_ context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
			if st.Value == nil { // first sight: withdraw after the exposure
				due := clock.Now().Add(exposure)
				return scheduler.Result{State: str(due.Format(time.RFC3339Nano)), Timer: due}, nil
			}
			due, err := time.Parse(time.RFC3339Nano, StateString(st))
			if err != nil {
				return scheduler.Result{}, err
			}
			if clock.Now().Before(due) {
				return scheduler.Result{Timer: due}, nil // not yet: keep the timer
			}
			return scheduler.Result{Body: setField(t, o.Body, "withdrawn", true), State: str("withdrawn")}, nil
		}}
	// remind asks, in ShouldProcess, to run an hour after it first hears
	// of the offer (a Decision At).
	remind := funcStage{
		should: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
			if st.Value != nil {
				return scheduler.Skip(), nil
			}
			return scheduler.At(clock.Now().Add(time.Hour)), nil
		},
		proc: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
			return scheduler.Result{State: str("reminded")}, nil
		}}
	rn := startRunner(t, scheduler.Config{Store: s, Clock: clock, Stages: []scheduler.StageConfig{{ID: "withdraw", Stage: withdraw}, {ID: "remind", Stage: remind}}})
	put(t, s, "o", `{"title":"sofa"}`, 0)
	sh := scheduler.ShardOf("o", 2)
	waitFor(t, "the timers to be set", func() bool {
		es := check(t, s, sh, "o")
		return len(es) == 2 && es[0].Stage == "remind" && es[0].Timer && es[0].Due.Equal(clock.Now().Add(time.Hour)) &&
			es[1].Stage == "withdraw" && es[1].Timer && es[1].Due.Equal(clock.Now().Add(exposure))
	})
	if _, st := load(t, s, "o", "remind"); st.Value != nil {
		t.Fatal("remind ran before its hour")
	}
	// The queue metrics read the store: one entry each, none due yet.
	for _, sid := range []string{"withdraw", "remind"} {
		if d, lag := metric(t, rn.reg, "shardkit_scheduler_queue_depth", sid), metric(t, rn.reg, "shardkit_scheduler_oldest_due_lag_seconds", sid); d != 1 || lag != 0 {
			t.Errorf("queue_depth{%s} = %v, oldest_due_lag_seconds = %v; want 1 and 0", sid, d, lag)
		}
	}
	clock.Advance(time.Hour)
	waitFor(t, "the reminder", func() bool {
		_, st := load(t, s, "o", "remind")
		return StateString(st) == "reminded"
	})
	clock.Advance(exposure - time.Hour - time.Second)
	quiet(t, s, []string{"withdraw", "remind"}, clock.Now)
	if o, _ := load(t, s, "o", ""); Field(o.Body, "withdrawn") != "" {
		t.Fatal("withdrawn a second before the timer")
	}
	clock.Advance(time.Second)
	waitFor(t, "the withdrawal", func() bool {
		o, _ := load(t, s, "o", "")
		return Field(o.Body, "withdrawn") == "true"
	})
	if es := check(t, s, sh, "o"); len(es) != 0 {
		t.Fatalf("after the withdrawal, queues = %+v, want none", es)
	}
}

func testConflictRerun(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := 0
	slow := funcStage{
		should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
			if Field(o.Body, "seen_a") == Field(o.Body, "a") {
				return scheduler.Skip(), nil
			}
			return scheduler.Now(), nil
		},
		proc: func(ctx context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
			mu.Lock()
			runs++
			first := runs == 1
			mu.Unlock()
			if first {
				entered <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return scheduler.Result{}, ctx.Err()
				}
			}
			return scheduler.Result{Body: setField(t, o.Body, "seen_a", json.RawMessage(Field(o.Body, "a")))}, nil
		}}
	rn := startRunner(t, scheduler.Config{Store: s, Stages: []scheduler.StageConfig{{ID: "slow", Stage: slow}}})
	v := put(t, s, "o", `{"a":1}`, 0)
	<-entered
	put(t, s, "o", `{"a":2}`, v) // while the stage works on version v
	close(release)
	waitFor(t, "the stage to see a=2", func() bool {
		o, _ := load(t, s, "o", "")
		return Field(o.Body, "seen_a") == "2" && Field(o.Body, "a") == "2"
	})
	if n := metric(t, rn.reg, "shardkit_scheduler_conflicts_total", "slow"); n < 1 {
		t.Fatalf("conflicts_total{slow} = %v, want at least 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs < 2 {
		t.Fatalf("the stage ran %d times, want a rerun after the conflict", runs)
	}
}

// spyStore reports the errors of the runner's saves (SaveMany).
type spyStore struct {
	scheduler.Store
	saveErrs chan error
}

func (s *spyStore) SaveMany(ctx context.Context, l scheduler.Lease, svs []scheduler.Save) ([]scheduler.Saved, []error, error) {
	out, errs, err := s.Store.SaveMany(ctx, l, svs)
	for i := range svs {
		e := err
		if e == nil {
			e = errs[i]
		}
		select {
		case s.saveErrs <- e:
		default:
		}
	}
	return out, errs, err
}

func testFencedRunner(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	spy := &spyStore{Store: s, saveErrs: make(chan error, 10)}
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	blocker := funcStage{proc: func(ctx context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
			return scheduler.Result{}, ctx.Err()
		}
		return scheduler.Result{Body: setField(t, o.Body, "done", true), State: str("stale")}, nil
	}}
	rn := startRunner(t, scheduler.Config{Store: spy, Owner: "old", Stages: []scheduler.StageConfig{{ID: "blocker", Stage: blocker}}})
	v := put(t, s, "o", `{}`, 0)
	<-entered
	// Another runner takes the shard while the stage works. The old runner
	// may claim the freed shard again first (it claims free shards): then
	// it is freed again, until the thief has it.
	waitFor(t, "the thief to take shard 0", func() bool {
		infos, err := s.Leases(ctx(t))
		if err != nil || len(infos) != 1 {
			t.Fatalf("Leases = %+v, %v; want shard 0", infos, err)
		}
		if infos[0].Owner == "old" {
			if err := s.Release(ctx(t), scheduler.Lease{Shard: 0, Owner: "old", Epoch: infos[0].Epoch}); err != nil && !errors.Is(err, scheduler.ErrFenced) {
				t.Fatal(err)
			}
		}
		got, err := s.Claim(ctx(t), "thief", []int{0}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) == 1
	})
	close(release)
	select {
	case err := <-spy.saveErrs:
		if !errors.Is(err, scheduler.ErrFenced) {
			t.Fatalf("the old runner's save = %v, want ErrFenced", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the old runner never tried to save")
	}
	o, st := load(t, s, "o", "blocker")
	if o.Version != v || Field(o.Body, "done") != "" || st.Value != nil {
		t.Fatalf("the fenced runner wrote: offer %s v%d state %q", o.Body, o.Version, StateString(st))
	}
	if es := check(t, s, 0, "o"); len(es) != 1 || es[0].Stage != "blocker" || es[0].Attempts != 0 {
		t.Fatalf("queues = %+v, want blocker's entry untouched for the new holder", es)
	}
	if n := metric(t, rn.reg, "shardkit_scheduler_processed_total", "blocker"); n != 0 {
		t.Fatalf("processed_total{blocker} = %v, want 0", n)
	}
	if got := rn.r.Shards(); len(got) != 0 {
		t.Fatalf("the fenced runner still thinks it holds %v", got)
	}
}

func testAfterSaveHook(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	var mu sync.Mutex
	var seen []string
	stage := afterStage{
		funcStage: funcStage{proc: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
			if st.Value != nil {
				return scheduler.Result{}, nil
			}
			return scheduler.Result{State: str("notify")}, nil
		}},
		after: func(_ context.Context, _ scheduler.Offer, st scheduler.State) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, StateString(st))
			if len(seen) == 1 {
				return errors.New("the mail server is down")
			}
			return nil
		},
	}
	rn := startRunner(t, scheduler.Config{Store: s, Stages: []scheduler.StageConfig{{ID: "mailer", Stage: stage}}})
	put(t, s, "o", `{}`, 0)
	waitFor(t, "AfterSave to succeed", func() bool {
		ps, err := s.AfterSaves(ctx(t), scheduler.Lease{Shard: 0}, "mailer", 10)
		mu.Lock()
		defer mu.Unlock()
		return err == nil && len(ps) == 0 && len(seen) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if seen[0] != "notify" || seen[1] != "notify" {
		t.Fatalf("AfterSave saw states %q, want the saved state", seen)
	}
	if n := metric(t, rn.reg, "shardkit_scheduler_retries_total", "mailer"); n < 1 {
		t.Fatalf("retries_total{mailer} = %v after a failed AfterSave, want >= 1", n)
	}
}

func testRescan(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	clock := NewFakeClock(time.Now())
	var mu sync.Mutex
	version := 1 // the stage's logic version: bumping it makes old offers stale
	stage := funcStage{
		should: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
			mu.Lock()
			defer mu.Unlock()
			if StateString(st) == strconv.Itoa(version) {
				return scheduler.Skip(), nil
			}
			return scheduler.Now(), nil
		},
		proc: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			return scheduler.Result{State: str(strconv.Itoa(version))}, nil
		}}
	startRunner(t, scheduler.Config{Store: s, Clock: clock, RescanEvery: time.Hour, Stages: []scheduler.StageConfig{{ID: "catalog", Stage: stage}}})
	for i := range 3 {
		put(t, s, fmt.Sprintf("o%d", i), `{}`, 0)
	}
	stateIs := func(want string) func() bool {
		return func() bool {
			for i := range 3 {
				if _, st := load(t, s, fmt.Sprintf("o%d", i), "catalog"); StateString(st) != want {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "the first pass", stateIs("1"))
	mu.Lock()
	version = 2 // no offer changes: only the rescan finds them
	mu.Unlock()
	waitFor(t, "the rescan", func() bool {
		clock.Advance(time.Hour)
		return stateIs("2")()
	})
}

func testMaxParallel(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	const limit, offers = 2, 12
	var mu sync.Mutex
	running, worst, done := 0, 0, 0
	stage := funcStage{
		should: func(_ context.Context, _ scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
			if st.Value != nil {
				return scheduler.Skip(), nil
			}
			return scheduler.Now(), nil
		},
		proc: func(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
			mu.Lock()
			running++
			worst = max(worst, running)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // widen the window calls would share
			mu.Lock()
			running--
			done++
			mu.Unlock()
			return scheduler.Result{State: str("done")}, nil
		}}
	startRunner(t, scheduler.Config{Store: s, Stages: []scheduler.StageConfig{{ID: "heavy", MaxParallel: limit, Stage: stage}}})
	for i := range offers {
		put(t, s, fmt.Sprintf("o%d", i), `{}`, 0)
	}
	waitFor(t, "every offer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done >= offers
	})
	mu.Lock()
	defer mu.Unlock()
	if worst > limit {
		t.Fatalf("%d Process calls of one stage ran at once, want at most MaxParallel %d", worst, limit)
	}
}

// deafStore never lists changed-offer marks: a runner on it saves but dies
// (here: stops) before asking the other stages.
type deafStore struct {
	scheduler.Store
	saved chan struct{}
}

func (d *deafStore) Changes(context.Context, scheduler.Lease, int) ([]scheduler.Change, error) {
	return nil, nil
}

func (d *deafStore) SaveMany(ctx context.Context, l scheduler.Lease, svs []scheduler.Save) ([]scheduler.Saved, []error, error) {
	out, errs, err := d.Store.SaveMany(ctx, l, svs)
	for i := range svs {
		if err == nil && errs[i] == nil && out[i].Changed {
			select {
			case d.saved <- struct{}{}:
			default:
			}
		}
	}
	return out, errs, err
}

func testTriggerOutlivesRunner(e env) {
	t, f := e.t, e.f
	open := f(t, 1)
	s := open(t)
	stages := func() []scheduler.StageConfig {
		return []scheduler.StageConfig{
			{ID: "first", Stage: funcStage{
				should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
					if Field(o.Body, "first") != "" {
						return scheduler.Skip(), nil
					}
					return scheduler.Now(), nil
				},
				proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
					return scheduler.Result{Body: setField(t, o.Body, "first", true)}, nil
				}}},
			{ID: "second", Fields: []string{"first"}, Stage: funcStage{
				should: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
					if Field(o.Body, "first") == "" || Field(o.Body, "second") != "" {
						return scheduler.Skip(), nil
					}
					return scheduler.Now(), nil
				},
				proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
					return scheduler.Result{Body: setField(t, o.Body, "second", true)}, nil
				}}},
		}
	}
	// The offer enters first's queue directly (its creation's mark is
	// taken away), so only first's save can trigger second.
	put(t, s, "o", `{}`, 0)
	l := claimOne(t, s, "setup", 0, time.Minute)
	for _, c := range changes(t, s, l) {
		if err := s.AckChange(ctx(t), l, c); err != nil {
			t.Fatal(err)
		}
	}
	offer(t, s, l, scheduler.Entry{Stage: "first", OfferID: "o", Due: time.Now()})
	if err := s.Release(ctx(t), l); err != nil {
		t.Fatal(err)
	}
	deaf := &deafStore{Store: open(t), saved: make(chan struct{}, 1)}
	c, stop := context.WithCancel(context.Background())
	r, err := scheduler.NewRunner(scheduler.Config{Store: deaf, Stages: stages(), Owner: "dies", PollInterval: 20 * time.Millisecond, LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	select {
	case <-deaf.saved:
	case <-time.After(waitLimit):
		t.Fatal("the first runner never saved first's result")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if o, _ := load(t, s, "o", ""); Field(o.Body, "first") != "true" || Field(o.Body, "second") != "" {
		t.Fatalf("after the first runner: %s, want first's change only", o.Body)
	}
	// The next runner finds the mark and asks second.
	startRunner(t, scheduler.Config{Store: open(t), Stages: stages(), Owner: "next"})
	waitFor(t, "second to run after the first runner died", func() bool {
		o, _ := load(t, s, "o", "")
		return Field(o.Body, "second") == "true"
	})
}

// readCounter is a Store that counts the runner's reads of queues and
// marks by shard.
type readCounter struct {
	scheduler.Store
	mu    sync.Mutex
	reads map[int]int
}

func (c *readCounter) count(shard int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[shard]++
}

func (c *readCounter) Peek(ctx context.Context, l scheduler.Lease, stage string, now time.Time, limit int) ([]scheduler.Entry, time.Time, error) {
	c.count(l.Shard)
	return c.Store.Peek(ctx, l, stage, now, limit)
}

func (c *readCounter) Changes(ctx context.Context, l scheduler.Lease, limit int) ([]scheduler.Change, error) {
	c.count(l.Shard)
	return c.Store.Changes(ctx, l, limit)
}

// testWakeupReadsItsShard: a runner that holds every shard and is never
// polled (PollInterval of an hour) works an offer put in one shard from
// the store's wake-ups alone, reading the queues and marks of that shard
// and of no other.
func testWakeupReadsItsShard(e env) {
	t, f := e.t, e.f
	const shards = 8
	s := f(t, shards)(t)
	c := &readCounter{Store: s, reads: map[int]int{}}
	var mu sync.Mutex
	done := map[string]bool{}
	stage := funcStage{proc: func(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		done[o.ID] = true
		return scheduler.Result{State: str("seen")}, nil
	}}
	rn := startRunner(t, scheduler.Config{Store: c, Stages: []scheduler.StageConfig{{ID: "s", Stage: stage}}, PollInterval: time.Hour})
	waitFor(t, "the runner to hold every shard", func() bool { return len(rn.r.Shards()) == shards })
	// Its first rounds read every shard, and the claims' wake-ups may
	// still be on their way: so three offers, one after another, and at
	// least one of them must be worked reading its own shard alone.
	var seen []string
	prev := -1 // the shard of the offer before: its call's end wants it again
	for i := range 3 {
		id := "o" + strconv.Itoa(i)
		sh := scheduler.ShardOf(id, shards)
		before := prev
		prev = sh
		c.mu.Lock()
		clear(c.reads)
		c.mu.Unlock()
		put(t, s, id, `{}`, 0)
		waitFor(t, "offer "+id+" to be processed by wake-ups alone", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done[id]
		})
		c.mu.Lock()
		reads := maps.Clone(c.reads)
		c.mu.Unlock()
		if reads[sh] == 0 {
			t.Fatalf("offer %s of shard %d was processed with no read of its shard: reads by shard %v", id, sh, reads)
		}
		if before != sh {
			delete(reads, before)
		}
		if reads[sh] > 0 && len(reads) == 1 {
			return
		}
		seen = append(seen, fmt.Sprintf("offer %s of shard %d: reads by shard %v", id, sh, reads))
	}
	t.Fatalf("every wake-up for one shard read other shards too: %s", strings.Join(seen, "; "))
}
