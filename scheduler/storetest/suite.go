// Package storetest is the conformance suite every scheduler.Store passes
// (scheduler/pgstore and scheduler/clusterstore), and the runner's tests on a
// real store: a store's test calls Run and RunRunner with its Factory.
//
// It must never assume anything of a store beyond the scheduler.Store
// contract, and never assert timing: waits poll with a deadline.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardkit/shardkit/scheduler"
)

// Opener opens another store on the same data (as another process would).
// Close it with t.Cleanup.
type Opener func(t *testing.T) scheduler.Store

// Factory makes empty store data with the given number of shards, of its
// own (a schema, a set of spaces) so that tests run in parallel, and
// returns how to open stores on it.
type Factory func(t *testing.T, shards int) Opener

// env is what one conformance test gets: its own t and the factory.
type env struct {
	t *testing.T
	f Factory
}

// waitLimit bounds every poll of the suite.
const waitLimit = 30 * time.Second

// Run runs the store conformance suite as subtests of t.
func Run(t *testing.T, f Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(e env)
	}{
		{"ClaimTakesFreeShardsOnce", testClaim},
		{"ConcurrentClaimersTakeDistinctShards", testClaimRace},
		{"AnnouncedRunnersAreListedUntilExpired", testAnnounce},
		{"StaleEpochWritesNothing", testFencing},
		{"ReleasedLeaseWritesNothing", testReleaseFences},
		{"OfferIsAtMostOncePerStage", testOfferOnce},
		{"PeekByDueTimeAndLanes", testPeek},
		{"DeleteAndCheck", testDeleteCheck},
		{"PutCreatesAndReplacesUnderVersion", testPut},
		{"SaveIsAtomic", testSaveAtomic},
		{"ConflictingSaveWritesNothing", testSaveConflict},
		{"StateConflictWritesNothing", testStateConflict},
		{"PatchAppliesWithoutVersionCheck", testPatch},
		{"UnchangedBodyMakesNoMark", testUnchanged},
		{"ChangedOfferSurvivesRestart", testChangesDurable},
		{"AckLeavesANewerChange", testAckNewer},
		{"SaveManyDecidesEachSave", testSaveMany},
		{"OfferManyDecidesInOrder", testOfferMany},
		{"AckChangesLeaveNewerChanges", testAckChanges},
		{"TimerIsDueAtItsTime", testTimer},
		{"RetryCountsAndDeadLetters", testDeadLetters},
		{"UpdateStateIsCompareAndSet", testUpdateState},
		{"AfterSavePendingUntilDone", testAfterSave},
		{"ScanListsAShardsOffers", testScan},
		{"WakeupsFollowWrites", testWakeups},
		{"BadInputIsRefused", testBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(env{t: t, f: f})
		})
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), waitLimit+10*time.Second)
	t.Cleanup(cancel)
	return c
}

// IDIn returns n offer ids that fall in shard (of shards), distinct per
// prefix.
func IDIn(prefix string, shard, shards, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if scheduler.ShardOf(id, shards) == shard {
			out = append(out, id)
		}
	}
	return out
}

func claimOne(t *testing.T, s scheduler.Store, owner string, shard int, ttl time.Duration) scheduler.Lease {
	t.Helper()
	ls, err := s.Claim(ctx(t), owner, []int{shard}, ttl)
	if err != nil {
		t.Fatalf("Claim(%s, shard %d): %v", owner, shard, err)
	}
	if len(ls) != 1 || ls[0].Shard != shard || ls[0].Owner != owner {
		t.Fatalf("Claim(%s, shard %d) = %v, want that shard", owner, shard, ls)
	}
	return ls[0]
}

func put(t *testing.T, s scheduler.Store, id, body string, ifVersion int64) int64 {
	t.Helper()
	v, err := s.Put(ctx(t), id, []byte(body), ifVersion)
	if err != nil {
		t.Fatalf("Put(%s, %s, if %d): %v", id, body, ifVersion, err)
	}
	return v
}

func load(t *testing.T, s scheduler.Store, id, stage string) (scheduler.Offer, scheduler.State) {
	t.Helper()
	o, st, err := s.Load(ctx(t), id, stage)
	if err != nil {
		t.Fatalf("Load(%s, %s): %v", id, stage, err)
	}
	return o, st
}

func offer(t *testing.T, s scheduler.Store, l scheduler.Lease, e scheduler.Entry) bool {
	t.Helper()
	e.Shard = l.Shard
	ok, err := s.Offer(ctx(t), l, e)
	if err != nil {
		t.Fatalf("Offer(%s to %s due %v lane %v): %v", e.OfferID, e.Stage, e.Due, e.Lane, err)
	}
	return ok
}

func check(t *testing.T, s scheduler.Store, shard int, id string) []scheduler.Entry {
	t.Helper()
	es, err := s.Check(ctx(t), shard, id)
	if err != nil {
		t.Fatalf("Check(%s): %v", id, err)
	}
	return es
}

func peek(t *testing.T, s scheduler.Store, l scheduler.Lease, stage string, now time.Time, limit int) ([]string, time.Time) {
	t.Helper()
	es, next, err := s.Peek(ctx(t), l, stage, now, limit)
	if err != nil {
		t.Fatalf("Peek(%s at %v): %v", stage, now, err)
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.OfferID
	}
	return ids, next
}

func changes(t *testing.T, s scheduler.Store, l scheduler.Lease) []scheduler.Change {
	t.Helper()
	cs, err := s.Changes(ctx(t), l, 100)
	if err != nil {
		t.Fatalf("Changes(%v): %v", l, err)
	}
	return cs
}

func changeOf(cs []scheduler.Change, id string) (scheduler.Change, bool) {
	for _, c := range cs {
		if c.OfferID == id {
			return c, true
		}
	}
	return scheduler.Change{}, false
}

func str(s string) *anypb.Any {
	a, err := anypb.New(wrapperspb.String(s))
	if err != nil {
		panic(err)
	}
	return a
}

// StateString unpacks a state written by the suite's stages.
func StateString(st scheduler.State) string {
	if st.Value == nil {
		return ""
	}
	var w wrapperspb.StringValue
	if err := st.Value.UnmarshalTo(&w); err != nil {
		return "<" + err.Error() + ">"
	}
	return w.GetValue()
}

// Field reads a top-level field of a body as a string ("" if absent).
func Field(body []byte, f string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return "<bad body>"
	}
	return string(m[f])
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// ---- leases ----

func testClaim(e env) {
	t, f := e.t, e.f
	s := f(t, 4)(t)
	if s.Shards() != 4 {
		t.Fatalf("Shards() = %d, want 4", s.Shards())
	}
	a, err := s.Claim(ctx(t), "a", []int{0, 1, 2}, time.Minute)
	if err != nil || len(a) != 3 {
		t.Fatalf("Claim(a, 0..2) = %v, %v; want 3 leases", a, err)
	}
	b, err := s.Claim(ctx(t), "b", []int{1, 2, 3}, time.Minute)
	if err != nil || len(b) != 1 || b[0].Shard != 3 {
		t.Fatalf("Claim(b, 1..3) = %v, %v; want shard 3 only (the others are held)", b, err)
	}
	for _, l := range a {
		if err := s.Renew(ctx(t), l, time.Minute); err != nil {
			t.Fatalf("Renew(%v): %v", l, err)
		}
	}
	infos, err := s.Leases(ctx(t))
	if err != nil || len(infos) != 4 {
		t.Fatalf("Leases() = %v, %v", infos, err)
	}
	for _, in := range infos {
		want := "a"
		if in.Shard == 3 {
			want = "b"
		}
		if in.Owner != want || in.Expired {
			t.Errorf("shard %d: owner %q expired %v, want %q live", in.Shard, in.Owner, in.Expired, want)
		}
	}
	// An expired lease is taken with a higher epoch.
	s2 := f(t, 1)(t)
	old := claimOne(t, s2, "old", 0, 5*time.Millisecond)
	var got []scheduler.Lease
	deadline := time.Now().Add(waitLimit)
	for len(got) == 0 && time.Now().Before(deadline) {
		if got, err = s2.Claim(ctx(t), "new", []int{0}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].Epoch <= old.Epoch {
		t.Fatalf("claim after expiry = %v, want one lease with epoch > %d", got, old.Epoch)
	}
	if err := s2.Renew(ctx(t), old, time.Minute); !errors.Is(err, scheduler.ErrFenced) {
		t.Fatalf("Renew of the expired, taken lease = %v, want ErrFenced", err)
	}
}

func testClaimRace(e env) {
	t, f := e.t, e.f
	const shards, claimers = 8, 4
	open := f(t, shards)
	all := make([]int, shards)
	for i := range all {
		all[i] = i
	}
	stores := make([]scheduler.Store, claimers)
	for i := range stores {
		stores[i] = open(t)
	}
	var mu sync.Mutex
	owners := map[int]string{}
	var problems []error
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("c%d", i)
			ls, err := s.Claim(ctx(t), owner, all, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				problems = append(problems, err)
				return
			}
			for _, l := range ls {
				if prev, dup := owners[l.Shard]; dup {
					problems = append(problems, fmt.Errorf("shard %d claimed by both %s and %s", l.Shard, prev, owner))
				}
				owners[l.Shard] = owner
			}
		}()
	}
	wg.Wait()
	for _, err := range problems {
		t.Error(err)
	}
	if len(owners) != shards {
		t.Fatalf("claimers took %d of %d free shards: %v", len(owners), shards, owners)
	}
}

func testAnnounce(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	if err := s.Announce(ctx(t), "long", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx(t), "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx(t), "short", 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx(t), "", time.Minute); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Announce with no owner = %v, want ErrInvalid", err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		rs, err := s.Runners(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(rs, []string{"long", "other"}) {
			return
		}
		if !slices.Contains(rs, "long") || !slices.Contains(rs, "other") || time.Now().After(deadline) {
			t.Fatalf("Runners = %v, want [long other] once short's announcement expired", rs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fencedWrites tries every fenced write under l and wants ErrFenced.
func fencedWrites(t *testing.T, s scheduler.Store, l scheduler.Lease, id string, version int64) {
	t.Helper()
	c := ctx(t)
	checks := map[string]error{}
	_, checks["Save"] = s.Save(c, l, scheduler.Save{OfferID: id, Stage: "st", ReadVersion: version, Body: []byte(`{"stale":true}`), State: str("stale"), Timer: t0})
	_, checks["Offer"] = s.Offer(c, l, scheduler.Entry{Shard: l.Shard, Stage: "other", OfferID: id, Due: t0})
	checks["Delete"] = s.Delete(c, l, "st", id)
	_, checks["Retry"] = s.Retry(c, l, "st", id, t0, "stale")
	checks["DeadLetter"] = s.DeadLetter(c, l, "st", id, "stale")
	checks["AckChange"] = s.AckChange(c, l, scheduler.Change{Shard: l.Shard, OfferID: id, Seq: 1})
	_, _, checks["SaveMany"] = s.SaveMany(c, l, []scheduler.Save{{OfferID: id, Stage: "st", ReadVersion: version, State: str("stale")}})
	_, checks["OfferMany"] = s.OfferMany(c, l, []scheduler.Entry{{Shard: l.Shard, Stage: "other", OfferID: id, Due: t0}})
	checks["AckChanges"] = s.AckChanges(c, l, []scheduler.Change{{Shard: l.Shard, OfferID: id, Seq: 1}})
	checks["AfterSaveDone"] = s.AfterSaveDone(c, l, scheduler.Pending{Shard: l.Shard, Stage: "st", OfferID: id, Seq: 1})
	for name, err := range checks {
		if !errors.Is(err, scheduler.ErrFenced) {
			t.Errorf("%s under the stale %v = %v, want ErrFenced", name, l, err)
		}
	}
}

// unchanged checks that offer id is as the fenced writes found it.
func unchanged(t *testing.T, s scheduler.Store, shard int, id string, version int64) {
	t.Helper()
	o, st := load(t, s, id, "st")
	if o.Version != version || Field(o.Body, "stale") != "" || st.Value != nil {
		t.Errorf("after fenced writes: offer %s version %d body %s state %q, want version %d untouched", id, o.Version, o.Body, StateString(st), version)
	}
	es := check(t, s, shard, id)
	if len(es) != 1 || es[0].Stage != "st" || es[0].Attempts != 0 {
		t.Errorf("after fenced writes: queues hold %+v, want only st's untouched entry", es)
	}
	if dl, err := s.DeadLetters(ctx(t), "st", 10); err != nil || len(dl) != 0 {
		t.Errorf("after fenced writes: dead letters %v, %v, want none", dl, err)
	}
}

func testFencing(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	id := IDIn("fence", 1, 2, 1)[0]
	v := put(t, s, id, `{"a":1}`, 0)
	old := claimOne(t, s, "old", 1, 5*time.Millisecond)
	offer(t, s, old, scheduler.Entry{Stage: "st", OfferID: id, Due: t0})
	var taken []scheduler.Lease
	deadline := time.Now().Add(waitLimit)
	for len(taken) == 0 && time.Now().Before(deadline) {
		var err error
		if taken, err = s.Claim(ctx(t), "new", []int{1}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(taken) != 1 {
		t.Fatal("the expired lease was never taken over")
	}
	fencedWrites(t, s, old, id, v)
	unchanged(t, s, 1, id, v)
	// The new holder writes.
	if _, err := s.Save(ctx(t), taken[0], scheduler.Save{OfferID: id, Stage: "st", ReadVersion: v, State: str("new")}); err != nil {
		t.Fatalf("Save under the current lease: %v", err)
	}
}

func testReleaseFences(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	id := IDIn("rel", 0, 2, 1)[0]
	v := put(t, s, id, `{"a":1}`, 0)
	l := claimOne(t, s, "a", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0})
	if err := s.Release(ctx(t), l); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := s.Release(ctx(t), l); !errors.Is(err, scheduler.ErrFenced) {
		t.Fatalf("second Release = %v, want ErrFenced", err)
	}
	fencedWrites(t, s, l, id, v)
	unchanged(t, s, 0, id, v)
	again := claimOne(t, s, "a", 0, time.Minute)
	if again.Epoch <= l.Epoch {
		t.Fatalf("reclaim after release: epoch %d, want > %d", again.Epoch, l.Epoch)
	}
}

// ---- queues ----

func testOfferOnce(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	l := claimOne(t, s, "a", 0, time.Minute)
	id := "o1"
	if !offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0.Add(time.Hour), Timer: true}) {
		t.Fatal("first Offer = false, want true")
	}
	if offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0.Add(time.Hour)}) {
		t.Fatal("second Offer, same due = true, want false")
	}
	if offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0.Add(2 * time.Hour)}) {
		t.Fatal("Offer due later = true, want false")
	}
	if offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0.Add(2 * time.Hour), Lane: scheduler.LaneRescan}) {
		t.Fatal("rescan Offer, due later, of a main-lane entry = true, want false")
	}
	es := check(t, s, 0, id)
	if len(es) != 1 || !es[0].Due.Equal(t0.Add(time.Hour)) || es[0].Lane != scheduler.LaneMain || !es[0].Timer {
		t.Fatalf("Check = %+v, want one main-lane timer due at +1h", es)
	}
	if !offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0}) {
		t.Fatal("Offer due earlier = false, want true (moved)")
	}
	es = check(t, s, 0, id)
	if len(es) != 1 || !es[0].Due.Equal(t0) || es[0].Timer {
		t.Fatalf("after the earlier Offer, Check = %+v, want one entry due at t0", es)
	}
	// Other stages have queues of their own.
	if !offer(t, s, l, scheduler.Entry{Stage: "st2", OfferID: id, Due: t0}) {
		t.Fatal("Offer to another stage = false")
	}
	// Concurrent offers of one absent entry: exactly one queues it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	trues := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Offer(ctx(t), l, scheduler.Entry{Shard: 0, Stage: "race", OfferID: id, Due: t0})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				trues++
			}
		}()
	}
	wg.Wait()
	if trues != 1 {
		t.Fatalf("8 concurrent Offers of one entry: %d said they queued it, want 1", trues)
	}
	if es := check(t, s, 0, id); len(es) != 3 {
		t.Fatalf("Check = %+v, want entries of st, st2 and race", es)
	}
}

func testPeek(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	l := claimOne(t, s, "a", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "late", Due: t0.Add(2 * time.Second)})
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "second", Due: t0.Add(time.Second)})
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "first", Due: t0})
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "rescan", Due: t0.Add(-time.Hour), Lane: scheduler.LaneRescan})
	offer(t, s, l, scheduler.Entry{Stage: "other", OfferID: "x", Due: t0})
	ids, next := peek(t, s, l, "st", t0.Add(time.Second), 10)
	if !slices.Equal(ids, []string{"first", "second", "rescan"}) {
		t.Fatalf("Peek at +1s = %v, want [first second rescan] (main lane by due time, then rescan)", ids)
	}
	if !next.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("Peek's next due = %v, want %v", next, t0.Add(2*time.Second))
	}
	if ids, _ := peek(t, s, l, "st", t0.Add(time.Second), 1); !slices.Equal(ids, []string{"first"}) {
		t.Fatalf("Peek limit 1 = %v, want [first]", ids)
	}
	if ids, next := peek(t, s, l, "st", t0.Add(-2*time.Hour), 10); len(ids) != 0 || !next.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("Peek before anything is due = %v, next %v; want none, next %v", ids, next, t0.Add(-time.Hour))
	}
	// A main-lane offer promotes the rescan entry.
	if !offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "rescan", Due: t0.Add(time.Hour)}) {
		t.Fatal("main-lane Offer of a rescan-lane entry = false, want true (promoted)")
	}
	es := check(t, s, 0, "rescan")
	if len(es) != 1 || es[0].Lane != scheduler.LaneMain || !es[0].Due.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("promoted entry = %+v, want main lane, due as before", es)
	}
}

func testDeleteCheck(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	l := claimOne(t, s, "a", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "a", OfferID: "o", Due: t0})
	offer(t, s, l, scheduler.Entry{Stage: "b", OfferID: "o", Due: t0.Add(time.Minute), Timer: true})
	es := check(t, s, 0, "o")
	if len(es) != 2 || es[0].Stage != "a" || es[1].Stage != "b" || !es[1].Timer {
		t.Fatalf("Check = %+v, want a's and b's (timer) entries", es)
	}
	if err := s.Delete(ctx(t), l, "a", "o"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx(t), l, "a", "o"); err != nil {
		t.Fatalf("Delete of an absent entry = %v, want nil", err)
	}
	if es := check(t, s, 0, "o"); len(es) != 1 || es[0].Stage != "b" {
		t.Fatalf("after Delete, Check = %+v, want b's only", es)
	}
	if ids, _ := peek(t, s, l, "a", t0.Add(time.Hour), 10); len(ids) != 0 {
		t.Fatalf("a deleted entry is still peeked: %v", ids)
	}
	if !offer(t, s, l, scheduler.Entry{Stage: "a", OfferID: "o", Due: t0}) {
		t.Fatal("Offer after Delete = false, want true")
	}
}

// ---- offers, saves, changes ----

func testPut(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	if v := put(t, s, "p", `{"a":1}`, 0); v != 1 {
		t.Fatalf("create: version %d, want 1", v)
	}
	if _, err := s.Put(ctx(t), "p", []byte(`{"a":2}`), 0); !errors.Is(err, scheduler.ErrConflict) {
		t.Fatalf("create of an existing offer = %v, want ErrConflict", err)
	}
	if _, err := s.Put(ctx(t), "p", []byte(`{"a":2}`), 7); !errors.Is(err, scheduler.ErrConflict) {
		t.Fatalf("replace at a wrong version = %v, want ErrConflict", err)
	}
	if _, err := s.Put(ctx(t), "nope", []byte(`{}`), 3); !errors.Is(err, scheduler.ErrConflict) {
		t.Fatalf("replace of a missing offer = %v, want ErrConflict", err)
	}
	if v := put(t, s, "p", `{"a":2}`, 1); v != 2 {
		t.Fatalf("replace: version %d, want 2", v)
	}
	if v := put(t, s, "p", `{"a":3}`, scheduler.AnyVersion); v != 3 {
		t.Fatalf("replace at any version: %d, want 3", v)
	}
	if _, err := s.Put(ctx(t), "q", []byte(`[1,2]`), 0); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("a body that is not a JSON object = %v, want ErrInvalid", err)
	}
	o, _ := load(t, s, "p", "")
	if o.Version != 3 || Field(o.Body, "a") != "3" {
		t.Fatalf("Load = %+v, want version 3, a=3", o)
	}
	if o, _ := load(t, s, "missing", "st"); o.Version != 0 {
		t.Fatalf("Load of a missing offer: version %d, want 0", o.Version)
	}
	sh := scheduler.ShardOf("p", 2)
	l := claimOne(t, s, "a", sh, time.Minute)
	c, ok := changeOf(changes(t, s, l), "p")
	if !ok || c.Source != "" || c.Fields != nil {
		t.Fatalf("mark of a created-then-replaced offer = %+v (found %v), want no source and every field", c, ok)
	}
}

func testSaveAtomic(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	id := IDIn("save", 0, 2, 1)[0]
	v := put(t, s, id, `{"a":1,"b":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	if cs := changes(t, s, l); len(cs) == 1 {
		if err := s.AckChange(ctx(t), l, cs[0]); err != nil {
			t.Fatal(err)
		}
	}
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0})
	saved, err := s.Save(ctx(t), l, scheduler.Save{
		OfferID: id, Stage: "st", ReadVersion: v, Body: []byte(`{"a":2,"b":1}`), Fields: []string{"a"},
		State: str("s1"), Timer: t0.Add(time.Hour), Chain: 3, AfterSave: true,
	})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if !saved.Changed || saved.OfferVersion != v+1 || saved.StateVersion != 1 {
		t.Fatalf("Saved = %+v, want changed, offer version %d, state version 1", saved, v+1)
	}
	o, st := load(t, s, id, "st")
	if o.Version != v+1 || Field(o.Body, "a") != "2" || o.Chain != 3 || StateString(st) != "s1" || st.Version != 1 {
		t.Fatalf("after Save: offer %+v state %q v%d", o, StateString(st), st.Version)
	}
	if _, other := load(t, s, id, "other"); other.Value != nil {
		t.Fatal("another stage sees st's state")
	}
	es := check(t, s, 0, id)
	if len(es) != 1 || !es[0].Timer || !es[0].Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after Save, queues = %+v, want st's timer at +1h only", es)
	}
	c, ok := changeOf(changes(t, s, l), id)
	if !ok || c.Source != "st" || !slices.Equal(c.Fields, []string{"a"}) || c.Chain != 3 {
		t.Fatalf("mark = %+v (found %v), want source st, fields [a], chain 3", c, ok)
	}
	ps, err := s.AfterSaves(ctx(t), l, "st", 10)
	if err != nil || len(ps) != 1 || ps[0].OfferID != id {
		t.Fatalf("AfterSaves = %v, %v; want the save", ps, err)
	}
}

func testSaveConflict(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{"a":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "o", Due: t0})
	v2 := put(t, s, "o", `{"a":5}`, v) // an outside change while the stage ran
	for _, sv := range []scheduler.Save{
		{OfferID: "o", Stage: "st", ReadVersion: v, Body: []byte(`{"a":2}`), State: str("x"), Timer: t0.Add(time.Hour)},
		{OfferID: "o", Stage: "st", ReadVersion: v, State: str("x")}, // state only: the stage saw an old offer
	} {
		if _, err := s.Save(ctx(t), l, sv); !errors.Is(err, scheduler.ErrConflict) {
			t.Fatalf("Save read at version %d after a change to %d = %v, want ErrConflict", v, v2, err)
		}
	}
	o, st := load(t, s, "o", "st")
	if o.Version != v2 || Field(o.Body, "a") != "5" || st.Value != nil {
		t.Fatalf("after a conflict: offer %+v state %v, want version %d untouched and no state", o, st, v2)
	}
	if es := check(t, s, 0, "o"); len(es) != 1 || !es[0].Due.Equal(t0) {
		t.Fatalf("after a conflict, queues = %+v, want the entry as it was", es)
	}
}

func testStateConflict(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{"a":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	if ok, err := s.UpdateState(ctx(t), "o", "st", str("outside"), 0); !ok || err != nil {
		t.Fatalf("UpdateState = %v, %v", ok, err)
	}
	_, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "st", ReadVersion: v, Body: []byte(`{"a":2}`), State: str("stage"), StateVersion: 0})
	if !errors.Is(err, scheduler.ErrConflict) {
		t.Fatalf("Save with a stale state version = %v, want ErrConflict", err)
	}
	o, st := load(t, s, "o", "st")
	if o.Version != v || StateString(st) != "outside" {
		t.Fatalf("after a state conflict: offer v%d state %q, want v%d and the outside state", o.Version, StateString(st), v)
	}
}

func testPatch(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{"a":1,"price":10}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "pricer", OfferID: "o", Due: t0})
	v2 := put(t, s, "o", `{"a":2,"price":10}`, v) // while the stage ran
	for _, c := range changes(t, s, l) {
		if err := s.AckChange(ctx(t), l, c); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "pricer", ReadVersion: v,
		Patch: scheduler.Patch{"band": json.RawMessage(`"low"`), "price": nil}})
	if err != nil {
		t.Fatalf("patch save read at an old version: %v, want applied", err)
	}
	o, _ := load(t, s, "o", "")
	if saved.OfferVersion != v2+1 || o.Version != v2+1 || Field(o.Body, "a") != "2" || Field(o.Body, "band") != `"low"` || Field(o.Body, "price") != "" {
		t.Fatalf("after the patch: %s v%d (saved %+v), want a=2 kept, band set, price deleted, version %d", o.Body, o.Version, saved, v2+1)
	}
	c, ok := changeOf(changes(t, s, l), "o")
	if !ok || c.Source != "" || !slices.Equal(c.Fields, []string{"band", "price"}) {
		t.Fatalf("mark of a patch on a newer offer = %+v (found %v), want no source (the patcher is asked too), fields [band price]", c, ok)
	}
	if es := check(t, s, 0, "o"); len(es) != 0 {
		t.Fatalf("after the patch, queues = %+v, want none (the mark asks again)", es)
	}
	// A patch that changes nothing on a newer offer leaves the entry due:
	// no mark will ask the stage about that offer.
	offer(t, s, l, scheduler.Entry{Stage: "pricer", OfferID: "o", Due: t0})
	put(t, s, "o", `{"a":3,"band":"low"}`, v2+1)
	if _, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "pricer", ReadVersion: v2 + 1,
		Patch: scheduler.Patch{"band": json.RawMessage(`"low"`)}}); err != nil {
		t.Fatal(err)
	}
	if es := check(t, s, 0, "o"); len(es) != 1 || es[0].Stage != "pricer" || !es[0].Due.Equal(t0) {
		t.Fatalf("after a no-op patch on a newer offer, queues = %+v, want pricer's entry still due", es)
	}
}

func testUnchanged(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{"a":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	for _, c := range changes(t, s, l) {
		if err := s.AckChange(ctx(t), l, c); err != nil {
			t.Fatal(err)
		}
	}
	if v2 := put(t, s, "o", `{ "a" : 1 }`, v); v2 != v {
		t.Fatalf("Put of the same body: version %d, want %d", v2, v)
	}
	saved, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "st", ReadVersion: v, Patch: scheduler.Patch{"a": json.RawMessage("1")}, State: str("s")})
	if err != nil || saved.Changed || saved.OfferVersion != v {
		t.Fatalf("a patch that changes nothing: %+v, %v; want unchanged at v%d", saved, err, v)
	}
	if cs := changes(t, s, l); len(cs) != 0 {
		t.Fatalf("unchanged offer made marks %+v", cs)
	}
}

func testChangesDurable(e env) {
	t, f := e.t, e.f
	open := f(t, 2)
	s := open(t)
	id := IDIn("dur", 1, 2, 1)[0]
	put(t, s, id, `{"a":1}`, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Another process (or the same one restarted) finds the mark.
	s2 := open(t)
	l := claimOne(t, s2, "next", 1, time.Minute)
	cs := changes(t, s2, l)
	if len(cs) != 1 || cs[0].OfferID != id {
		t.Fatalf("after a restart, Changes = %+v, want the mark of %s", cs, id)
	}
	if err := s2.AckChange(ctx(t), l, cs[0]); err != nil {
		t.Fatal(err)
	}
	if cs := changes(t, s2, l); len(cs) != 0 {
		t.Fatalf("after AckChange, Changes = %+v, want none", cs)
	}
	if l0 := claimOne(t, s2, "next", 0, time.Minute); len(changes(t, s2, l0)) != 0 {
		t.Fatal("shard 0 lists a mark of shard 1's offer")
	}
}

func testAckNewer(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{"a":1,"b":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	first := changes(t, s, l)
	if len(first) != 1 {
		t.Fatalf("after a Put, Changes = %+v, want one mark", first)
	}
	if err := s.AckChange(ctx(t), l, first[0]); err != nil {
		t.Fatal(err)
	}
	put(t, s, "o", `{"a":2,"b":1}`, v)
	read := changes(t, s, l)
	if len(read) != 1 {
		t.Fatalf("after a second Put, Changes = %+v, want one mark", read)
	}
	put(t, s, "o", `{"a":2,"b":2}`, v+1) // after the read: merged into the mark
	if err := s.AckChange(ctx(t), l, read[0]); err != nil {
		t.Fatal(err)
	}
	cs := changes(t, s, l)
	if len(cs) != 1 || cs[0].Seq == read[0].Seq || !slices.Equal(cs[0].Fields, []string{"a", "b"}) {
		t.Fatalf("after acking an older read, Changes = %+v, want one merged mark with fields [a b] and a newer seq", cs)
	}
}

func testTimer(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "o", Due: t0})
	due := t0.Add(180 * 24 * time.Hour)
	if _, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "st", ReadVersion: v, Timer: due}); err != nil {
		t.Fatal(err)
	}
	if ids, next := peek(t, s, l, "st", due.Add(-time.Microsecond), 10); len(ids) != 0 || !next.Equal(due) {
		t.Fatalf("Peek just before the timer = %v, next %v; want none, next %v", ids, next, due)
	}
	es, _, err := s.Peek(ctx(t), l, "st", due, 10)
	if err != nil || len(es) != 1 || !es[0].Timer || es[0].OfferID != "o" {
		t.Fatalf("Peek at the timer = %+v, %v; want o's timer", es, err)
	}
	// A save without a timer ends it.
	if _, err := s.Save(ctx(t), l, scheduler.Save{OfferID: "o", Stage: "st", ReadVersion: v}); err != nil {
		t.Fatal(err)
	}
	if es := check(t, s, 0, "o"); len(es) != 0 {
		t.Fatalf("after a save with no timer, queues = %+v, want none", es)
	}
}

func testDeadLetters(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	l := claimOne(t, s, "r", 0, time.Minute)
	offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: "o", Due: t0})
	for i := 1; i <= 3; i++ {
		n, err := s.Retry(ctx(t), l, "st", "o", t0.Add(time.Duration(i)*time.Minute), fmt.Sprintf("boom %d", i))
		if err != nil || n != i {
			t.Fatalf("Retry %d = %d, %v", i, n, err)
		}
	}
	es := check(t, s, 0, "o")
	if len(es) != 1 || es[0].Attempts != 3 || es[0].LastError != "boom 3" || !es[0].Due.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("after 3 retries: %+v", es)
	}
	if _, err := s.Retry(ctx(t), l, "st", "absent", t0, "x"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("Retry of an absent entry = %v, want ErrNotFound", err)
	}
	if err := s.DeadLetter(ctx(t), l, "st", "o", "gave up"); err != nil {
		t.Fatal(err)
	}
	if es := check(t, s, 0, "o"); len(es) != 0 {
		t.Fatalf("a dead letter is still queued: %+v", es)
	}
	dl, err := s.DeadLetters(ctx(t), "st", 10)
	if err != nil || len(dl) != 1 || dl[0].OfferID != "o" || dl[0].Attempts != 3 || dl[0].Cause != "gave up" {
		t.Fatalf("DeadLetters = %+v, %v", dl, err)
	}
	if err := s.Requeue(ctx(t), "st", "o", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Requeue(ctx(t), "st", "o", t0); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("second Requeue = %v, want ErrNotFound", err)
	}
	if es := check(t, s, 0, "o"); len(es) != 1 || es[0].Attempts != 0 {
		t.Fatalf("requeued entry = %+v, want one with no attempts", es)
	}
	if dl, _ := s.DeadLetters(ctx(t), "st", 10); len(dl) != 0 {
		t.Fatalf("after Requeue, dead letters = %+v", dl)
	}
}

func testUpdateState(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	if _, err := s.UpdateState(ctx(t), "missing", "st", str("x"), 0); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("UpdateState of a missing offer = %v, want ErrNotFound", err)
	}
	put(t, s, "o", `{}`, 0)
	if ok, err := s.UpdateState(ctx(t), "o", "st", str("one"), 0); !ok || err != nil {
		t.Fatalf("first UpdateState = %v, %v", ok, err)
	}
	if ok, err := s.UpdateState(ctx(t), "o", "st", str("stale"), 0); ok || err != nil {
		t.Fatalf("UpdateState at a stale version = %v, %v; want false", ok, err)
	}
	if ok, err := s.UpdateState(ctx(t), "o", "st", str("two"), 1); !ok || err != nil {
		t.Fatalf("UpdateState at version 1 = %v, %v", ok, err)
	}
	if _, st := load(t, s, "o", "st"); StateString(st) != "two" || st.Version != 2 {
		t.Fatalf("state = %q v%d, want two v2", StateString(st), st.Version)
	}
}

func testAfterSave(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	v := put(t, s, "o", `{}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	sv := scheduler.Save{OfferID: "o", Stage: "st", ReadVersion: v, State: str("1"), AfterSave: true}
	if _, err := s.Save(ctx(t), l, sv); err != nil {
		t.Fatal(err)
	}
	ps, err := s.AfterSaves(ctx(t), l, "st", 10)
	if err != nil || len(ps) != 1 {
		t.Fatalf("AfterSaves = %v, %v", ps, err)
	}
	sv.State, sv.StateVersion = str("2"), 1
	if _, err := s.Save(ctx(t), l, sv); err != nil { // saved again before the hook ran
		t.Fatal(err)
	}
	if err := s.AfterSaveDone(ctx(t), l, ps[0]); err != nil {
		t.Fatal(err)
	}
	if ps2, _ := s.AfterSaves(ctx(t), l, "st", 10); len(ps2) != 1 || ps2[0].Seq == ps[0].Seq {
		t.Fatalf("after Done of an older read, pending = %+v, want the newer save", ps2)
	} else if err := s.AfterSaveDone(ctx(t), l, ps2[0]); err != nil {
		t.Fatal(err)
	}
	if ps3, _ := s.AfterSaves(ctx(t), l, "st", 10); len(ps3) != 0 {
		t.Fatalf("after Done, pending = %+v", ps3)
	}
	if ps4, _ := s.AfterSaves(ctx(t), l, "other", 10); len(ps4) != 0 {
		t.Fatalf("another stage has pending after-saves: %+v", ps4)
	}
}

func testScan(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	ids := IDIn("scan", 1, 2, 5)
	for _, id := range ids {
		put(t, s, id, `{}`, 0)
	}
	put(t, s, IDIn("scan-other", 0, 2, 1)[0], `{}`, 0)
	var got []string
	after := ""
	for {
		page, err := s.Scan(ctx(t), 1, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Scan of shard 1 = %v, want %v", got, want)
	}
}

func testWakeups(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	c, cancel := context.WithCancel(ctx(t))
	ch, err := s.Wakeups(c)
	if err != nil {
		t.Fatal(err)
	}
	id := IDIn("wake", 1, 2, 1)[0]
	l := claimOne(t, s, "r", 1, time.Minute)
	// The subscription may begin after a write; write until one arrives.
	want := func(pred func(scheduler.Wakeup) bool, write func()) {
		t.Helper()
		deadline := time.After(waitLimit)
		for {
			write()
			tick := time.After(200 * time.Millisecond)
			for {
				select {
				case w := <-ch:
					if pred(w) {
						return
					}
					continue
				case <-tick:
				case <-deadline:
					t.Fatal("no wake-up came")
				}
				break
			}
		}
	}
	n := 0
	want(func(w scheduler.Wakeup) bool { return (w.Shard == 1 || w.Shard == -1) && w.Stage == "" }, func() {
		n++
		put(t, s, id, fmt.Sprintf(`{"n":%d}`, n), scheduler.AnyVersion)
	})
	want(func(w scheduler.Wakeup) bool {
		return (w.Shard == 1 || w.Shard == -1) && (w.Stage == "st" || w.Shard == -1)
	}, func() {
		n++
		offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0.Add(-time.Duration(n) * time.Second)})
	})
	cancel()
	for range ch { // closed when the context ends
	}
}

func testBadInput(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	l := claimOne(t, s, "r", 0, time.Minute)
	inOne := IDIn("bad", 1, 2, 1)[0]
	c := ctx(t)
	checks := map[string]error{}
	_, checks["Offer to the wrong shard"] = s.Offer(c, l, scheduler.Entry{Stage: "st", OfferID: inOne, Due: t0})
	_, checks["Save to the wrong shard"] = s.Save(c, l, scheduler.Save{OfferID: inOne, Stage: "st"})
	_, checks["empty offer id"] = s.Put(c, "", []byte(`{}`), 0)
	_, checks["empty stage"] = s.Offer(c, l, scheduler.Entry{OfferID: IDIn("bad", 0, 2, 1)[0], Due: t0})
	_, checks["body and patch"] = s.Save(c, l, scheduler.Save{OfferID: IDIn("bad", 0, 2, 1)[0], Stage: "st", Body: []byte(`{}`), Patch: scheduler.Patch{"a": nil}})
	_, checks["no owner"] = s.Claim(c, "", []int{1}, time.Minute)
	for name, err := range checks {
		if !errors.Is(err, scheduler.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
}

// SaveMany decides each save as Save would: the refused ones write
// nothing, the others are written.
func testSaveMany(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	va := put(t, s, "a", `{"n":1}`, 0)
	vb := put(t, s, "b", `{"n":1}`, 0)
	vb = put(t, s, "b", `{"n":2}`, vb) // the stage read version 1
	vc := put(t, s, "c", `{"n":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	for _, c := range changes(t, s, l) {
		if err := s.AckChange(ctx(t), l, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		offer(t, s, l, scheduler.Entry{Stage: "st", OfferID: id, Due: t0})
	}
	if out, errs, err := s.SaveMany(ctx(t), l, nil); err != nil || len(out) != 0 || len(errs) != 0 {
		t.Fatalf("SaveMany of none = %v, %v, %v", out, errs, err)
	}
	saves := []scheduler.Save{
		{OfferID: "a", Stage: "st", ReadVersion: va, State: str("a1"), Timer: t0.Add(time.Hour)},
		{OfferID: "b", Stage: "st", ReadVersion: vb - 1, State: str("b1")},
		{OfferID: "missing", Stage: "st", ReadVersion: 1, State: str("m1")},
		{OfferID: "a", Stage: "st", ReadVersion: va, State: str("twice")},
		{OfferID: "c", Stage: "st", ReadVersion: vc, Patch: scheduler.Patch{"x": json.RawMessage(`1`)}},
	}
	out, errs, err := s.SaveMany(ctx(t), l, saves)
	if err != nil || len(out) != len(saves) || len(errs) != len(saves) {
		t.Fatalf("SaveMany = %v, %v, %v; want an answer per save", out, errs, err)
	}
	for i, want := range []error{nil, scheduler.ErrConflict, scheduler.ErrNotFound, scheduler.ErrInvalid, nil} {
		if (want == nil && errs[i] != nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("save %d (offer %s): %v, want %v", i, saves[i].OfferID, errs[i], want)
		}
	}
	if out[0].StateVersion != 1 || out[0].Changed || !out[4].Changed || out[4].OfferVersion != vc+1 {
		t.Fatalf("Saved = %+v, want a's state at version 1 and c changed to version %d", out, vc+1)
	}
	if _, st := load(t, s, "a", "st"); StateString(st) != "a1" || st.Version != 1 {
		t.Fatalf("a's state %q v%d, want a1 v1", StateString(st), st.Version)
	}
	if es := check(t, s, 0, "a"); len(es) != 1 || !es[0].Timer || !es[0].Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a's queues = %+v, want st's timer at +1h", es)
	}
	if o, st := load(t, s, "b", "st"); o.Version != vb || st.Value != nil {
		t.Fatalf("the conflicting save wrote: b v%d state %q", o.Version, StateString(st))
	}
	if es := check(t, s, 0, "b"); len(es) != 1 || !es[0].Due.Equal(t0) {
		t.Fatalf("b's queues = %+v, want its entry as it was", es)
	}
	if o, _ := load(t, s, "c", ""); o.Version != vc+1 || Field(o.Body, "x") != "1" {
		t.Fatalf("c = %s v%d, want the patch at version %d", o.Body, o.Version, vc+1)
	}
	if es := check(t, s, 0, "c"); len(es) != 0 {
		t.Fatalf("c's queues = %+v, want none", es)
	}
	if c, ok := changeOf(changes(t, s, l), "c"); !ok || c.Source != "st" || !slices.Equal(c.Fields, []string{"x"}) {
		t.Fatalf("c's mark = %+v (found %v), want source st, fields [x]", c, ok)
	}
}

// OfferMany decides each entry as Offer would, on the queue as the
// earlier entries of the call left it; a bad entry refuses the call.
func testOfferMany(e env) {
	t, f := e.t, e.f
	s := f(t, 2)(t)
	ids := IDIn("om", 0, 2, 2)
	other := IDIn("om", 1, 2, 1)[0]
	l := claimOne(t, s, "r", 0, time.Minute)
	if _, err := s.OfferMany(ctx(t), l, []scheduler.Entry{
		{Stage: "st", OfferID: ids[0], Due: t0},
		{Stage: "st", OfferID: other, Due: t0},
	}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("OfferMany with an offer of another shard = %v, want ErrInvalid", err)
	}
	if es := check(t, s, 0, ids[0]); len(es) != 0 {
		t.Fatalf("a refused OfferMany queued %+v", es)
	}
	queued, err := s.OfferMany(ctx(t), l, []scheduler.Entry{
		{Stage: "st", OfferID: ids[0], Due: t0.Add(time.Hour), Timer: true},
		{Stage: "st", OfferID: ids[0], Due: t0.Add(2 * time.Hour)},
		{Stage: "st", OfferID: ids[1], Due: t0, Lane: scheduler.LaneRescan},
		{Stage: "st", OfferID: ids[1], Due: t0.Add(time.Hour)},
		{Stage: "st2", OfferID: ids[1], Due: t0},
	})
	if err != nil || !slices.Equal(queued, []bool{true, false, true, true, true}) {
		t.Fatalf("OfferMany = %v, %v; want [true false true true true]", queued, err)
	}
	if es := check(t, s, 0, ids[0]); len(es) != 1 || !es[0].Timer || !es[0].Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Check(%s) = %+v, want st's timer at +1h", ids[0], es)
	}
	es := check(t, s, 0, ids[1])
	if len(es) != 2 || es[0].Stage != "st" || es[0].Lane != scheduler.LaneMain || !es[0].Due.Equal(t0) || es[1].Stage != "st2" {
		t.Fatalf("Check(%s) = %+v, want st's entry moved to the main lane at t0, and st2's", ids[1], es)
	}
}

// AckChanges removes the marks read, but not one that changed since.
func testAckChanges(e env) {
	t, f := e.t, e.f
	s := f(t, 1)(t)
	va := put(t, s, "a", `{"n":1}`, 0)
	put(t, s, "b", `{"n":1}`, 0)
	l := claimOne(t, s, "r", 0, time.Minute)
	cs := changes(t, s, l)
	if len(cs) != 2 {
		t.Fatalf("Changes = %+v, want a's and b's", cs)
	}
	put(t, s, "a", `{"n":2}`, va)
	if err := s.AckChanges(ctx(t), l, cs); err != nil {
		t.Fatalf("AckChanges: %v", err)
	}
	left := changes(t, s, l)
	if len(left) != 1 || left[0].OfferID != "a" {
		t.Fatalf("after AckChanges, marks = %+v, want a's newer one only", left)
	}
	if err := s.AckChanges(ctx(t), l, []scheduler.Change{{Shard: 0, OfferID: ""}}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("AckChanges of a change without an offer = %v, want ErrInvalid", err)
	}
}
