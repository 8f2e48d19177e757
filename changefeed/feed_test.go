package changefeed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

const (
	testTopic   = "changes"
	testBuckets = 60
)

// cluster starts n instances (replication factor 1: one replicaset each,
// the first bootstraps; start the others with the returned func) and a
// client of them, with a space o(e, n, v) sharded by e.
func cluster(ctx context.Context, tb testing.TB, n int) (c *client.Client, startRest func()) {
	tb.Helper()
	var addrs []string
	var liss []net.Listener
	for range n {
		l, a := servertest.Listen(tb)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	start := func(i int) {
		servertest.Run(tb, server.InstanceConfig{Listener: liss[i], Peers: addrs[:1], AutoOfflineTimeout: 10 * time.Second,
			ShutdownTimeout: 5 * time.Second, InitBucketCount: testBuckets})
	}
	start(0)
	c, err := client.New(ctx, client.Config{Peers: addrs, Timeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	poll(tb, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "o", Format: tuple.Format{
			{Name: "e", Type: tuple.TypeUnsigned}, {Name: "n", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"e", "n"}, ShardingKey: []string{"e"}}, true)
		if err == nil {
			_, err = c.Space("o").Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.Uint(0), tuple.String("probe")})
		}
		return err
	})
	return c, func() {
		for i := 1; i < n; i++ {
			start(i)
		}
	}
}

func poll(tb testing.TB, what string, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// broker starts a kfake broker with the test topic (4 partitions) on
// port (0: any), keeping its data in dir ("": in memory).
func broker(tb testing.TB, port int, dir string) *kfake.Cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, testTopic), kfake.Ports(port)}
	if dir != "" {
		opts = append(opts, kfake.DataDir(dir))
	}
	k, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// feedProcess runs a feed in the background as one process would.
type feedProcess struct {
	cancel context.CancelFunc
	done   chan error
}

func startFeed(ctx context.Context, tb testing.TB, cfg Config) *feedProcess {
	tb.Helper()
	fctx, cancel := context.WithCancel(ctx)
	p := &feedProcess{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- Run(fctx, cfg) }()
	tb.Cleanup(func() { p.stop(tb) })
	return p
}

// stop ends the process (a kill when its config says noFinalSave) and
// fails the test if it ended with an error.
func (p *feedProcess) stop(tb testing.TB) {
	tb.Helper()
	p.cancel()
	select {
	case err, ok := <-p.done:
		if ok && err != nil {
			tb.Errorf("the feed ended with: %v", err)
		}
		if ok {
			close(p.done)
		}
	case <-time.After(60 * time.Second):
		tb.Errorf("the feed did not stop within 60s")
	}
}

// waitStarted waits until every part of feed name saved a cursor (a write
// after it reaches the topic).
func waitStarted(ctx context.Context, tb testing.TB, c *client.Client, name string, parts int, p *feedProcess) {
	tb.Helper()
	poll(tb, "the feed's parts started", func() error {
		select {
		case err := <-p.done:
			tb.Fatalf("the feed ended: %v", err)
		default:
		}
		for i := range parts {
			res, _, err := c.Space(CursorSpace).Select(ctx, []tuple.Value{tuple.String(name), tuple.Uint(uint64(i))}, client.RW)
			if err != nil {
				return err
			}
			if res.Tuple == nil {
				return fmt.Errorf("part %d has no tuple", i)
			}
			saved, _ := res.Tuple[4].AsString()
			cur, _, err := splitSaved(saved)
			if err != nil {
				return err
			}
			c, err := client.ParseCursor(cur)
			if err != nil || c.Buckets() != len(partBuckets(i, parts, testBuckets)) {
				return fmt.Errorf("part %d: cursor %q (%w)", i, cur, err)
			}
		}
		return nil
	})
}

// writer writes entities' rows, remembering each row's values in order.
type writer struct {
	c    *client.Client
	mu   sync.Mutex
	want map[string][]string // "e/n" -> values written, in order ("" for a delete)
}

func newWriter(c *client.Client) *writer { return &writer{c: c, want: map[string][]string{}} }

// batch writes rows n and n+1 of entity e in one batch (one event of two
// changes), with value v.
func (w *writer) batch(ctx context.Context, t *testing.T, e, n uint64, v string) {
	t.Helper()
	_, err := w.c.Batch().
		Replace("o", tuple.Tuple{tuple.Uint(e), tuple.Uint(n), tuple.String(v)}).
		Replace("o", tuple.Tuple{tuple.Uint(e), tuple.Uint(n + 1), tuple.String(v)}).
		Do(ctx)
	if err != nil {
		t.Fatalf("batch of entity %d: %v", e, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range []uint64{n, n + 1} {
		key := fmt.Sprintf("%d/%d", e, k)
		w.want[key] = append(w.want[key], v)
	}
}

func (w *writer) del(ctx context.Context, t *testing.T, e, n uint64) {
	t.Helper()
	if _, err := w.c.Space("o").Delete(ctx, []tuple.Value{tuple.Uint(e), tuple.Uint(n)}); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	key := fmt.Sprintf("%d/%d", e, n)
	w.want[key] = append(w.want[key], "")
}

// round writes every entity once: rows 1 and 2 of entities 1..entities.
func (w *writer) round(ctx context.Context, t *testing.T, entities int, tag string) {
	t.Helper()
	for e := 1; e <= entities; e++ {
		w.batch(ctx, t, uint64(e), 1, fmt.Sprintf("%s-%d", tag, e))
	}
}

// seen is what a consumer read from the topic.
type seen struct {
	records, repeats int
	scans            int // scan records applied
	scanTakenOver    int // those numbered by a relay that took a scan over
	rows             map[string][]string
	// last is the last (revision, index) applied of each bucket in each
	// partition.
	last  map[[2]int64][2]uint64
	first map[[3]uint64]string // (bucket, revision, index) -> the value first read
}

// consume reads the topic from its start until every row's writes were
// read (or fails after a while): each record's key must be its entity's
// sharding key, records of a bucket in a partition come in (revision,
// index) order except
// for repeats of earlier ones, which must be equal to the first, and each
// row's values must be its writes, in order, none missing.
func consume(t *testing.T, brokers []string, w *writer) *seen {
	t.Helper()
	return consumeWith(t, brokers, w, func(got, want []string) bool { return slices.Equal(got, want) })
}

// brief shows a row's values, the first and last few of many.
func brief(vs []string) string {
	if len(vs) <= 8 {
		return fmt.Sprint(vs)
	}
	return fmt.Sprintf("%v ... %v (%d values)", vs[:3], vs[len(vs)-3:], len(vs))
}

// consumeWith is consume with match saying whether a row's values read
// are its writes (got is complete once they match).
func consumeWith(t *testing.T, brokers []string, w *writer, match func(got, want []string) bool) *seen {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(testTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := &seen{rows: map[string][]string{}, last: map[[2]int64][2]uint64{}, first: map[[3]uint64]string{}}
	complete := func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		for k, vs := range w.want {
			if got := s.rows[k]; !match(got, vs) {
				return fmt.Sprintf("row %s: %s read of writes %s", k, brief(got), brief(vs))
			}
		}
		return ""
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing := complete()
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the topic lacks writes: %s (%d records read, %d repeats)", missing, s.records, s.repeats)
		}
		pctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				t.Logf("fetch: %v", fe.Err)
			}
		}
		fs.EachRecord(func(rec *kgo.Record) { s.add(t, rec) })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, vs := range w.want {
		if !match(s.rows[k], vs) {
			t.Errorf("row %s: the topic has %s, the writes were %s", k, brief(s.rows[k]), brief(vs))
		}
	}
	return s
}

func (s *seen) add(t *testing.T, rec *kgo.Record) {
	t.Helper()
	s.records++
	b, rev, i, err := Position(rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRecord(rec.Value)
	if err != nil {
		t.Fatalf("record %s: %v", rec.Value, err)
	}
	if r.Bucket != b || r.Revision != rev || r.Index != i {
		t.Fatalf("record %s: its headers say bucket %d revision %d index %d", rec.Value, b, rev, i)
	}
	if r.Space != "o" {
		t.Fatalf("a record of space %s: %s", r.Space, rec.Value)
	}
	e, _ := r.Key[0].AsInt()
	if want := fmt.Sprintf("[%d]", e); string(rec.Key) != want {
		t.Fatalf("record %s has key %s, want its sharding key %s", rec.Value, rec.Key, want)
	}
	pos := [3]uint64{uint64(b), rev, uint64(i)}
	pb := [2]int64{int64(rec.Partition), int64(b)}
	last, ok := s.last[pb]
	if ok && (rev < last[0] || rev == last[0] && uint64(i) <= last[1]) {
		s.repeats++
		if first, had := s.first[pos]; !had {
			t.Fatalf("record %s comes after revision %d index %d of its bucket, and was not read before", rec.Value, last[0], last[1])
		} else if first != string(rec.Value) {
			t.Fatalf("a repeat of bucket %d revision %d index %d differs: %s, first %s", b, rev, i, rec.Value, first)
		}
		return
	}
	s.last[pb] = [2]uint64{rev, uint64(i)}
	s.first[pos] = string(rec.Value)
	if r.Kind == client.ChangeScan {
		s.scans++
		if r.Index >= scanPageMax {
			s.scanTakenOver++
		}
	}
	n, _ := r.Key[1].AsInt()
	v := ""
	if r.Tuple != nil {
		v, _ = r.Tuple[2].AsString()
	}
	key := fmt.Sprintf("%d/%d", e, n)
	s.rows[key] = append(s.rows[key], v)
}

func baseConfig(c *client.Client, k *kfake.Cluster, holder string) Config {
	return Config{Client: c, Spaces: []string{"o"}, Brokers: k.ListenAddrs(), Topic: testTopic, Name: "f",
		Parts: 4, Holder: holder, LeaseTTL: 2 * time.Second, SaveEvery: 50 * time.Millisecond}
}

// Every committed batch reaches the topic, one record per change, keyed by
// its entity, with each row's writes in order and none repeated.
func TestEveryBatchReachesTheTopicInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	p := startFeed(ctx, t, baseConfig(c, k, "a"))
	waitStarted(ctx, t, c, "f", 4, p)
	w := newWriter(c)
	for i := range 5 {
		w.round(ctx, t, 40, fmt.Sprint("r", i))
	}
	w.del(ctx, t, 3, 1)
	s := consume(t, k.ListenAddrs(), w)
	if s.repeats != 0 {
		t.Errorf("%d repeats with no crash", s.repeats)
	}
	if s.records != 5*40*2+1 {
		t.Errorf("%d records, want %d", s.records, 5*40*2+1)
	}
}

// A relay killed after Kafka took its records but before it saved their
// cursor: the next one resumes from the saved cursor, sends them again
// (each repeat equal to the first, with its bucket and revision), and
// nothing is missing, including what was written while no relay ran.
func TestAKilledRelayResendsFromItsSavedCursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	cfg := baseConfig(c, k, "a")
	cfg.SaveEvery = time.Hour // only the start's cursor is saved
	cfg.noFinalSave = true
	a := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 4, a)
	w := newWriter(c)
	w.round(ctx, t, 30, "before")
	consume(t, k.ListenAddrs(), w) // Kafka has them all
	a.stop(t)                      // killed: no cursor saved, no lease released
	w.round(ctx, t, 30, "between")

	b := startFeed(ctx, t, baseConfig(c, k, "b")) // takes the parts once a's leases expire
	w.round(ctx, t, 30, "after")
	s := consume(t, k.ListenAddrs(), w)
	if s.repeats != 30*2 {
		t.Errorf("%d repeats, want the %d records sent before the kill", s.repeats, 30*2)
	}
	b.stop(t)
}

// The broker gone for 30 s (closed, then started again on the same port
// with its data) while writes go on: the records written meanwhile wait
// in the producer (and, once its buffer is full, the changes in the
// cluster's history), and every batch reaches the topic, each row's in
// order, none repeated (no relay crashed).
func TestTheBrokerGoneAndBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	dir := t.TempDir()
	k := broker(t, 0, dir)
	addr := k.ListenAddrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	p := startFeed(ctx, t, baseConfig(c, k, "a"))
	waitStarted(ctx, t, c, "f", 4, p)
	w := newWriter(c)
	w.round(ctx, t, 20, "up")
	consume(t, []string{addr}, w)
	k.Close()
	// The outage is the 30 s: rounds of writes, one every 100 ms,
	// all along it (some 300 revisions of each bucket written, within the
	// 1,024 the cluster keeps).
	down := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	rounds := 0
	for time.Since(down) < 30*time.Second {
		w.round(ctx, t, 20, fmt.Sprint("down", rounds))
		rounds++
		<-tick.C
	}
	k = broker(t, port, dir)
	defer k.Close()
	w.round(ctx, t, 20, "back")
	s := consume(t, []string{addr}, w)
	if s.repeats != 0 {
		t.Errorf("%d repeats with no relay crash", s.repeats)
	}
	t.Logf("%d rounds of 20 batches written while the broker was gone; %d records read", rounds, s.records)
}

// Two relays split the parts; one is killed, and the other takes over its
// parts when their leases expire: nothing is missing.
func TestASecondRelayTakesOverADeadOnesParts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	cfgA := baseConfig(c, k, "a")
	cfgA.noFinalSave = true
	a := startFeed(ctx, t, cfgA)
	waitStarted(ctx, t, c, "f", 4, a)
	b := startFeed(ctx, t, baseConfig(c, k, "b"))
	holders := func() map[string]int {
		n := map[string]int{}
		for i := range 4 {
			l, held, err := c.Leases().Get(ctx, fmt.Sprintf("changefeed/f/part/%d", i))
			if err == nil && held {
				n[l.Holder]++
			}
		}
		return n
	}
	poll(t, "the relays split the parts", func() error {
		if h := holders(); h["a"] != 2 || h["b"] != 2 {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	w := newWriter(c)
	w.round(ctx, t, 30, "both")
	consume(t, k.ListenAddrs(), w)
	a.stop(t)
	w.round(ctx, t, 30, "one")
	poll(t, "b holds every part", func() error {
		if h := holders(); h["b"] != 4 {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	w.round(ctx, t, 30, "b")
	consume(t, k.ListenAddrs(), w)
	b.stop(t)
}

// Buckets moved mid-stream (a second replicaset joins and takes half of
// them): nothing is missing or out of order, and nothing repeats.
func TestBucketsMovedMidStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, startSecond := cluster(ctx, t, 2)
	k := broker(t, 0, "")
	defer k.Close()
	p := startFeed(ctx, t, baseConfig(c, k, "a"))
	waitStarted(ctx, t, c, "f", 4, p)
	w := newWriter(c)
	w.round(ctx, t, 60, "before")
	startSecond()
	balanced := false
	for round := 0; !balanced || round < 5; round++ {
		w.round(ctx, t, 60, fmt.Sprint("moving", round))
		st, err := c.Status(ctx, false)
		balanced = err == nil && len(st.GetReplicasets()) == 2 &&
			st.GetReplicasets()[0].GetBucketCount() == testBuckets/2 && st.GetReplicasets()[1].GetBucketCount() == testBuckets/2
		if round > 500 {
			t.Fatalf("the buckets did not balance: %v", st.GetReplicasets())
		}
	}
	w.round(ctx, t, 60, "after")
	s := consume(t, k.ListenAddrs(), w)
	if s.repeats != 0 {
		t.Errorf("%d repeats with no relay crash", s.repeats)
	}
	t.Logf("%d records", s.records)
}

// A relay paused past its lease (its part taken over by another, which
// saved a cursor) cannot save its cursor any more: the fence refuses it,
// and the part's cursor stays the new holder's.
func TestAnOldHolderCannotMoveACursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	cfg := baseConfig(c, k, "new")
	cfg.Parts = 1
	p := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 1, p)
	key := []tuple.Value{tuple.String("f"), tuple.Uint(0)}
	res, _, err := c.Space(CursorSpace).Select(ctx, key, client.RW)
	if err != nil {
		t.Fatal(err)
	}
	ticket, _ := res.Tuple[3].AsUint()
	if ticket == 0 {
		t.Fatalf("the part's tuple %v holds no ticket", res.Tuple)
	}
	// What an older holder's save does: the same batch with its ticket.
	_, err = c.Batch().Fence(client.Fence{Space: CursorSpace, Key: key, Field: "ticket", Ticket: ticket - 1}).
		Update(CursorSpace, key, []tuple.Op{{Code: tuple.OpAssign, Field: tuple.FieldRef{Name: "cursor"}, Arg: tuple.String("c1.AA")}}).
		Do(ctx)
	if !errors.Is(err, client.ErrConditionFailed) {
		t.Fatalf("an older ticket's save: %v, want ErrConditionFailed", err)
	}
	after, _, err := c.Space(CursorSpace).Select(ctx, key, client.RW)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := after.Tuple[4].AsString(); cur == "c1.AA" {
		t.Fatalf("the older holder's cursor was saved: %v", after.Tuple)
	}
}

// A relay joining a running one gets its share of the parts, which the
// first lets go of only after saving their cursors: nothing is missing
// and nothing repeats, though writes go on during the handover.
func TestAJoiningRelayGetsItsShareWithNoRepeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	a := startFeed(ctx, t, baseConfig(c, k, "a"))
	waitStarted(ctx, t, c, "f", 4, a)
	w := newWriter(c)
	w.round(ctx, t, 30, "alone")
	startFeed(ctx, t, baseConfig(c, k, "b"))
	for round := 0; ; round++ {
		w.round(ctx, t, 30, fmt.Sprint("joining", round))
		n := map[string]int{}
		for i := range 4 {
			l, held, err := c.Leases().Get(ctx, fmt.Sprintf("changefeed/f/part/%d", i))
			if err == nil && held {
				n[l.Holder]++
			}
		}
		if n["a"] == 2 && n["b"] == 2 && round >= 3 {
			break
		}
		if round > 1000 {
			t.Fatalf("the relays did not split the parts: %v", n)
		}
	}
	w.round(ctx, t, 30, "split")
	s := consume(t, k.ListenAddrs(), w)
	if s.repeats != 0 {
		t.Errorf("%d repeats across a handover of parts", s.repeats)
	}
}

// A relay resumed from a cursor older than the cluster's history stops
// with ErrCompacted and says how to recover; one started with another
// number of parts is refused.
func TestAFeedStopsOnACompactedCursorOrOtherParts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	cfg := baseConfig(c, k, "a")
	cfg.Parts = 1
	cfg.noFinalSave = true
	cfg.SaveEvery = time.Hour
	a := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 1, a)
	a.stop(t)
	w := newWriter(c)
	for i := range 1100 { // more than the 1,024 revisions a bucket keeps
		w.batch(ctx, t, 1, 1, fmt.Sprint(i))
	}
	cfg = baseConfig(c, k, "b")
	cfg.Parts = 1
	err := Run(ctx, cfg)
	if !errors.Is(err, client.ErrCompacted) || !strings.Contains(err.Error(), "start the feed under a new --name") {
		t.Errorf("a feed behind the history: %v, want ErrCompacted and the recovery", err)
	}
	cfg.Parts = 2
	err = Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "the feed was started with 1 parts, not 2: run it with --parts 1") {
		t.Errorf("a feed run with another number of parts: %v", err)
	}
}

// A relay killed while Kafka takes none of its records (every produce
// request refused) saves no cursor past them: the next relay sends them,
// and nothing is missing.
func TestARelayKilledWithRecordsUnacknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	var refuse atomic.Bool
	k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if refuse.Load() {
			return nil, errors.New("the test refuses produce requests"), true
		}
		return nil, nil, false
	})
	cfg := baseConfig(c, k, "a")
	cfg.noFinalSave = true
	a := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 4, a)
	w := newWriter(c)
	w.round(ctx, t, 30, "taken")
	consume(t, k.ListenAddrs(), w)
	refuse.Store(true)
	w.round(ctx, t, 30, "refused")
	time.Sleep(time.Second) // the parts' savers run some 20 times meanwhile
	a.stop(t)
	refuse.Store(false)
	startFeed(ctx, t, baseConfig(c, k, "b"))
	w.round(ctx, t, 30, "after")
	consume(t, k.ListenAddrs(), w)
}

// scanned leaves each row's last write as what the topic is to have of
// it: what an initial scan reads (a deleted row is not read).
func (w *writer) scanned() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, vs := range w.want {
		if vs[len(vs)-1] == "" {
			delete(w.want, k)
		} else {
			w.want[k] = vs[len(vs)-1:]
		}
	}
}

// waitScanned waits until every part of feed name saved a cursor with no
// scan to go on with.
func waitScanned(ctx context.Context, tb testing.TB, c *client.Client, name string, parts int, p *feedProcess) {
	tb.Helper()
	waitStarted(ctx, tb, c, name, parts, p)
	poll(tb, "the feed's parts scanned", func() error {
		for i := range parts {
			res, _, err := c.Space(CursorSpace).Select(ctx, []tuple.Value{tuple.String(name), tuple.Uint(uint64(i))}, client.RW)
			if err != nil {
				return err
			}
			if cur, _ := res.Tuple[4].AsString(); strings.Contains(cur, scanSep) {
				return fmt.Errorf("part %d is scanning: %s", i, cur)
			}
		}
		return nil
	})
}

// A feed started with InitialScan on a space that holds rows sends every
// row (kind scan), then the changes, each row's in order; run again, it
// goes on from its saved cursor and scans nothing again.
func TestAnInitialScanSendsTheRowsThenTheChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	w := newWriter(c)
	for e := uint64(1); e <= 40; e++ {
		for n := uint64(1); n <= 7; n += 2 { // rows 1..8 of each entity
			w.batch(ctx, t, e, n, fmt.Sprint("old-", e))
		}
		w.batch(ctx, t, e, 1, fmt.Sprint("before-", e))
	}
	w.del(ctx, t, 5, 3)
	w.scanned()
	cfg := baseConfig(c, k, "a")
	cfg.InitialScan = true
	cfg.scanPage = 3 // several pages a bucket
	p := startFeed(ctx, t, cfg)
	waitScanned(ctx, t, c, "f", 4, p)
	w.round(ctx, t, 40, "live")
	s := consume(t, k.ListenAddrs(), w)
	if s.repeats != 0 {
		t.Errorf("%d repeats with no crash", s.repeats)
	}
	// The 319 rows written and the cluster's probe row (0, 0).
	if s.scans != 40*8-1+1 {
		t.Errorf("%d scan records, want %d", s.scans, 40*8)
	}
	p.stop(t)

	p = startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 4, p)
	w.round(ctx, t, 40, "again")
	s = consume(t, k.ListenAddrs(), w)
	if s.scans != 40*8 {
		t.Errorf("%d scan records after a restart, want the first run's %d", s.scans, 40*8)
	}
}

// A relay killed in the middle of its initial scan, after Kafka took a
// page of rows but before it saved that it had: the next relay goes on
// with the scan where the saved progress says, numbering its records past
// what the first could have sent (no (bucket, revision, index) comes twice
// with other rows, which a consumer dropping repeats would lose), and
// sends the changes made since the first one's scan began, deletes
// included. Every row reaches the topic, each row's changes in order.
func TestARelayKilledMidScanLosesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	k := broker(t, 0, "")
	defer k.Close()
	w := newWriter(c)
	for e := uint64(1); e <= 12; e++ {
		for n := uint64(1); n <= 19; n += 2 { // rows 1..20 of each entity
			w.batch(ctx, t, e, n, fmt.Sprint("old-", e))
		}
	}
	w.scanned()
	cfgA := baseConfig(c, k, "a")
	cfgA.InitialScan, cfgA.scanPage, cfgA.noFinalSave = true, 4, true
	var pages atomic.Int32
	actx, kill := context.WithCancel(ctx) // the feed's own context: set before it runs
	defer kill()
	killed := make(chan struct{})
	cfgA.scanned = func(int) {
		if pages.Add(1) == 6 {
			kill() // killed: this page is acknowledged, not saved
			close(killed)
		}
	}
	a := startFeed(actx, t, cfgA)
	select {
	case <-killed:
	case <-ctx.Done():
		t.Fatal("the first relay never scanned 6 pages")
	}
	a.stop(t)
	// While no relay runs: changes and deletes of rows scanned or not.
	for e := uint64(1); e <= 12; e++ {
		w.batch(ctx, t, e, 3, fmt.Sprint("between-", e))
		w.del(ctx, t, e, 4)
	}
	cfgB := baseConfig(c, k, "b")
	cfgB.scanPage = 4 // no InitialScan: the scan begun is finished anyway
	b := startFeed(ctx, t, cfgB)
	waitScanned(ctx, t, c, "f", 4, b)
	w.round(ctx, t, 12, "after")
	// A row read by the first relay and again by the second comes twice
	// (under two indexes); one changed or deleted before the second read
	// it shows its change, maybe not the value the first relay would
	// have read.
	collapsed := func(vs []string) []string { return slices.Compact(slices.Clone(vs)) }
	s := consumeWith(t, k.ListenAddrs(), w, func(got, want []string) bool {
		g, wt := collapsed(got), collapsed(want)
		return slices.Equal(g, wt) || len(wt) > 1 && slices.Equal(g, wt[1:])
	})
	if s.scans < 12*19 {
		t.Errorf("%d scan records, want at least the %d rows not deleted", s.scans, 12*19)
	}
	if s.scanTakenOver == 0 {
		t.Errorf("no scan record numbered past %d: the second relay took no scan over", scanPageMax)
	}
	b.stop(t)
}

// An initial scan while a second replicaset joins and half the buckets
// move, with writes going on: every row reaches the topic, its value as
// the scan read it (one of its writes) followed by every change since the
// feed began, in order, none repeated.
func TestAnInitialScanWhileBucketsMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, startSecond := cluster(ctx, t, 2)
	k := broker(t, 0, "")
	defer k.Close()
	w := newWriter(c)
	for e := uint64(1); e <= 60; e++ {
		for n := uint64(1); n <= 7; n += 2 { // rows 1..8 of each entity
			w.batch(ctx, t, e, n, fmt.Sprint("old-", e))
		}
	}
	startSecond()
	cfg := baseConfig(c, k, "a")
	cfg.InitialScan, cfg.scanPage = true, 2
	// The scan waits after its first page until buckets have begun to
	// move, so that most of it runs during the moves.
	movesBegun := make(chan struct{})
	cfg.scanned = func(int) {
		select {
		case <-movesBegun:
		case <-ctx.Done():
		}
	}
	p := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "f", 4, p) // where each bucket's scan stands is saved: what follows is a change
	balanced := false
	for round := 0; !balanced || round < 5; round++ {
		w.round(ctx, t, 60, fmt.Sprint("moving", round))
		st, err := c.Status(ctx, false)
		balanced = err == nil && len(st.GetReplicasets()) == 2 &&
			st.GetReplicasets()[0].GetBucketCount() == testBuckets/2 && st.GetReplicasets()[1].GetBucketCount() == testBuckets/2
		if err == nil && len(st.GetReplicasets()) == 2 && st.GetReplicasets()[0].GetBucketCount() < testBuckets {
			select {
			case <-movesBegun:
			default:
				close(movesBegun)
			}
		}
		if round > 500 {
			t.Fatalf("the buckets did not balance: %v", st.GetReplicasets())
		}
	}
	scanning := 0
	for part := range 4 {
		res, _, err := c.Space(CursorSpace).Select(ctx, []tuple.Value{tuple.String("f"), tuple.Uint(uint64(part))}, client.RW)
		if err == nil && res.Tuple != nil {
			if cur, _ := res.Tuple[4].AsString(); strings.Contains(cur, scanSep) {
				scanning++
			}
		}
	}
	t.Logf("%d of 4 parts still scanning when the buckets were balanced", scanning)
	waitScanned(ctx, t, c, "f", 4, p)
	w.round(ctx, t, 60, "after")
	s := consumeWith(t, k.ListenAddrs(), w, func(got, want []string) bool {
		return len(got) == len(want) && slices.Contains(want, got[0]) && slices.Equal(got[1:], want[1:])
	})
	if s.repeats != 0 {
		t.Errorf("%d repeats with no relay crash", s.repeats)
	}
	if s.scans != 60*8+1 {
		t.Errorf("%d scan records, want the %d rows", s.scans, 60*8+1)
	}
}
