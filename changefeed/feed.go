// Package changefeed sends the changes of a shardkit cluster's spaces to a
// Kafka topic: one record per changed tuple, keyed by the tuple's sharding
// key, with the bucket and its revision in the headers, written by an
// idempotent producer; the feed's cursor is saved in the cluster only
// after Kafka acknowledged every record before it, and several feed
// processes split the buckets through the cluster's leases
// (docs/changes.md, "Changefeed to Kafka").
package changefeed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// CursorSpace is the space where feeds keep their cursors, one tuple per
// feed and part: (feed, part, parts, ticket, cursor). The feed creates it
// when it is missing.
const CursorSpace = "_changefeed"

// Config is what a feed sends and where.
type Config struct {
	// Client is the cluster's client (required).
	Client *client.Client
	// Spaces are the spaces whose changes are sent (required).
	Spaces []string
	// Brokers are Kafka's seed brokers, host:port (required).
	Brokers []string
	// Topic receives the records (required; it must exist unless the
	// brokers create topics).
	Topic string
	// Name names the feed: its cursors and leases. Default: the topic.
	Name string
	// Format of the record values: "json" (default) or "protobuf".
	Format string
	// KeyField, when set, names a primary-key field of every fed space
	// whose value is each record's Kafka key, instead of the tuple's
	// sharding key: a string or bytes field's bytes as they are, any other
	// field's value in JSON. For spaces sharded by something coarser than
	// the entity (a shard number), it keys records by the entity, so that
	// a compacted topic keeps each entity's last record.
	KeyField string
	// ValueField, when set, names a string or bytes field of every fed
	// space whose bytes are each record's whole value, instead of the
	// change described in Format: for spaces whose rows hold a record
	// already made for consumers (an outbox row replaced by each write).
	// A delete's value is empty (a Kafka tombstone). The headers are the
	// same.
	ValueField string
	// Parts is how many parts the buckets are split into, each under a
	// lease of its own; a process holds its share of them (default 8; a
	// feed keeps the number it started with).
	Parts int
	// Holder names this process in the leases (default: host, pid and a
	// random suffix).
	Holder string
	// LeaseTTL is the parts' lease time: a dead process's parts are taken
	// over after it (default 10 s).
	LeaseTTL time.Duration
	// SaveEvery is how often a part saves its cursor when it moved
	// (default 200 ms).
	SaveEvery time.Duration
	// Logger (default: none).
	Logger *slog.Logger
	// KafkaOptions are added to the producer's options (TLS, SASL, ...).
	KafkaOptions []kgo.Opt
	// InitialScan: a part with no saved cursor first sends every row its
	// buckets hold, as records of kind "scan", then the changes from
	// there on (docs/changes.md, "Initial scan"). A part with a saved
	// cursor goes on from it; a scan begun is finished by whichever
	// process holds the part, with or without this option.
	InitialScan bool
	// Sent, when set, is called once Kafka acknowledged every record of
	// an event that has records (not for the initial scan), with the batch's leader-stamped
	// commit time: time.Since(committed) is the feed's lag. It runs on
	// the producer's callback goroutine: keep it short.
	Sent func(bucket uint32, revision uint64, committed time.Time)

	// noFinalSave makes a stopping part leave its cursor and lease as a
	// killed process would (tests).
	noFinalSave bool
	// scanPage is the rows read and sent at a time in a scan (default and
	// at most scanPageMax; tests make it small).
	scanPage int
	// scanned is called after each scan page's records were acknowledged,
	// before its progress is saved (tests kill the process there).
	scanned func(part int)
}

func (cfg *Config) check() error {
	switch {
	case cfg.Client == nil:
		return errors.New("changefeed: no client")
	case len(cfg.Spaces) == 0:
		return errors.New("changefeed: no space: name at least one")
	case len(cfg.Brokers) == 0:
		return errors.New("changefeed: no broker: name at least one")
	case cfg.Topic == "":
		return errors.New("changefeed: no topic")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Topic
	}
	switch cfg.Format {
	case "":
		cfg.Format = "json"
	case "json", "protobuf":
	default:
		return fmt.Errorf("changefeed: format %q: want json or protobuf", cfg.Format)
	}
	if cfg.Parts == 0 {
		cfg.Parts = 8
	}
	if cfg.Parts < 1 || cfg.Parts > 1024 {
		return fmt.Errorf("changefeed: %d parts: want 1 to 1024", cfg.Parts)
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Holder = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.LeaseTTL < 300*time.Millisecond {
		return fmt.Errorf("changefeed: lease TTL %v: want at least 300ms", cfg.LeaseTTL)
	}
	if cfg.SaveEvery <= 0 {
		cfg.SaveEvery = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.scanPage <= 0 || cfg.scanPage > scanPageMax {
		cfg.scanPage = scanPageMax
	}
	return nil
}

// Run runs a feed until ctx ends (then it stops its parts, saving their
// cursors, and returns nil) or an error stops it: a watch's ErrCompacted
// (a part's cursor is older than the cluster keeps; see docs/changes.md
// for the recovery), a record Kafka refused for good, or a feed started
// with another number of parts.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	c := cfg.Client
	st, err := c.Sharding().Status(ctx)
	if err != nil {
		return fmt.Errorf("changefeed: the bucket count: %w", err)
	}
	buckets := st.GetBucketCount()
	if buckets == 0 {
		return errors.New("changefeed: the cluster reports no buckets")
	}
	if err := ensureSpace(ctx, c); err != nil {
		return err
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5 * time.Millisecond),
	}, cfg.KafkaOptions...)
	kc, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("changefeed: the Kafka client: %w", err)
	}
	defer kc.Close()
	// Records wait in the producer until Kafka takes them, even while the
	// feed stops; a lease time after ctx ends they are given up.
	hard, giveUp := context.WithCancel(context.WithoutCancel(ctx))
	defer giveUp()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(cfg.LeaseTTL, giveUp) })
	defer stop()
	defs, err := c.Spaces(ctx)
	if err != nil {
		return fmt.Errorf("changefeed: the spaces: %w", err)
	}
	layouts, err := layoutsOf(defs, cfg)
	if err != nil {
		return err
	}
	f := &feed{cfg: cfg, kc: kc, hard: hard, buckets: buckets, layouts: layouts, parts: map[int]*partRun{}, failed: make(chan error, 1)}
	return f.run(ctx)
}

// ensureSpace creates the cursor space when it is missing (an admin's
// call; a writer runs a feed once it exists).
func ensureSpace(ctx context.Context, c *client.Client) error {
	defs, err := c.Spaces(ctx)
	if err != nil {
		return fmt.Errorf("changefeed: the spaces: %w", err)
	}
	if slices.ContainsFunc(defs, func(d client.SpaceDef) bool { return d.Name == CursorSpace }) {
		return nil
	}
	_, err = c.CreateSpace(ctx, client.SpaceDef{Name: CursorSpace, Format: tuple.Format{
		{Name: "feed", Type: tuple.TypeString}, {Name: "part", Type: tuple.TypeUnsigned},
		{Name: "parts", Type: tuple.TypeUnsigned}, {Name: "ticket", Type: tuple.TypeUnsigned},
		{Name: "cursor", Type: tuple.TypeString},
	}, PrimaryKey: []string{"feed", "part"}}, true)
	if err != nil {
		return fmt.Errorf("changefeed: the cursor space %s: %w", CursorSpace, err)
	}
	return nil
}

type feed struct {
	cfg     Config
	kc      *kgo.Client
	hard    context.Context
	buckets uint32
	// layouts say where each fed space's fields are.
	layouts map[string]layout

	mu     sync.Mutex
	parts  map[int]*partRun
	failed chan error
	wg     sync.WaitGroup
}

// partRun is a part this process holds.
type partRun struct {
	p      int
	ticket uint64
	// renewed is when the lease was last granted or renewed (Unix ns):
	// the part sends nothing once a lease time has passed since.
	renewed atomic.Int64
	cancel  context.CancelFunc
	done    chan struct{}
}

func (f *feed) leaseName(kind string, i int) string {
	return "changefeed/" + f.cfg.Name + "/" + kind + "/" + strconv.Itoa(i)
}

// run keeps the process's share of the parts: every third of the lease
// time it renews its member slot and its parts, counts the members, lets
// go of parts beyond its share and takes free ones up to it.
func (f *feed) run(ctx context.Context) error {
	ls := f.cfg.Client.Leases()
	tick := f.cfg.LeaseTTL / 3
	slot, slotTicket := -1, uint64(0)
	var failure error
	defer func() {
		f.mu.Lock()
		for _, pr := range f.parts {
			pr.cancel()
		}
		f.mu.Unlock()
		f.wg.Wait()
		if slot >= 0 && !f.cfg.noFinalSave {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.LeaseTTL)
			_, _ = ls.Release(rctx, f.leaseName("member", slot), f.cfg.Holder, slotTicket)
			cancel()
		}
	}()
	for {
		// The member slot: the lowest free one.
		if slot >= 0 {
			if l, ok, err := ls.Renew(ctx, f.leaseName("member", slot), f.cfg.Holder, slotTicket, f.cfg.LeaseTTL); err == nil && !ok {
				slot = -1
			} else if err == nil {
				slotTicket = l.Ticket
			}
		}
		members := 0
		for i := range f.cfg.Parts {
			if ctx.Err() != nil {
				break
			}
			name := f.leaseName("member", i)
			if slot < 0 {
				if l, ok, err := ls.Acquire(ctx, name, f.cfg.Holder, f.cfg.LeaseTTL); err == nil && ok {
					slot, slotTicket = i, l.Ticket
					members++
					continue
				}
			}
			if i == slot {
				members++
				continue
			}
			if _, held, err := ls.Get(ctx, name); err == nil && held {
				members++
			}
		}
		members = max(members, 1)
		share := (f.cfg.Parts + members - 1) / members
		f.keepParts(ctx, share)
		select {
		case <-ctx.Done():
			return nil
		case failure = <-f.failed:
			return failure
		case <-time.After(tick):
		}
	}
}

// keepParts renews the parts held, drops those whose lease is lost or
// beyond share, and acquires free ones while under share.
func (f *feed) keepParts(ctx context.Context, share int) {
	ls := f.cfg.Client.Leases()
	f.mu.Lock()
	held := slices.Sorted(func(yield func(int) bool) {
		for p := range f.parts {
			if !yield(p) {
				return
			}
		}
	})
	f.mu.Unlock()
	for _, p := range held {
		f.mu.Lock()
		pr := f.parts[p]
		f.mu.Unlock()
		select {
		case <-pr.done:
			f.forget(pr)
			continue
		default:
		}
		_, ok, err := ls.Renew(ctx, f.leaseName("part", p), f.cfg.Holder, pr.ticket, f.cfg.LeaseTTL)
		switch {
		case err == nil && ok:
			pr.renewed.Store(time.Now().UnixNano())
		case err == nil && !ok, time.Since(time.Unix(0, pr.renewed.Load())) > f.cfg.LeaseTTL*2/3:
			f.cfg.Logger.Warn("changefeed: a part's lease is lost", "part", p, "err", err)
			pr.cancel()
		}
	}
	f.mu.Lock()
	n := len(f.parts)
	f.mu.Unlock()
	// Beyond the share: let go of the highest parts (each saves its
	// cursor and releases its lease as it stops).
	for i := len(held) - 1; i >= 0 && n > share; i-- {
		f.mu.Lock()
		pr := f.parts[held[i]]
		f.mu.Unlock()
		if pr != nil {
			f.cfg.Logger.Info("changefeed: letting a part go to another process", "part", pr.p, "share", share)
			pr.cancel()
			n--
		}
	}
	for p := 0; p < f.cfg.Parts && n < share && ctx.Err() == nil; p++ {
		f.mu.Lock()
		_, mine := f.parts[p]
		f.mu.Unlock()
		if mine {
			continue
		}
		l, ok, err := ls.Acquire(ctx, f.leaseName("part", p), f.cfg.Holder, f.cfg.LeaseTTL)
		if err != nil || !ok {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		pr := &partRun{p: p, ticket: l.Ticket, cancel: cancel, done: make(chan struct{})}
		pr.renewed.Store(time.Now().UnixNano())
		f.mu.Lock()
		f.parts[p] = pr
		f.mu.Unlock()
		n++
		f.cfg.Logger.Info("changefeed: part acquired", "part", p, "ticket", l.Ticket)
		f.wg.Go(func() {
			defer close(pr.done)
			err := f.runPart(pctx, pr)
			if err != nil && pctx.Err() == nil {
				select {
				case f.failed <- err:
				default:
				}
			}
		})
	}
}

func (f *feed) forget(pr *partRun) {
	f.mu.Lock()
	if f.parts[pr.p] == pr {
		delete(f.parts, pr.p)
	}
	f.mu.Unlock()
}

// partBuckets returns part p's buckets: an even split of 1..buckets in
// order.
func partBuckets(p, parts int, buckets uint32) []uint32 {
	lo := uint64(p) * uint64(buckets) / uint64(parts)
	hi := uint64(p+1) * uint64(buckets) / uint64(parts)
	var bs []uint32
	for b := lo + 1; b <= hi; b++ {
		bs = append(bs, uint32(b))
	}
	return bs
}

// layout is where a fed space's fields are.
type layout struct {
	// keys are the positions of the sharding key's fields in the primary
	// key; pks those of the primary key's fields in the tuples (the scan's
	// keys).
	keys, pks []int
	// keyField is Config.KeyField's position in the primary key, and
	// valueField Config.ValueField's in the tuples (-1 when not set).
	keyField, valueField int
}

// layoutsOf finds each fed space's layout among defs.
func layoutsOf(defs []client.SpaceDef, cfg Config) (map[string]layout, error) {
	out := map[string]layout{}
	for _, d := range defs {
		if !slices.Contains(cfg.Spaces, d.Name) {
			continue
		}
		l := layout{keyField: -1, valueField: -1}
		for _, name := range d.ShardingFields() {
			i := slices.Index(d.PrimaryKey, name)
			if i < 0 {
				return nil, fmt.Errorf("changefeed: space %s: sharding field %s is not in the primary key", d.Name, name)
			}
			l.keys = append(l.keys, i)
		}
		field := func(name string) int {
			return slices.IndexFunc(d.Format, func(f tuple.Field) bool { return f.Name == name })
		}
		for _, name := range d.PrimaryKey {
			i := field(name)
			if i < 0 {
				return nil, fmt.Errorf("changefeed: space %s: key field %s is not in its format", d.Name, name)
			}
			l.pks = append(l.pks, i)
		}
		if cfg.KeyField != "" {
			if l.keyField = slices.Index(d.PrimaryKey, cfg.KeyField); l.keyField < 0 {
				return nil, fmt.Errorf("changefeed: the key field %q is not in space %s's primary key %v", cfg.KeyField, d.Name, d.PrimaryKey)
			}
		}
		if cfg.ValueField != "" {
			l.valueField = field(cfg.ValueField)
			if l.valueField < 0 {
				return nil, fmt.Errorf("changefeed: the value field %q is not a field of space %s", cfg.ValueField, d.Name)
			}
			if ty := d.Format[l.valueField].Type; ty != tuple.TypeString && ty != tuple.TypeBytes {
				return nil, fmt.Errorf("changefeed: the value field %q of space %s is %s; it must be string or bytes", cfg.ValueField, d.Name, ty)
			}
		}
		out[d.Name] = l
	}
	for _, sp := range cfg.Spaces {
		if _, ok := out[sp]; !ok {
			return nil, fmt.Errorf("changefeed: no space %q", sp)
		}
	}
	return out, nil
}

// recordKey is a record's Kafka key: its tuple's sharding key as a JSON
// array (tuple.AppendJSON), so that one entity's records share a
// partition; or Config.KeyField's value.
func (f *feed) recordKey(r *Record) []byte {
	l := f.layouts[r.Space]
	if l.keyField >= 0 {
		if l.keyField >= len(r.Key) {
			return nil
		}
		return rawValue(r.Key[l.keyField])
	}
	pos := l.keys
	k := make(tuple.Tuple, 0, len(pos))
	for _, i := range pos {
		if i < len(r.Key) {
			k = append(k, r.Key[i])
		}
	}
	return tuple.AppendJSON(nil, k)
}
