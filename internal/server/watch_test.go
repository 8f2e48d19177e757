package server_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// history collects a watch's events and checks them as they come: each
// bucket's revisions one after another, with no gap and no repeat.
type history struct {
	mu     sync.Mutex
	last   map[uint32]uint64   // bucket -> last revision
	values map[uint64][]string // key -> the values its changes carried, in order
	events int
	errs   []string
}

func watchInto(t *testing.T, w *client.Watch, h *history) chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range w.Events() {
			if err != nil {
				h.mu.Lock()
				h.errs = append(h.errs, err.Error())
				h.mu.Unlock()
				return
			}
			h.mu.Lock()
			if prev, ok := h.last[ev.Bucket]; ok && ev.Revision != prev+1 {
				h.errs = append(h.errs, fmt.Sprintf("bucket %d: revision %d after %d", ev.Bucket, ev.Revision, prev))
			}
			h.last[ev.Bucket] = ev.Revision
			h.events++
			for _, ch := range ev.Changes {
				k, _ := ch.Key[0].AsUint()
				v := "<deleted>"
				if ch.Kind != client.ChangeDelete {
					v, _ = ch.Tuple[1].AsString()
				}
				h.values[k] = append(h.values[k], v)
			}
			h.mu.Unlock()
		}
	}()
	return done
}

// waitFor polls cond under h's lock.
func (h *history) waitFor(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		h.mu.Lock()
		ok, errs := cond(), h.errs
		h.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("the watch: %v", errs)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<22)
			buf = buf[:runtime.Stack(buf, true)]
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "client.(*Watch)") || strings.Contains(g, "(*watcher)") || strings.Contains(g, "Storage).Watch") {
					t.Log(g)
				}
			}
			h.mu.Lock()
			t.Fatalf("timed out waiting for %s (%d events over %d buckets)", what(), h.events, len(h.last))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A watch of every bucket, started before a second replicaset joins,
// receives every write in each key's order while half the buckets move
// under it: each bucket's revisions continue across its move, with no gap
// and no repeat, and the last change of every key is its last write. A
// watch resumed from the first one's cursor receives only what came after.
func TestAWatchFollowsBucketsAcrossMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	_, startSecond, c := twoInstances(ctx, t, 5*time.Second)
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "w", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = c.Space("w").Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.String("v0")})
		}
		return err
	})
	w, err := c.Watch(ctx, client.WatchOptions{Spaces: []string{"w"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h := &history{last: map[uint32]uint64{}, values: map[uint64][]string{}}
	done := watchInto(t, w, h)
	// A second watch, of every space: the two share the feed's events
	// (one conversion, sent on both streams).
	wAll, err := c.Watch(ctx, client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wAll.Close()
	hAll := &history{last: map[uint32]uint64{}, values: map[uint64][]string{}}
	doneAll := watchInto(t, wAll, hAll)

	const keys = 300
	last := map[uint64]string{}
	write := func(k uint64, v string) {
		t.Helper()
		if _, err := c.Space("w").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String(v)}); err != nil {
			t.Fatalf("replace %d: %v", k, err)
		}
		last[k] = v
	}
	for k := range uint64(keys) {
		write(k, fmt.Sprint("a", k))
	}
	if _, err := c.Space("w").Delete(ctx, []tuple.Value{tuple.Uint(7)}); err != nil {
		t.Fatal(err)
	}
	last[7] = "<deleted>"
	startSecond()
	balanced := false
	for round := 0; !balanced || round < 3*keys; round++ {
		write(uint64(round%keys), fmt.Sprint("b", round))
		if round%100 == 0 && !balanced {
			st, err := c.Status(ctx, false)
			balanced = err == nil && len(st.GetReplicasets()) == 2 &&
				st.GetReplicasets()[0].GetBucketCount() == buckets/2 && st.GetReplicasets()[1].GetBucketCount() == buckets/2
			if round > 200000 {
				t.Fatalf("the buckets did not balance: %v", st.GetReplicasets())
			}
		}
	}
	missing := ""
	h.waitFor(t, func() string { return "every key's last write: " + missing }, func() bool {
		for k, v := range last {
			vs := h.values[k]
			if len(vs) == 0 || vs[len(vs)-1] != v {
				bk, _ := c.Space("w").Bucket(ctx, tuple.Uint(k))
				missing = fmt.Sprintf("bucket %d: key %d: want %s last, the watch saw %d changes: %v", bk, k, v, len(vs), vs[max(0, len(vs)-3):])
				return false
			}
		}
		return true
	})
	hAll.waitFor(t, func() string { return "the second watch: every key's last write" }, func() bool {
		for k, v := range last {
			vs := hAll.values[k]
			if len(vs) == 0 || vs[len(vs)-1] != v {
				return false
			}
		}
		return true
	})
	wAll.Close()
	<-doneAll
	cur := w.Cursor()
	w.Close()
	<-done
	h.mu.Lock()
	t.Logf("%d events over %d buckets", h.events, len(h.last))
	if len(h.values[0]) == 0 || h.values[0][0] != "a0" {
		t.Errorf("key 0's first change %v, want a0 (the watch started before it)", h.values[0])
	}
	h.mu.Unlock()

	// Resumed from the cursor: only what came after.
	write(1, "after")
	w2, err := c.Watch(ctx, client.WatchOptions{Spaces: []string{"w"}, From: &cur})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	for ev, err := range w2.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Changes) != 1 {
			t.Fatalf("the resumed watch's first event: %+v, want the one write after its cursor", ev)
		}
		if v, _ := ev.Changes[0].Tuple[1].AsString(); v != "after" {
			t.Fatalf("the resumed watch's first change is %v, want the write after its cursor", ev.Changes[0].Tuple)
		}
		if r, _ := cur.Revision(ev.Bucket); ev.Revision != r+1 {
			t.Fatalf("the resumed watch's first event is revision %d of bucket %d, the cursor had %d", ev.Revision, ev.Bucket, r)
		}
		return
	}
	t.Fatal("the resumed watch ended with no event: the write after its cursor never came")
}

// A watch with an initial scan gives every tuple first, as read, then the
// changes made after the watch began.
func TestAWatchWithAnInitialScan(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	addr := servertest.OneInstanceCluster(t)
	c, err := client.New(ctx, client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "is", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		return err
	})
	const rows = 50
	for k := range uint64(rows) {
		if _, err := c.Space("is").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("old")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Watch(ctx, client.WatchOptions{InitialScan: true, From: &client.Cursor{}}); err == nil {
		t.Fatal("a watch with an initial scan and a cursor was not refused")
	}
	w, err := c.Watch(ctx, client.WatchOptions{Spaces: []string{"is"}, InitialScan: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	scanned := map[uint64]bool{}
	wroteNew := false
	for ev, err := range w.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Changes) != 1 {
			t.Fatalf("event %+v, want one change", ev)
		}
		ch := ev.Changes[0]
		k, _ := ch.Key[0].AsUint()
		v, _ := ch.Tuple[1].AsString()
		if ch.Kind == client.ChangeScan {
			if wroteNew || ev.Revision != 0 || v != "old" {
				t.Fatalf("a scanned tuple %v (revision %d) after the changes began, or not as written", ch.Tuple, ev.Revision)
			}
			scanned[k] = true
			if len(scanned) == rows {
				if _, err := c.Space("is").Replace(ctx, tuple.Tuple{tuple.Uint(rows), tuple.String("new")}); err != nil {
					t.Fatal(err)
				}
				wroteNew = true
			}
			continue
		}
		if !wroteNew || len(scanned) != rows {
			t.Fatalf("a change %v before the scan's %d tuples ended (%d seen)", ch, rows, len(scanned))
		}
		if k == rows && v == "new" && ch.Kind == client.ChangeReplace {
			return
		}
	}
	t.Fatalf("the watch ended (%v) before the change after its scan came (%d tuples scanned)", ctx.Err(), len(scanned))
}

// An instance's history limits become its replicaset's (its leader
// proposes them): with --history-revisions 16 a bucket written 300 times
// keeps well under the default's 1,024 revisions, and a watch from its
// first revision is refused as compacted, naming where the history starts.
func TestAnInstancesHistoryLimitsAreItsReplicasets(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lis, addr := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: lis, AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
		HistoryRevisions: 16, HistoryBytes: 1 << 20})
	c, err := client.New(ctx, client.Config{Peers: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "h", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = c.Space("h").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.Uint(0)})
		}
		return err
	})
	b, err := c.Space("h").Bucket(ctx, tuple.Uint(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := c.Space("h").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.Uint(uint64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	from := client.NewCursor(map[uint32]uint64{b: 1})
	w, err := c.Watch(ctx, client.WatchOptions{Spaces: []string{"h"}, Buckets: []uint32{b}, From: &from})
	if err == nil {
		for ev, e := range w.Events() {
			err = e
			if e == nil {
				err = fmt.Errorf("an event at revision %d", ev.Revision)
			}
			break
		}
		w.Close()
	}
	if !errors.Is(err, client.ErrCompacted) || !strings.Contains(err.Error(), "its history starts at revision") {
		t.Fatalf("a watch from revision 1 after 301 writes with a history of 16: %v, want ErrCompacted", err)
	}
}

// History limits out of their bounds are refused when the instance
// starts, naming them (the replicaset would refuse them in its log).
func TestHistoryLimitsOutOfBoundsAreRefusedAtStart(t *testing.T) {
	for _, tt := range []struct {
		revisions int
		bytes     int64
		want      string
	}{
		{3, 1 << 20, "--history-revisions 3, --history-bytes 1048576: history revisions 3: want 16 to"},
		{1 << 40, 1 << 20, "--history-revisions 1099511627776"},
		{100, 1000, "history bytes 1000: want at least 65536"},
	} {
		l, _ := servertest.Listen(t)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := server.RunInstance(ctx, server.InstanceConfig{Listener: l, DataDir: t.TempDir(), HistoryRevisions: tt.revisions, HistoryBytes: tt.bytes}, "")
		cancel()
		var ref *server.RefusedError
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("limits %d, %d: %v, want a refusal with %q", tt.revisions, tt.bytes, err, tt.want)
		}
	}
}
