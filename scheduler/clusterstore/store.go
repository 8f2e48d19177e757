package clusterstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/tuple"
)

// DefaultPrefix names the spaces unless Options.Prefix says otherwise.
const DefaultPrefix = "sched"

// MaxShards bounds Options.Shards.
const MaxShards = 1 << 16

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`)

// Options tune a Store.
type Options struct {
	// Prefix names the store's spaces and leases (lower-case letters,
	// digits, '_'; up to 32); DefaultPrefix when empty.
	Prefix string
	// Shards is the number of shards. A new store is made with it; an
	// existing one must have the same (0: whatever it has).
	Shards int
}

// Store is a scheduler.Store on a shardkit cluster.
type Store struct {
	c      *client.Client
	prefix string
	shards int
	sp     spaces
	// keyLen is each space's number of primary-key fields.
	keyLen map[string]int

	// buckets caches each shard's bucket (the bucket count is fixed).
	bmu     sync.Mutex
	buckets map[int]uint32
	// markCursor is, per shard, the offer whose mark Changes listed last.
	markCursor map[int]string

	// seq numbers AfterSave records: a holder's epoch above, a counter
	// below, so a newer holder's numbers are higher.
	seq atomic.Uint64
}

var _ scheduler.Store = (*Store)(nil)

// spaces are the store's space names.
type spaces struct {
	config, offers, states, queue, inverted, marks, after, dead, fences, changelog, runners string
}

func spaceNames(p string) spaces {
	return spaces{
		config: p + "_config", offers: p + "_offers", states: p + "_states", queue: p + "_queue",
		inverted: p + "_queue_inverted", marks: p + "_marks", after: p + "_after", dead: p + "_dead",
		fences: p + "_fences", changelog: p + "_changelog", runners: p + "_runners",
	}
}

func field(name string, t tuple.Type) tuple.Field { return tuple.Field{Name: name, Type: t} }

// defs are the spaces' definitions; every one is sharded by its first
// field (the shard, or a constant 0 for the store-wide rows).
func (sp spaces) defs() []client.SpaceDef {
	const (
		u = tuple.TypeUnsigned
		i = tuple.TypeInteger
		s = tuple.TypeString
		b = tuple.TypeBytes
		o = tuple.TypeBoolean
	)
	def := func(name string, key int, fs ...tuple.Field) client.SpaceDef {
		pk := make([]string, key)
		for j := range key {
			pk[j] = fs[j].Name
		}
		return client.SpaceDef{Name: name, Format: fs, PrimaryKey: pk, ShardingKey: pk[:1]}
	}
	return []client.SpaceDef{
		def(sp.config, 1, field("one", u), field("shards", u)),
		def(sp.offers, 2, field("shard", u), field("offer_id", s), field("version", u), field("body", s), field("chain", u)),
		def(sp.states, 3, field("shard", u), field("offer_id", s), field("stage", s), field("version", u), field("type_url", s), field("value", b)),
		def(sp.queue, 5, field("shard", u), field("stage", s), field("lane", u), field("due", i), field("offer_id", s),
			field("timer", o), field("attempts", u), field("last_error", s)),
		def(sp.inverted, 3, field("shard", u), field("offer_id", s), field("stage", s), field("lane", u), field("due", i),
			field("timer", o), field("attempts", u), field("last_error", s)),
		def(sp.marks, 2, field("shard", u), field("offer_id", s), field("seq", u), field("source", s), field("all", o),
			field("fields", s), field("chain", u)),
		def(sp.after, 3, field("shard", u), field("stage", s), field("offer_id", s), field("seq", u)),
		def(sp.dead, 3, field("shard", u), field("stage", s), field("offer_id", s), field("attempts", u), field("cause", s), field("at", i)),
		def(sp.fences, 1, field("shard", u), field("ticket", u)),
		def(sp.changelog, 2, field("shard", u), field("offer_id", s), field("record", s)),
		def(sp.runners, 2, field("one", u), field("owner", s)),
	}
}

// Open makes the store's spaces on c's cluster when missing and checks the
// number of shards. c stays the caller's (Close does not close it).
func Open(ctx context.Context, c *client.Client, opts Options) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no client", scheduler.ErrInvalid)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(opts.Prefix) {
		return nil, fmt.Errorf("%w: prefix %q: use 1..32 lower-case letters, digits or '_', not starting with a digit", scheduler.ErrInvalid, opts.Prefix)
	}
	if opts.Shards < 0 || opts.Shards > MaxShards {
		return nil, fmt.Errorf("%w: %d shards: use 1..%d (or 0 for an existing store's)", scheduler.ErrInvalid, opts.Shards, MaxShards)
	}
	st := &Store{c: c, prefix: opts.Prefix, sp: spaceNames(opts.Prefix), buckets: map[int]uint32{}, markCursor: map[int]string{}, keyLen: map[string]int{}}
	for _, d := range st.sp.defs() {
		st.keyLen[d.Name] = len(d.PrimaryKey)
		got, err := c.CreateSpace(ctx, d, true)
		if err != nil {
			return nil, fmt.Errorf("clusterstore: create space %s: %w", d.Name, err)
		}
		if !sameDef(got, d) {
			return nil, fmt.Errorf("%w: space %s exists with another definition (fields %v, key %v); the store needs fields %v, key %v",
				scheduler.ErrInvalid, d.Name, fieldNames(got.Format), got.PrimaryKey, fieldNames(d.Format), d.PrimaryKey)
		}
	}
	if err := st.initShards(ctx, opts.Shards); err != nil {
		return nil, err
	}
	return st, nil
}

func sameDef(a, b client.SpaceDef) bool {
	return slices.Equal(a.Format, b.Format) && slices.Equal(a.PrimaryKey, b.PrimaryKey) && slices.Equal(a.ShardingFields(), b.ShardingFields())
}

func fieldNames(f tuple.Format) []string {
	out := make([]string, len(f))
	for j, x := range f {
		out[j] = x.Name
	}
	return out
}

func (st *Store) initShards(ctx context.Context, shards int) error {
	key := []tuple.Value{tuple.Uint(0)}
	r, _, err := st.c.Space(st.sp.config).Select(ctx, key, client.RW)
	if err != nil {
		return fmt.Errorf("clusterstore: read the number of shards: %w", err)
	}
	if !r.Found {
		if shards == 0 {
			return fmt.Errorf("%w: store %s has no shards yet: give Options.Shards", scheduler.ErrInvalid, st.prefix)
		}
		// Stores opened together on a new prefix insert alike; one wins.
		if r, err = st.c.Space(st.sp.config).Insert(ctx, tuple.Tuple{tuple.Uint(0), tuple.Uint(uint64(shards))}, client.IfAbsent()); err != nil {
			return fmt.Errorf("clusterstore: write the number of shards: %w", err)
		}
		if !r.Found {
			st.shards = shards
			return nil
		}
	}
	have := int(uintAt(r.Tuple, 1))
	if shards != 0 && have != shards {
		return fmt.Errorf("%w: store %s has %d shards, asked for %d; the number of shards is fixed when the store is made", scheduler.ErrInvalid, st.prefix, have, shards)
	}
	st.shards = have
	return nil
}

// Client is the store's cluster client.
func (st *Store) Client() *client.Client { return st.c }

// Prefix is the prefix of the store's spaces and leases.
func (st *Store) Prefix() string { return st.prefix }

// Shards implements scheduler.Store.
func (st *Store) Shards() int { return st.shards }

// Close implements scheduler.Store; the client stays open.
func (st *Store) Close() error { return nil }

// bucket is shard sh's bucket.
func (st *Store) bucket(ctx context.Context, sh int) (uint32, error) {
	st.bmu.Lock()
	bk, ok := st.buckets[sh]
	st.bmu.Unlock()
	if ok {
		return bk, nil
	}
	bk, err := st.c.Space(st.sp.fences).Bucket(ctx, shardKey(sh))
	if err != nil {
		return 0, fmt.Errorf("clusterstore: the bucket of shard %d: %w", sh, err)
	}
	st.bmu.Lock()
	st.buckets[sh] = bk
	st.bmu.Unlock()
	return bk, nil
}

func shardKey(sh int) tuple.Value { return tuple.Uint(uint64(sh)) } //nolint:gosec // shards are 0..MaxShards

func (st *Store) checkLeaseShard(l scheduler.Lease, id string) error {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return err
	}
	if sh := scheduler.ShardOf(id, st.shards); sh != l.Shard {
		return fmt.Errorf("%w: offer %q is in shard %d, not in the lease's %v", scheduler.ErrInvalid, id, sh, l)
	}
	return nil
}

func (st *Store) checkEntry(l scheduler.Lease, stage, id string) error {
	if err := st.checkLeaseShard(l, id); err != nil {
		return err
	}
	return scheduler.ValidateID("stage", stage)
}

// ---- reading tuples ----

func uintAt(t tuple.Tuple, j int) uint64 {
	if j >= len(t) {
		return 0
	}
	v, _ := t[j].AsUint()
	return v
}

func intAt(t tuple.Tuple, j int) int64 {
	if j >= len(t) {
		return 0
	}
	v, _ := t[j].AsInt()
	return v
}

func strAt(t tuple.Tuple, j int) string {
	if j >= len(t) {
		return ""
	}
	v, _ := t[j].AsString()
	return v
}

func bytesAt(t tuple.Tuple, j int) []byte {
	if j >= len(t) {
		return nil
	}
	v, _ := t[j].AsBytes()
	return v
}

func boolAt(t tuple.Tuple, j int) bool {
	if j >= len(t) {
		return false
	}
	v, _ := t[j].AsBool()
	return v
}

func micros(t time.Time) tuple.Value { return tuple.Int(t.UnixMicro()) }

// get reads one tuple linearizably (a missing one: Found false).
func (st *Store) get(ctx context.Context, space string, key ...tuple.Value) (client.Result, error) {
	r, _, err := st.c.Space(space).Select(ctx, key, client.RW)
	if err != nil {
		return r, fmt.Errorf("clusterstore: read %s %v: %w", space, key, err)
	}
	return r, nil
}

// getAll reads several tuples at once (each its own call; the client
// sends calls made together together).
func (st *Store) getAll(ctx context.Context, reads ...read) error {
	if len(reads) == 1 {
		r, err := st.get(ctx, reads[0].space, reads[0].key...)
		*reads[0].into = r
		return err
	}
	errs := make([]error, len(reads))
	var wg sync.WaitGroup
	for j := range reads {
		wg.Go(func() {
			*reads[j].into, errs[j] = st.get(ctx, reads[j].space, reads[j].key...)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

type read struct {
	space string
	key   []tuple.Value
	into  *client.Result
}

// ---- writing ----

// maxRetries bounds how often a write reads again after a concurrent
// change of what it read.
const maxRetries = 64

// errRetry says a batch's check of what it read failed: read again.
var errRetry = errors.New("clusterstore: changed since read")

// do sends b. fenced says b's first two ops are a lease's fence: their
// refusal is scheduler.ErrFenced; any other failed check is errRetry.
func (st *Store) do(ctx context.Context, what string, b *client.Batch, fence *scheduler.Lease) error {
	_, err := b.Do(ctx)
	if err == nil {
		return nil
	}
	var ce *client.Error
	if errors.Is(err, client.ErrConditionFailed) && errors.As(err, &ce) {
		if fence != nil && ce.OpIndex <= 2 {
			return fmt.Errorf("%w: %v: a newer holder of the shard wrote (its fence is at ticket %v)", scheduler.ErrFenced, *fence, ce.ActualValue)
		}
		return errRetry
	}
	return fmt.Errorf("clusterstore: %s: %w", what, err)
}

// fenced starts a batch carrying l's fence.
func (st *Store) fenced(l scheduler.Lease) *client.Batch {
	return st.c.Batch().Fence(st.fence(l.Shard, l.Epoch))
}

func (st *Store) fence(sh int, epoch int64) client.Fence {
	return client.Fence{Space: st.sp.fences, Key: []tuple.Value{shardKey(sh)}, Field: "ticket", Ticket: uint64(epoch)} //nolint:gosec // tickets are positive
}

// retry runs f until it does not answer errRetry.
func retry(what string, f func() error) error {
	for range maxRetries {
		if err := f(); !errors.Is(err, errRetry) {
			return err
		}
	}
	return fmt.Errorf("%w: %s: what it read changed %d times in a row", scheduler.ErrConflict, what, maxRetries)
}

// Changelog is the changefeed configuration that sends the store's
// changelog to Kafka (run it with changefeed.Run after setting Brokers
// and Topic): <p>_changelog's changes, each keyed by its offer id with the
// scheduler.Record of the save as its value, as the PostgreSQL store's
// outbox relay sends them.
func (st *Store) Changelog() changefeed.Config {
	return changefeed.Config{Client: st.c, Spaces: []string{st.sp.changelog}, Name: st.prefix + "_changelog",
		KeyField: "offer_id", ValueField: "record"}
}
