package scheduler

import (
	"slices"
	"testing"
	"time"
)

func shardsOf(ls []Lease) []int {
	var out []int
	for _, l := range ls {
		out = append(out, l.Shard)
	}
	return out
}

// shardWants gives each shard once per wake-up, every held shard after a
// wake-up for all, and a shard whose due time came; it forgets what it
// gave and the shards no longer held.
func TestShardWantsGivesWokenAndDueShards(t *testing.T) {
	held := []Lease{{Shard: 1}, {Shard: 2}, {Shard: 3}}
	now := time.Unix(1000, 0)
	w := newShardWants()
	if got := shardsOf(w.take(held, now)); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("first take = %v, want every held shard", got)
	}
	if got := w.take(held, now); len(got) != 0 {
		t.Fatalf("take with no wake-up = %v, want none", shardsOf(got))
	}
	w.add(2)
	w.add(9) // not held
	if got := shardsOf(w.take(held, now)); !slices.Equal(got, []int{2}) {
		t.Fatalf("take after a wake-up of 2 = %v, want [2]", got)
	}
	select {
	case <-w.wake:
	default:
		t.Fatal("add did not signal the loop")
	}
	w.putBack(3)
	select {
	case <-w.wake:
		t.Fatal("putBack signalled the loop")
	default:
	}
	w.setDue(1, now.Add(time.Second))
	if got := shardsOf(w.take(held, now)); !slices.Equal(got, []int{3}) {
		t.Fatalf("take = %v, want [3] (1 is due later)", got)
	}
	if got := w.earliest(held); !got.Equal(now.Add(time.Second)) {
		t.Fatalf("earliest = %v, want %v", got, now.Add(time.Second))
	}
	if got := shardsOf(w.take(held, now.Add(time.Second))); !slices.Equal(got, []int{1}) {
		t.Fatalf("take when 1 is due = %v, want [1]", got)
	}
	if got := w.earliest(held); !got.IsZero() {
		t.Fatalf("earliest after 1 was taken = %v, want none", got)
	}
	w.setDue(2, now)
	if got := w.take(held[:1], now); len(got) != 0 || !w.earliest(held).IsZero() {
		t.Fatalf("a due shard no longer held: take = %v, earliest %v; want it forgotten", shardsOf(got), w.earliest(held))
	}
	w.add(-1)
	if got := shardsOf(w.take(held, now)); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("take after a wake-up for all = %v, want every held shard", got)
	}
}

// A wake-up dropped for a full buffer is followed by one for every shard.
func TestWakeupSenderFollowsADropWithAWakeupForAll(t *testing.T) {
	ch := make(chan Wakeup, 1)
	s := NewWakeupSender(ch)
	s.Send(Wakeup{Shard: 1, Stage: "a"})
	s.Send(Wakeup{Shard: 2, Stage: "a"}) // dropped: the buffer is full
	if w := <-ch; w != (Wakeup{Shard: 1, Stage: "a"}) {
		t.Fatalf("first = %+v", w)
	}
	s.Send(Wakeup{Shard: 3, Stage: "a"})
	if w := <-ch; w.Shard != -1 {
		t.Fatalf("after a drop got %+v, want a wake-up for every shard", w)
	}
	s.Send(Wakeup{Shard: 4, Stage: "b"}) // the 3 went with the wake-up for all
	if w := <-ch; w != (Wakeup{Shard: 4, Stage: "b"}) {
		t.Fatalf("after the wake-up for all got %+v, want shard 4's", w)
	}
	select {
	case w := <-ch:
		t.Fatalf("unexpected %+v", w)
	default:
	}
}
