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
