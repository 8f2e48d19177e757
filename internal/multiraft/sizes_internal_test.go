package multiraft

import "testing"

func TestAppliedSizesKeepsTheShortestTailWithinItsBytes(t *testing.T) {
	var z appliedSizes
	if got := z.keepFrom(10); got != 0 {
		t.Fatalf("keepFrom of nothing applied = %d, want 0", got)
	}
	z.applied(3, 100) // entries 1-3
	z.applied(5, 40)  // 4-5
	z.applied(9, 30)  // 6-9
	if got := z.inLog(); got != 170 {
		t.Fatalf("inLog = %d, want 170", got)
	}
	for _, c := range []struct{ keep, want uint64 }{
		{keep: 200, want: 3}, // all fit, but the first batch is the least to truncate through
		{keep: 70, want: 3},  // 4-9 hold 70 bytes
		{keep: 69, want: 5},  // only 6-9 (30) fit
		{keep: 30, want: 5},
		{keep: 29, want: 9}, // the last batch alone is more: keep none
		{keep: 0, want: 9},
	} {
		if got := z.keepFrom(c.keep); got != c.want {
			t.Errorf("keepFrom(%d) = %d, want %d", c.keep, got, c.want)
		}
	}
	z.truncated(4) // through the middle of the second batch: it stays counted
	if got := z.inLog(); got != 70 {
		t.Fatalf("inLog after truncating through 4 = %d, want 70 (batches 4-5 and 6-9)", got)
	}
	z.truncated(5)
	if got := z.inLog(); got != 30 {
		t.Fatalf("inLog after truncating through 5 = %d, want 30", got)
	}
	z.applied(12, 8)
	if got, want := z.inLog(), uint64(38); got != want {
		t.Fatalf("inLog after another batch = %d, want %d", got, want)
	}
	z.reset()
	if got := z.inLog(); got != 0 || len(z.marks) != 0 {
		t.Fatalf("after a snapshot: inLog %d, %d marks; want 0, 0", got, len(z.marks))
	}
	z.applied(20, 5)
	if got := z.inLog(); got != 5 {
		t.Fatalf("inLog after the snapshot and a batch = %d, want 5", got)
	}
}
