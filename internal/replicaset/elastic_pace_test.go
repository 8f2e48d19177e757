package replicaset

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// fakeSignal is a paceSignal whose every window has the value set.
type fakeSignal struct {
	value, target time.Duration
	ok            bool
	windows       int
}

func (f *fakeSignal) window() (time.Duration, time.Duration, bool) {
	f.windows++
	return f.value, f.target, f.ok
}

// paceRig drives an elasticPace on a fake clock.
type paceRig struct {
	t   *testing.T
	now time.Time
	sig *fakeSignal
	e   *elasticPace
}

func newPaceRig(t *testing.T) *paceRig {
	t.Helper()
	r := &paceRig{t: t, now: time.Unix(1_000_000, 0), sig: &fakeSignal{target: 10 * time.Millisecond, ok: true}}
	r.e = newElasticPace(r.sig, func() time.Time { return r.now })
	return r
}

// windows runs n windows in which the copy takes all the pace lets
// through (bound: the operator's), and returns the pace after them.
func (r *paceRig) windows(n int, bound uint64) uint64 {
	r.t.Helper()
	var p uint64
	for range n {
		p = r.e.pace(bound)
		r.e.copied(int(math.Ceil(float64(p) * paceWindow.Seconds())))
		r.now = r.now.Add(paceWindow)
	}
	return r.e.pace(bound)
}

func TestElasticPaceRisesToItsBoundWithNoLoad(t *testing.T) {
	r := newPaceRig(t)
	if p := r.e.pace(0); p != paceStart {
		t.Fatalf("a new pace is %d, want paceStart (%d)", p, paceStart)
	}
	// Doubling: from 4 MiB/s, 8 MiB/s after one window.
	if p := r.windows(1, 0); p != 2*paceStart {
		t.Fatalf("after one window under target: %d, want %d (doubled)", p, 2*paceStart)
	}
	if p := r.windows(20, 0); p != paceCeiling {
		t.Fatalf("after 21 windows under target, no bound: %d, want the ceiling (%d)", p, paceCeiling)
	}
	// With the operator's bound it stops there.
	r = newPaceRig(t)
	const bound = 24 << 20
	if p := r.windows(20, bound); p != bound {
		t.Fatalf("after 20 windows under target, bound %d: %d", bound, p)
	}
	// A window that told nothing (no client writes) sets it to the
	// ceiling, or the operator's bound, at once, copying or not.
	r = newPaceRig(t)
	r.sig.ok, r.sig.value = false, time.Second
	if p := r.windows(1, 0); p != paceCeiling {
		t.Fatalf("after a window with no writes: %d, want the ceiling (%d)", p, paceCeiling)
	}
	if p := r.windows(1, bound); p != bound {
		t.Fatalf("after a window with no writes, bound %d: %d", bound, p)
	}
	r = newPaceRig(t)
	r.sig.ok = false
	r.now = r.now.Add(paceWindow) // a window with nothing copied
	if p := r.e.pace(0); p != paceCeiling {
		t.Fatalf("after a window with no writes and no copy: %d, want the ceiling (%d)", p, paceCeiling)
	}
	// Writes above the target again: it comes down from what the copy used.
	r.sig.ok, r.sig.value = true, time.Second
	r.e.copied(8 << 20)
	r.now = r.now.Add(paceWindow)
	if p := r.e.pace(0); p != 20<<20 {
		t.Fatalf("writes above target after the ceiling, 8 MiB copied in a window: %d, want half of 40 MiB/s", p)
	}
}

func TestElasticPaceHalvesUnderAHighSignal(t *testing.T) {
	r := newPaceRig(t)
	r.windows(3, 0) // 32 MiB/s
	if p := r.e.pace(0); p != 32<<20 {
		t.Fatalf("after three windows: %d, want 32MiB/s", p)
	}
	r.sig.value = 11 * time.Millisecond // above its target
	if p := r.windows(1, 0); p != 16<<20 {
		t.Fatalf("after a window above target: %d, want 16MiB/s", p)
	}
	if p := r.windows(1, 0); p != 8<<20 {
		t.Fatalf("after two windows above target: %d, want 8MiB/s", p)
	}
	// At its target it rises again, now by paceStep a window: the last
	// halving is where doubling stops.
	r.sig.value = 10 * time.Millisecond
	if p := r.windows(1, 0); p != 8<<20+paceStep {
		t.Fatalf("a window at target after halving: %d, want %d", p, 8<<20+paceStep)
	}
	if p := r.windows(2, 0); p != 8<<20+3*paceStep {
		t.Fatalf("three windows at target after halving: %d, want %d", p, 8<<20+3*paceStep)
	}
}

func TestElasticPaceHalvesWhatTheCopyUsed(t *testing.T) {
	r := newPaceRig(t)
	r.windows(5, 0) // 128 MiB/s, far more than the copy below takes
	r.sig.value = time.Second
	r.e.pace(0)
	r.e.copied(2 << 20) // 10 MiB/s over the window
	r.now = r.now.Add(paceWindow)
	if p := r.e.pace(0); p != 5<<20 {
		t.Fatalf("halved after a window of 10MiB/s used at a pace of 128MiB/s: %d, want 5MiB/s", p)
	}
}

func TestElasticPaceNeverGoesBelowItsFloor(t *testing.T) {
	r := newPaceRig(t)
	r.sig.value = time.Second
	if p := r.windows(30, 0); p != paceFloor {
		t.Fatalf("after 30 windows above target: %d, want the floor (%d)", p, paceFloor)
	}
	// An operator's bound below the floor is the pace.
	const bound = 64 << 10
	if p := r.windows(3, bound); p != bound {
		t.Fatalf("bound %d below the floor: %d", bound, p)
	}
	// And the pace the copy gets is within the operator's bound whatever
	// the controller's, even before a window ends.
	r = newPaceRig(t)
	if p := r.e.pace(1 << 20); p != 1<<20 {
		t.Fatalf("a new pace under a bound of 1MiB/s: %d", p)
	}
}

func TestElasticPaceIsNotRaisedWhileTheCopyUsesLittleOfIt(t *testing.T) {
	r := newPaceRig(t)
	for range 10 {
		r.e.pace(0)
		r.e.copied(100 << 10) // 0.5 MiB/s, an eighth of the pace
		r.now = r.now.Add(paceWindow)
	}
	if p := r.e.pace(0); p != paceStart {
		t.Fatalf("after windows using an eighth of it: %d, want it kept at %d", p, paceStart)
	}
}

func TestElasticPaceWindowsWithoutACopyChangeNothingAndAnIdleOneResets(t *testing.T) {
	r := newPaceRig(t)
	r.sig.value = time.Second
	r.windows(2, 0) // 1 MiB/s
	r.now = r.now.Add(paceWindow)
	if p := r.e.pace(0); p != paceFloor {
		t.Fatalf("after a window without a copy: %d, want it kept at %d", p, paceFloor)
	}
	windows := r.sig.windows
	r.now = r.now.Add(paceWindow / 2)
	r.e.pace(0)
	if r.sig.windows != windows {
		t.Fatal("the signal was read before the window ended")
	}
	r.now = r.now.Add(paceIdle)
	if p := r.e.pace(0); p != paceStart {
		t.Fatalf("after %v without a copy: %d, want paceStart (%d)", paceIdle, p, paceStart)
	}
	if st := r.e.state(0); st.Signal != time.Second || st.Target != 10*time.Millisecond || !st.Measured || st.BytesPerS != paceStart {
		t.Fatalf("state %+v, want the last window's signal and target and the pace", st)
	}
}

func TestCopyPaceWaitsAtTheElasticPace(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	sig := &fakeSignal{target: time.Millisecond, value: time.Second, ok: true}
	e := newElasticPace(sig, func() time.Time { return now })
	var bound uint64 = 64 << 20
	p := &copyPace{rate: func() uint64 { return bound }, elastic: e}
	if lim := p.limiter(); lim.Limit() != paceStart {
		t.Fatalf("limit %v, want the elastic pace (%d)", lim.Limit(), paceStart)
	}
	if err := p.wait(t.Context(), 1000); err != nil {
		t.Fatal(err)
	}
	if e.bytes != 1000 {
		t.Fatalf("the elastic pace counted %d bytes copied, want 1000", e.bytes)
	}
	bound = 1 << 10
	if lim := p.limiter(); lim.Limit() != 1<<10 {
		t.Fatalf("limit %v, want the operator's bound (1KiB/s)", lim.Limit())
	}
}

// With the pace turned off (rebalance config --copy-pace off) the
// operator's rate alone paces the copy, and the elastic pace is neither
// asked nor told of the bytes copied; turned on again, it is.
func TestCopyPaceOffLeavesTheRateAlone(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	sig := &fakeSignal{target: time.Millisecond, value: time.Second, ok: true}
	e := newElasticPace(sig, func() time.Time { return now })
	var bound uint64
	off := true
	p := &copyPace{rate: func() uint64 { return bound }, off: func() bool { return off }, elastic: e}
	if lim := p.limiter(); lim != nil {
		t.Fatalf("limit %v with the pace off and no rate, want none", lim.Limit())
	}
	bound = 64 << 20
	if lim := p.limiter(); lim == nil || lim.Limit() != 64<<20 {
		t.Fatalf("limit %v with the pace off, want the operator's rate (64MiB/s)", lim)
	}
	if err := p.wait(t.Context(), 1000); err != nil {
		t.Fatal(err)
	}
	if e.bytes != 0 {
		t.Fatalf("the elastic pace counted %d bytes copied while off", e.bytes)
	}
	off = false
	if lim := p.limiter(); lim.Limit() != paceStart {
		t.Fatalf("limit %v with the pace on again, want the elastic pace (%d)", lim.Limit(), paceStart)
	}
}

// A backup's stream waits for the elastic pace and counts what it sent
// against it, as the copy does; unpaced (backup create --pace off), it
// neither waits nor counts.
func TestABackupStreamGoesAtTheElasticPaceUnlessUnpaced(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := newElasticPace(&fakeSignal{target: time.Millisecond, ok: true}, func() time.Time { return now })
	part := []*rspb.CopyChunk{{Bucket: 1, Tuples: []*rspb.CopiedTuple{{SpaceId: 1, Key: []byte("k"), Tuple: []byte("some bytes")}}}}
	size := (&rspb.BackupBucketsResponse{Chunks: part}).SizeVT()
	for _, unpaced := range []bool{true, false} {
		sent := 0
		flush := backupSender(t.Context(), e, unpaced, func(*rspb.BackupBucketsResponse) error { sent++; return nil })
		if err := flush(&rspb.SendBucketsResponse{Chunks: part}); err != nil || sent != 1 {
			t.Fatalf("unpaced %v: sent %d, %v", unpaced, sent, err)
		}
		want := int64(0)
		if !unpaced {
			want = int64(size)
		}
		if e.bytes != want {
			t.Fatalf("unpaced %v: the elastic pace counted %d bytes, want %d", unpaced, e.bytes, want)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e.rate = 1 // a pace that lets nothing through soon: the wait ends with the context
	if err := backupSender(ctx, e, false, func(*rspb.BackupBucketsResponse) error { return nil })(&rspb.SendBucketsResponse{Chunks: part}); err == nil {
		t.Fatal("a paced part sent after its context ended")
	}
}

// The writes' delay is a window's writeDelayQuantile against a base from
// the writes that met no copy entry in the log (the median of the last
// writeDelayCleanBases windows with enough of them), which follows the
// load; before any, the least value of the recent windows; never below
// the floor.
func TestWriteDelayTargetsTheWritesThatMetNoCopy(t *testing.T) {
	var w writeDelay
	floorTarget := time.Duration(float64(writeDelayFloor) * writeDelayFactor)
	if _, target, ok := w.window(); ok || target != floorTarget {
		t.Fatalf("no writes: target %v ok %v, want %v from the floor and no value", target, ok, floorTarget)
	}
	for range writeDelaySamples - 1 {
		w.observe(time.Second, true)
	}
	if _, _, ok := w.window(); ok {
		t.Fatal("a window of fewer than writeDelaySamples writes told something")
	}
	// window observes n writes of d (clean or not) and m of dm, and ends
	// the window.
	window := func(n int, d time.Duration, clean bool, m int, dm time.Duration) (time.Duration, time.Duration) {
		t.Helper()
		for range n {
			w.observe(d, clean)
		}
		for range m {
			w.observe(dm, false)
		}
		v, target, ok := w.window()
		if !ok {
			t.Fatalf("a window of %d writes told nothing", n+m)
		}
		return v, target
	}
	// No clean writes yet: the least value of the recent windows.
	if v, _ := window(10, 10*time.Millisecond, false, 0, 0); v != 10*time.Millisecond {
		t.Fatalf("value %v, want 10ms", v)
	}
	if _, target := window(10, 40*time.Millisecond, false, 0, 0); target != 15*time.Millisecond {
		t.Fatalf("no clean writes: target %v after a window of 10ms, want 15ms", target)
	}
	// The value is the tail: nine writes of 10ms and one of 3s are 10ms,
	// eight of 10ms and twelve of 30ms are 30ms.
	if v, _ := window(9, 10*time.Millisecond, false, 1, 3*time.Second); v != 10*time.Millisecond {
		t.Fatalf("nine writes of 10ms and one of 3s: %v, want 10ms", v)
	}
	if v, _ := window(8, 10*time.Millisecond, false, 12, 30*time.Millisecond); v != 30*time.Millisecond {
		t.Fatalf("eight writes of 10ms and twelve of 30ms: %v, want 30ms", v)
	}
	// Clean writes set the base, above the recent windows' least value:
	// 20ms clean, 40ms beside a copy.
	v, target := window(10, 20*time.Millisecond, true, 10, 40*time.Millisecond)
	if v != 40*time.Millisecond || target != 30*time.Millisecond {
		t.Fatalf("clean writes of 20ms, others of 40ms: value %v target %v, want 40ms and 30ms", v, target)
	}
	// Too few clean writes in a window: the base stands.
	if _, target := window(writeDelaySamples-1, 5*time.Millisecond, true, 10, 40*time.Millisecond); target != 30*time.Millisecond {
		t.Fatalf("a window of %d clean writes moved the base: target %v, want 30ms", writeDelaySamples-1, target)
	}
	// The base follows the load: the median of the last windows' clean
	// writes.
	for range writeDelayCleanBases / 2 {
		window(10, 60*time.Millisecond, true, 0, 0)
	}
	if _, target := window(10, 60*time.Millisecond, true, 0, 0); target != 90*time.Millisecond {
		t.Fatalf("after most recent windows' clean writes took 60ms: target %v, want 90ms", target)
	}
	// Never below the floor.
	for range writeDelayCleanBases {
		window(10, time.Millisecond, true, 0, 0)
	}
	if _, target := window(10, time.Millisecond, true, 0, 0); target != floorTarget {
		t.Fatalf("clean writes of 1ms: target %v, want the floor's %v", target, floorTarget)
	}
	// A window of more writes than it keeps is its last ones'.
	for range writeDelayKept {
		w.observe(time.Second, false)
	}
	if v, _ := window(writeDelayKept, 5*time.Millisecond, false, 0, 0); v != 5*time.Millisecond {
		t.Fatalf("a window of %d writes of 1s then %d of 5ms: %v, want the recent 5ms", writeDelayKept, writeDelayKept, v)
	}
}

// A write is clean when no copy entry was in the log at its proposal and
// none was proposed before its result.
func TestAWriteBesideACopyEntryIsNotClean(t *testing.T) {
	var c copyInLog
	m := c.mark()
	if !c.clean(m) {
		t.Fatal("no copy entry at all: not clean")
	}
	c.proposed.Add(1)
	if c.clean(m) {
		t.Fatal("a copy entry proposed during the write: clean")
	}
	m = c.mark()
	c.answered.Add(1)
	if c.clean(m) {
		t.Fatal("a copy entry in flight at the write's proposal: clean")
	}
	if m = c.mark(); !c.clean(m) {
		t.Fatal("the copy entry answered before the write: not clean")
	}
}

// The receive window is what the copy takes in receiveHorizon at its pace
// (at least minReceiveWindow), from the copies' mean bucket size; none
// (0) before a copy told a size, and after receiveIdle with no client
// writes to tell; under an operator's bound it is the bound's.
func TestTheReceiveWindowIsWhatThePaceCopiesInItsHorizon(t *testing.T) {
	want := func(bytesPerS, bucket float64) uint32 {
		return uint32(max(bytesPerS*receiveHorizon.Seconds()/bucket, minReceiveWindow))
	}
	r := newPaceRig(t)
	if w := r.e.receiveWindow(0); w != 0 {
		t.Fatalf("before any copy: window %d, want 0", w)
	}
	const kib = 1 << 10
	r.e.copiedBuckets(10*kib, 1) // 10 KiB a bucket
	if w, x := r.e.receiveWindow(0), want(paceStart, 10*kib); w != x || w <= minReceiveWindow {
		t.Fatalf("at paceStart with 10 KiB buckets: window %d, want %d", w, x)
	}
	if w, x := r.e.receiveWindow(1<<20), want(1<<20, 10*kib); w != x || w <= minReceiveWindow {
		t.Fatalf("bound to 1 MiB/s: window %d, want %d", w, x)
	}
	if w := r.e.receiveWindow(16 * kib); w != minReceiveWindow {
		t.Fatalf("bound to 16 KiB/s: window %d, want minReceiveWindow (%d)", w, minReceiveWindow)
	}
	// The mean follows the copies: 5 KiB buckets after many copies.
	for range 50 {
		r.e.copiedBuckets(3*5*kib, 3)
	}
	if w, x := r.e.receiveWindow(0), want(paceStart, 5*kib); w != x {
		t.Fatalf("with 5 KiB buckets: window %d, want %d", w, x)
	}
	// A window with no client writes to tell sets the pace's ceiling, but
	// a lull shorter than receiveIdle keeps the window of the pace
	// measured before it; a longer one is an idle cluster: no bound.
	r.sig.ok = false
	r.now = r.now.Add(paceWindow)
	if p := r.e.pace(0); p != paceCeiling {
		t.Fatalf("a window with too few writes: pace %d, want the ceiling", p)
	}
	if w, x := r.e.receiveWindow(0), want(paceStart, 5*kib); w != x {
		t.Fatalf("a lull of one window: window %d, want %d (the pace measured before it)", w, x)
	}
	for r.now = r.now.Add(paceWindow); r.e.idleSince.Add(receiveIdle).After(r.now); r.now = r.now.Add(paceWindow) {
		r.e.pace(0)
	}
	if w := r.e.receiveWindow(0); w != 0 {
		t.Fatalf("no writes for %v: window %d, want 0 (no bound)", receiveIdle, w)
	}
	if w, x := r.e.receiveWindow(6<<20), want(6<<20, 5*kib); w != x {
		t.Fatalf("idle under a 6 MiB/s bound: window %d, want %d", w, x)
	}
	// Writes again, the pace still at its ceiling: no copy since, so
	// paceStart's window; then twice what the copy got through.
	r.sig.ok, r.sig.value = true, 0
	r.now = r.now.Add(paceWindow)
	r.e.pace(0)
	if w, x := r.e.receiveWindow(0), want(paceStart, 5*kib); w != x {
		t.Fatalf("writes told again, the pace at its ceiling, no copy since: window %d, want %d", w, x)
	}
	r.e.copied(int(3 << 20 * paceWindow.Seconds()))
	r.now = r.now.Add(paceWindow)
	if p := r.e.pace(0); p != paceCeiling {
		t.Fatalf("under target with the copy using a fraction of it: pace %d, want the ceiling", p)
	}
	if w, x := r.e.receiveWindow(0), want(6<<20, 5*kib); w != x {
		t.Fatalf("the copy got 3 MiB/s through: window %d, want %d", w, x)
	}

	// A lull before any window told: paceStart's window.
	r = newPaceRig(t)
	r.e.copiedBuckets(10*kib, 1)
	r.sig.ok = false
	r.now = r.now.Add(paceWindow)
	r.e.pace(0)
	if w, x := r.e.receiveWindow(0), want(paceStart, 10*kib); w != x {
		t.Fatalf("a lull with no pace measured yet: window %d, want %d (paceStart's)", w, x)
	}
}
