package replicaset

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCopyPaceWithoutARateNeverWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a wait that waited would fail
	for _, p := range []*copyPace{{}, {rate: func() uint64 { return 0 }}} {
		if err := p.wait(ctx, 10*MaxChunkBytes); err != nil {
			t.Fatalf("no rate: %v", err)
		}
		if p.limiter() != nil {
			t.Fatal("no rate, but a limiter")
		}
	}
}

func TestCopyPaceTakesTheBytesCopied(t *testing.T) {
	var r atomic.Uint64
	r.Store(1) // a byte a second: nothing refills during the test
	p := &copyPace{rate: r.Load}
	if err := p.wait(t.Context(), 10<<10); err != nil {
		t.Fatal(err)
	}
	lim := p.limiter()
	if lim.Burst() != minCopyBurst {
		t.Fatalf("burst %d, want the least burst (%d)", lim.Burst(), minCopyBurst)
	}
	// The burst less what was taken, plus at most a byte a second since.
	if left := lim.Tokens(); left < minCopyBurst-10<<10 || left > minCopyBurst-10<<10+60 {
		t.Fatalf("%.0f bytes left after copying 10KiB of a %d burst", left, minCopyBurst)
	}
	// More than is left, at a byte a second, cannot be had before a
	// deadline: not even a chunk of a small copy gets through at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := p.wait(ctx, 100<<10)
	if err == nil || !strings.Contains(err.Error(), "the pace (1 bytes/s)") {
		t.Fatalf("a wait past the deadline: %v, want an error naming the pace", err)
	}

	// A change of the setting applies to the next chunk.
	r.Store(64 << 20)
	if lim := p.limiter(); lim.Limit() != 64<<20 || lim.Burst() != 8<<20 {
		t.Fatalf("after the change: limit %v, burst %d; want 64MiB/s and an eighth of it", lim.Limit(), lim.Burst())
	}
	// A wait for more than the burst waits in parts (WaitN refuses more
	// than the burst at once).
	if err := p.wait(t.Context(), 20<<20); err != nil {
		t.Fatalf("a wait for 20MiB at 64MiB/s: %v", err)
	}
	r.Store(0)
	if p.limiter() != nil {
		t.Fatal("the rate went back to no limit, but a limiter stays")
	}
}
