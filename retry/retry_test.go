package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoffDoublesUpToMax(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset: %v, want Initial", d)
	}
	// An Initial above Max stays as set.
	b = Backoff{Initial: time.Second, Max: 100 * time.Millisecond}
	if d, e := b.Next(), b.Next(); d != time.Second || e != time.Second {
		t.Fatalf("Initial above Max: %v then %v, want 1s twice", d, e)
	}
}

func TestBackoffJitterStaysBelowTheWait(t *testing.T) {
	lower := false
	for range 100 {
		b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
		d := b.Next()
		if d > 100*time.Millisecond || d < 50*time.Millisecond {
			t.Fatalf("a wait of 100ms with jitter 0.5 drew %v", d)
		}
		lower = lower || d < 100*time.Millisecond
	}
	if !lower {
		t.Fatal("100 draws with jitter 0.5 all waited the whole 100ms")
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("a short sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a sleep under an ended context: %v, want Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("no sleep under an ended context: %v, want Canceled", err)
	}
}

var errTry = errors.New("try")

// noWait records the waits instead of sleeping.
func noWait(waits *[]time.Duration) func(context.Context, time.Duration) error {
	return func(_ context.Context, d time.Duration) error {
		*waits = append(*waits, d)
		return nil
	}
}

func TestRunCountsAttemptsAndWaitsTheBackoff(t *testing.T) {
	var waits []time.Duration
	p := Policy{Attempts: 3, Backoff: Backoff{Initial: time.Millisecond, Max: time.Second}, Wait: noWait(&waits)}
	calls := 0
	out, err := p.Run(t.Context(), func(n int) (Verdict, error) {
		if n != calls {
			t.Fatalf("attempt %d numbered %d", calls, n)
		}
		calls++
		return Again, errTry
	})
	if out != Exhausted || !errors.Is(err, errTry) || calls != 3 {
		t.Fatalf("%v %v after %d calls, want Exhausted with the last error after 3", out, err, calls)
	}
	if len(waits) != 2 || waits[0] != time.Millisecond || waits[1] != 2*time.Millisecond {
		t.Fatalf("waits %v, want 1ms and 2ms between the three attempts", waits)
	}
}

func TestRunFollowsAtOnceAndStops(t *testing.T) {
	var waits []time.Duration
	p := Policy{Attempts: 5, Backoff: Backoff{Initial: time.Second}, Wait: noWait(&waits)}
	calls := 0
	out, err := p.Run(t.Context(), func(int) (Verdict, error) {
		calls++
		if calls < 3 {
			return Follow, errTry
		}
		return Stop, nil
	})
	if out != Stopped || err != nil || calls != 3 || len(waits) != 0 {
		t.Fatalf("%v %v after %d calls and waits %v, want Stopped nil after 3 with no wait", out, err, calls, waits)
	}
}

func TestRunDoesNotCountASwitchWithinSwitchFor(t *testing.T) {
	var waits []time.Duration
	p := Policy{Attempts: 2, Switch: Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}, SwitchFor: time.Hour, Wait: noWait(&waits)}
	calls := 0
	out, err := p.Run(t.Context(), func(n int) (Verdict, error) {
		calls++
		if n != 0 {
			t.Fatalf("a switch was counted: attempt numbered %d", n)
		}
		if calls <= 10 {
			return Switch, errTry
		}
		return Stop, nil
	})
	if out != Stopped || err != nil || calls != 11 || len(waits) != 10 || waits[9] != 4*time.Millisecond {
		t.Fatalf("%v %v after %d calls and waits %v, want Stopped after 11 calls, 10 waits up to 4ms", out, err, calls, waits)
	}

	// Past SwitchFor a switch counts.
	p = Policy{Attempts: 2, Switch: Backoff{Initial: time.Millisecond}, SwitchFor: time.Nanosecond, Wait: noWait(&waits)}
	calls = 0
	out, _ = p.Run(t.Context(), func(int) (Verdict, error) { calls++; return Switch, errTry })
	if out != Exhausted || calls > 3 {
		t.Fatalf("%v after %d calls, want Exhausted after at most 3 (the first switch may fall within SwitchFor)", out, calls)
	}
}

func TestRunEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := Policy{Attempts: 100, Backoff: Backoff{Initial: time.Hour}}
	calls := 0
	out, err := p.Run(ctx, func(int) (Verdict, error) {
		calls++
		cancel()
		return Again, errTry
	})
	if out != Ended || !errors.Is(err, errTry) || calls != 1 {
		t.Fatalf("%v %v after %d calls, want Ended with the attempt's error after 1", out, err, calls)
	}
	// A redirect under an ended context ends too (no wait to notice it).
	calls = 0
	out, _ = p.Run(ctx, func(int) (Verdict, error) { calls++; return Follow, errTry })
	if out != Ended || calls != 1 {
		t.Fatalf("%v after %d calls, want Ended after 1", out, calls)
	}
}

func TestUnreachableRemembersAnAddressUntilItAnswers(t *testing.T) {
	var u Unreachable
	if u.Recent("a") {
		t.Fatal("an address never marked is unreachable")
	}
	u.Mark("a")
	if !u.Recent("a") || u.Recent("b") {
		t.Fatal("a marked address is not remembered alone")
	}
	u.Answered("a")
	if u.Recent("a") {
		t.Fatal("an address that answered is still passed over")
	}
	u.Mark("a")
	u.at["a"] = time.Now().Add(-PassOver - time.Millisecond)
	if u.Recent("a") {
		t.Fatalf("an address marked more than %v ago is still passed over", PassOver)
	}
}
