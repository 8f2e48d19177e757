package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"
)

type noopStage struct{}

func (noopStage) ShouldProcess(context.Context, Offer, State) (Decision, error) { return Now(), nil }
func (noopStage) Process(context.Context, Offer, State) (Result, error)         { return Result{}, nil }

func TestNewRunnerRefusals(t *testing.T) {
	t.Parallel()
	ok := StageConfig{ID: "a", Stage: noopStage{}}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Stages: []StageConfig{ok}}},
		{"no stage", Config{Store: Store(nil)}},
		{"a stage twice", Config{Stages: []StageConfig{ok, ok}}},
		{"a negative duration", Config{Stages: []StageConfig{ok}, LeaseTTL: -time.Second}},
		{"a stage without code", Config{Stages: []StageConfig{{ID: "b"}}}},
	}
	for _, tc := range tests {
		if tc.name != "no store" && tc.cfg.Store == nil {
			tc.cfg.Store = fakeStore{}
		}
		if _, err := NewRunner(tc.cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: NewRunner = %v, want ErrInvalid", tc.name, err)
		}
	}
}

// fakeStore is a Store that NewRunner only holds (it calls nothing).
type fakeStore struct{ Store }

func TestBackoffDoublesUpToMax(t *testing.T) {
	t.Parallel()
	r, err := NewRunner(Config{Store: fakeStore{}, Stages: []StageConfig{{ID: "a", Stage: noopStage{}}}, RetryInitial: time.Second, RetryMax: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := r.backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

// runnersStore is a Store with live runners and free shards, for the
// lease keeping's sums.
type runnersStore struct {
	Store
	live []string
}

func (s runnersStore) Announce(context.Context, string, time.Duration) error { return nil }
func (s runnersStore) Runners(context.Context) ([]string, error)             { return s.live, nil }
func (s runnersStore) Leases(context.Context) ([]LeaseInfo, error)           { return nil, nil }
func (s runnersStore) Shards() int                                           { return 0 }

// A stage's RateLimit and MaxParallel are over all the runners: each live one takes its
// share, and takes it anew as runners come and go.
func TestARateLimitAndMaxParallelAreSharedByTheLiveRunners(t *testing.T) {
	st := &runnersStore{live: []string{"a", "b", "c", "d"}}
	r, err := NewRunner(Config{Store: st, Owner: "a", Stages: []StageConfig{{ID: "s", Stage: noopStage{}, RateLimit: 100, MaxParallel: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	r.keepLeases(t.Context())
	if got, slots := r.byID["s"].limiter.Limit(), r.byID["s"].slots(); got != 25 || slots != 2 {
		t.Fatalf("with 4 live runners the limit is %v and the slots %d, want 25 and 2", got, slots)
	}
	st.live = []string{"a"}
	r.keepLeases(t.Context())
	if got, slots := r.byID["s"].limiter.Limit(), r.byID["s"].slots(); got != 100 || slots != 10 {
		t.Fatalf("alone the limit is %v and the slots %d, want 100 and 10", got, slots)
	}
}
