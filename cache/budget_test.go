package cache

import "testing"

func TestBudgetThrottlesBelowHalf(t *testing.T) {
	t.Parallel()
	b := newBudget(10, 0.5)
	for i := range 4 {
		b.failure()
		if !b.allow() {
			t.Fatalf("throttled after %d failures of 10 tokens", i+1)
		}
	}
	b.failure() // 5 tokens left: not more than half
	if b.allow() {
		t.Fatalf("allowed with half the tokens left")
	}
	b.success() // 5.5
	if !b.allow() {
		t.Fatalf("still throttled above half")
	}
	for range 100 {
		b.success()
	}
	for range 20 {
		b.failure()
	}
	if b.allow() {
		t.Fatalf("allowed at zero tokens")
	}
	b.success()
	if b.allow() {
		t.Fatalf("one success lifted the throttle from zero")
	}
}
