package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shardkit/shardkit/scheduler"
)

// DefaultSchema holds the tables unless Options.Schema says otherwise.
const DefaultSchema = "shardkit_scheduler"

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// Options tune a Store.
type Options struct {
	// Schema holds the tables (lower-case letters, digits, '_'; up to 48);
	// DefaultSchema when empty.
	Schema string
	// Shards is the number of shards. A new schema is made with it; an
	// existing one must have the same (0: whatever it has).
	Shards int
}

// Store is a scheduler.Store on PostgreSQL.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	shards int
	// channel is the NOTIFY channel of the runners' wake-ups,
	// outboxChannel the relay's: a relay hears only of the outbox.
	channel, outboxChannel string
	// loads and checks coalesce concurrent Loads and Checks.
	loads  *coalescer[loadKey, loaded]
	checks *coalescer[checkKey, []scheduler.Entry]
}

var _ scheduler.Store = (*Store)(nil)

// Open connects to dsn, creates the schema and its tables when missing and
// checks the number of shards.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !schemaRE.MatchString(opts.Schema) {
		return nil, fmt.Errorf("%w: schema name %q: use 1..48 lower-case letters, digits or '_', not starting with a digit", scheduler.ErrInvalid, opts.Schema)
	}
	if opts.Shards < 0 || opts.Shards > maxShards {
		return nil, fmt.Errorf("%w: %d shards: use 1..%d (or 0 for an existing schema's)", scheduler.ErrInvalid, opts.Shards, maxShards)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s := &Store{pool: pool, schema: opts.Schema, channel: opts.Schema + "_wake", outboxChannel: opts.Schema + "_outbox"}
	s.loads = &coalescer[loadKey, loaded]{query: s.loadMany}
	s.checks = &coalescer[checkKey, []scheduler.Entry]{query: s.checkMany}
	if err := s.init(ctx, opts.Shards); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

const maxShards = 1 << 16

// t qualifies a table name with the schema.
func (s *Store) t(name string) string { return s.schema + "." + name }

func (s *Store) init(ctx context.Context, shards int) error {
	q := strings.ReplaceAll(createSQL, "S.", s.schema+".")
	q = strings.ReplaceAll(q, "SCHEMA_NAME", s.schema)
	// Stores opened together on a new schema would race in CREATE ... IF
	// NOT EXISTS (a unique violation in the catalog): they take turns.
	err := s.tx(ctx, "create schema "+s.schema, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", s.schema+"\x1fcreate"); err != nil {
			return wrap("create schema "+s.schema, err)
		}
		_, err := tx.Exec(ctx, q)
		return wrap("create schema "+s.schema, err)
	})
	if err != nil {
		return err
	}
	var have int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.t("shards")).Scan(&have); err != nil {
		return fmt.Errorf("pgstore: count shards: %w", err)
	}
	switch {
	case have == 0 && shards == 0:
		return fmt.Errorf("%w: schema %s has no shards yet: give Options.Shards", scheduler.ErrInvalid, s.schema)
	case have == 0:
		// Concurrent first opens insert the same rows; ON CONFLICT keeps one.
		if _, err := s.pool.Exec(ctx, "INSERT INTO "+s.t("shards")+" (shard) SELECT generate_series(0, $1::int - 1) ON CONFLICT DO NOTHING", shards); err != nil {
			return fmt.Errorf("pgstore: create %d shards: %w", shards, err)
		}
		have = shards
	case shards != 0 && have != shards:
		return fmt.Errorf("%w: schema %s has %d shards, asked for %d; the number of shards is fixed when the schema is made", scheduler.ErrInvalid, s.schema, have, shards)
	}
	s.shards = have
	return nil
}

const createSQL = `
CREATE SCHEMA IF NOT EXISTS SCHEMA_NAME;
CREATE SEQUENCE IF NOT EXISTS S.seq;
CREATE TABLE IF NOT EXISTS S.shards (
  shard INTEGER PRIMARY KEY,
  owner TEXT NOT NULL DEFAULT '',
  epoch BIGINT NOT NULL DEFAULT 0,
  last_ping TIMESTAMPTZ,
  ttl_us BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS S.runners (
  owner TEXT PRIMARY KEY,
  last_ping TIMESTAMPTZ NOT NULL,
  ttl_us BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS S.offers (
  shard INTEGER NOT NULL,
  offer_id TEXT NOT NULL,
  version BIGINT NOT NULL,
  body BYTEA NOT NULL,
  chain INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (shard, offer_id)
);
CREATE TABLE IF NOT EXISTS S.states (
  shard INTEGER NOT NULL,
  offer_id TEXT NOT NULL,
  stage_id TEXT NOT NULL,
  version BIGINT NOT NULL,
  type_url TEXT NOT NULL,
  value BYTEA NOT NULL,
  PRIMARY KEY (shard, offer_id, stage_id)
);
CREATE TABLE IF NOT EXISTS S.queue (
  shard_id INTEGER NOT NULL,
  stage_id TEXT NOT NULL,
  ts BIGINT NOT NULL,
  offer_id TEXT NOT NULL,
  PRIMARY KEY (shard_id, stage_id, ts, offer_id)
);
CREATE TABLE IF NOT EXISTS S.queue_rescan (
  shard_id INTEGER NOT NULL,
  stage_id TEXT NOT NULL,
  ts BIGINT NOT NULL,
  offer_id TEXT NOT NULL,
  PRIMARY KEY (shard_id, stage_id, ts, offer_id)
);
CREATE TABLE IF NOT EXISTS S.queue_inverted (
  shard_id INTEGER NOT NULL,
  offer_id TEXT NOT NULL,
  stage_id TEXT NOT NULL,
  ts BIGINT NOT NULL,
  lane SMALLINT NOT NULL DEFAULT 0,
  timer BOOLEAN NOT NULL DEFAULT false,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (shard_id, offer_id, stage_id)
);
CREATE INDEX IF NOT EXISTS queue_inverted_stage ON S.queue_inverted (stage_id, ts);
CREATE TABLE IF NOT EXISTS S.changed (
  shard INTEGER NOT NULL,
  offer_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  source TEXT NOT NULL,
  all_fields BOOLEAN NOT NULL,
  fields TEXT[] NOT NULL,
  chain INTEGER NOT NULL,
  PRIMARY KEY (shard, offer_id)
);
CREATE INDEX IF NOT EXISTS changed_seq ON S.changed (shard, seq);
CREATE TABLE IF NOT EXISTS S.aftersave (
  shard INTEGER NOT NULL,
  stage_id TEXT NOT NULL,
  offer_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  PRIMARY KEY (shard, stage_id, offer_id)
);
CREATE TABLE IF NOT EXISTS S.dead_letters (
  stage_id TEXT NOT NULL,
  offer_id TEXT NOT NULL,
  shard INTEGER NOT NULL,
  attempts INTEGER NOT NULL,
  cause TEXT NOT NULL,
  at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (stage_id, offer_id)
);
CREATE TABLE IF NOT EXISTS S.outbox (
  seq BIGSERIAL PRIMARY KEY,
  offer_id TEXT NOT NULL,
  record BYTEA NOT NULL
);
`

// Pool is the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema is the schema holding the tables.
func (s *Store) Schema() string { return s.schema }

// Close implements scheduler.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Shards implements scheduler.Store.
func (s *Store) Shards() int { return s.shards }

func (s *Store) shardOf(id string) int { return scheduler.ShardOf(id, s.shards) }

// tx runs f in one READ COMMITTED transaction and commits it.
func (s *Store) tx(ctx context.Context, what string, f func(pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("pgstore: %s: begin: %w", what, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: %s: commit: %w", what, err)
	}
	return nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

// fence checks, in tx, that l is still its shard's lease, and holds the
// row's share lock until tx ends: a claim (which takes the row for update)
// waits for this write, and a write after the claim sees the new epoch.
func (s *Store) fence(ctx context.Context, tx pgx.Tx, l scheduler.Lease) error {
	var owner string
	var epoch int64
	err := tx.QueryRow(ctx, "SELECT owner, epoch FROM "+s.t("shards")+" WHERE shard = $1 FOR SHARE", l.Shard).Scan(&owner, &epoch)
	return s.fenceAnswer(l, err, owner, epoch)
}

// fenceAnswer judges the fence's read of the shard's row.
func (s *Store) fenceAnswer(l scheduler.Lease, err error, owner string, epoch int64) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %v: the store has no shard %d (it has %d)", scheduler.ErrInvalid, l, l.Shard, s.shards)
	}
	if err != nil {
		return wrap("check the shard lease", err)
	}
	if owner != l.Owner || epoch != l.Epoch {
		if owner == "" {
			return fmt.Errorf("%w: %v: the shard is free now (released or never claimed at this epoch; it is at epoch %d)", scheduler.ErrFenced, l, epoch)
		}
		return fmt.Errorf("%w: %v: the shard is held by %q at epoch %d now", scheduler.ErrFenced, l, owner, epoch)
	}
	return nil
}

func (s *Store) checkShard(l scheduler.Lease, id string) error {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return err
	}
	if sh := s.shardOf(id); sh != l.Shard {
		return fmt.Errorf("%w: offer %q is in shard %d, not in the lease's %v", scheduler.ErrInvalid, id, sh, l)
	}
	return nil
}

// notify sends a wake-up when tx commits.
func (s *Store) notify(ctx context.Context, tx pgx.Tx, shard int, stage string) error {
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, strconv.Itoa(shard)+" "+stage)
	return wrap("notify", err)
}

// ---- leases ----

// Claim implements scheduler.Store.
func (s *Store) Claim(ctx context.Context, owner string, shards []int, ttl time.Duration) ([]scheduler.Lease, error) {
	if owner == "" || len(owner) > scheduler.MaxIDLen {
		return nil, fmt.Errorf("%w: owner %q must have 1..%d bytes", scheduler.ErrInvalid, owner, scheduler.MaxIDLen)
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: lease TTL %v is below 1ms", scheduler.ErrInvalid, ttl)
	}
	var out []scheduler.Lease
	err := s.tx(ctx, "claim shards", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT shard FROM "+s.t("shards")+
			" WHERE shard = ANY($1) AND (owner = '' OR owner = $2 OR last_ping IS NULL OR last_ping < clock_timestamp() - ttl_us * interval '1 microsecond')"+
			" ORDER BY shard FOR UPDATE SKIP LOCKED", shards, owner)
		if err != nil {
			return wrap("claim shards", err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil || len(got) == 0 {
			return wrap("claim shards", err)
		}
		rows, err = tx.Query(ctx, "UPDATE "+s.t("shards")+" SET owner = $1, epoch = epoch + 1, last_ping = clock_timestamp(), ttl_us = $2"+
			" WHERE shard = ANY($3) RETURNING shard, epoch", owner, ttl.Microseconds(), got)
		if err != nil {
			return wrap("claim shards", err)
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduler.Lease, error) {
			l := scheduler.Lease{Owner: owner}
			err := row.Scan(&l.Shard, &l.Epoch)
			return l, err
		})
		return wrap("claim shards", err)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Renew implements scheduler.Store.
func (s *Store) Renew(ctx context.Context, l scheduler.Lease, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, "UPDATE "+s.t("shards")+" SET last_ping = clock_timestamp(), ttl_us = $4"+
		" WHERE shard = $1 AND owner = $2 AND epoch = $3 AND last_ping >= clock_timestamp() - ttl_us * interval '1 microsecond'",
		l.Shard, l.Owner, l.Epoch, ttl.Microseconds())
	if err != nil {
		return wrap("renew "+l.String(), err)
	}
	if tag.RowsAffected() != 1 {
		return s.lost(ctx, l)
	}
	return nil
}

// Release implements scheduler.Store.
func (s *Store) Release(ctx context.Context, l scheduler.Lease) error {
	tag, err := s.pool.Exec(ctx, "UPDATE "+s.t("shards")+" SET owner = '', last_ping = NULL, ttl_us = 0 WHERE shard = $1 AND owner = $2 AND epoch = $3",
		l.Shard, l.Owner, l.Epoch)
	if err != nil {
		return wrap("release "+l.String(), err)
	}
	if tag.RowsAffected() != 1 {
		return s.lost(ctx, l)
	}
	return nil
}

func (s *Store) lost(ctx context.Context, l scheduler.Lease) error {
	var owner string
	var epoch int64
	var expired bool
	err := s.pool.QueryRow(ctx, "SELECT owner, epoch, (last_ping IS NULL OR last_ping < clock_timestamp() - ttl_us * interval '1 microsecond') FROM "+
		s.t("shards")+" WHERE shard = $1", l.Shard).Scan(&owner, &epoch, &expired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %v: the store has no such shard", scheduler.ErrFenced, l)
	case err != nil:
		return fmt.Errorf("%w: %v (and reading the shard failed: %w)", scheduler.ErrFenced, l, err)
	case owner != l.Owner || epoch != l.Epoch:
		return fmt.Errorf("%w: %v: the shard is held by %q at epoch %d now", scheduler.ErrFenced, l, owner, epoch)
	case expired:
		return fmt.Errorf("%w: %v: the lease expired in the database", scheduler.ErrFenced, l)
	}
	return fmt.Errorf("%w: %v: the shard row changed concurrently", scheduler.ErrFenced, l)
}

// Leases implements scheduler.Store.
func (s *Store) Leases(ctx context.Context) ([]scheduler.LeaseInfo, error) {
	rows, err := s.pool.Query(ctx, "SELECT shard, owner, epoch, (owner = '' OR last_ping IS NULL OR last_ping < clock_timestamp() - ttl_us * interval '1 microsecond') FROM "+
		s.t("shards")+" ORDER BY shard")
	if err != nil {
		return nil, wrap("list leases", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduler.LeaseInfo, error) {
		var in scheduler.LeaseInfo
		err := row.Scan(&in.Shard, &in.Owner, &in.Epoch, &in.Expired)
		return in, err
	})
	return out, wrap("list leases", err)
}

// Announce implements scheduler.Store. Expired announcements are deleted
// on the way.
func (s *Store) Announce(ctx context.Context, owner string, ttl time.Duration) error {
	if owner == "" || len(owner) > scheduler.MaxIDLen {
		return fmt.Errorf("%w: owner %q must have 1..%d bytes", scheduler.ErrInvalid, owner, scheduler.MaxIDLen)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: announcement TTL %v is below 1ms", scheduler.ErrInvalid, ttl)
	}
	return s.tx(ctx, "announce "+owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.t("runners")+" (owner, last_ping, ttl_us) VALUES ($1, clock_timestamp(), $2)"+
			" ON CONFLICT (owner) DO UPDATE SET last_ping = EXCLUDED.last_ping, ttl_us = EXCLUDED.ttl_us", owner, ttl.Microseconds()); err != nil {
			return wrap("announce "+owner, err)
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+s.t("runners")+" WHERE last_ping < clock_timestamp() - ttl_us * interval '1 microsecond'")
		return wrap("announce "+owner, err)
	})
}

// Runners implements scheduler.Store.
func (s *Store) Runners(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, "SELECT owner FROM "+s.t("runners")+" WHERE last_ping >= clock_timestamp() - ttl_us * interval '1 microsecond' ORDER BY owner")
	if err != nil {
		return nil, wrap("list runners", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, wrap("list runners", err)
}

// ---- offers and states ----

// Load implements scheduler.Store.
func (s *Store) Load(ctx context.Context, id, stage string) (scheduler.Offer, scheduler.State, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return scheduler.Offer{}, scheduler.State{}, err
	}
	l, err := s.loads.do(ctx, loadKey{shard: s.shardOf(id), offer: id, stage: stage})
	return l.offer, l.state, err
}

type loadKey struct {
	shard        int
	offer, stage string
}

type loaded struct {
	offer scheduler.Offer
	state scheduler.State
}

// loadMany reads offers and, where a stage is named, its state, in one
// query from one snapshot.
func (s *Store) loadMany(ctx context.Context, keys []loadKey) ([]loaded, error) {
	shards, ids, stages := make([]int32, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	out := make([]loaded, len(keys))
	for i, k := range keys {
		shards[i], ids[i], stages[i] = int32(k.shard), k.offer, k.stage //nolint:gosec // below maxShards
		out[i].offer.ID = k.offer
	}
	rows, err := s.pool.Query(ctx, "SELECT u.n, o.version, o.body, o.chain, st.version, st.type_url, st.value"+
		" FROM unnest($1::integer[], $2::text[], $3::text[]) WITH ORDINALITY AS u(shard, offer_id, stage_id, n)"+
		" LEFT JOIN "+s.t("offers")+" o ON o.shard = u.shard AND o.offer_id = u.offer_id"+
		" LEFT JOIN "+s.t("states")+" st ON u.stage_id <> '' AND st.shard = u.shard AND st.offer_id = u.offer_id AND st.stage_id = u.stage_id",
		shards, ids, stages)
	if err != nil {
		return nil, wrap("load offers", err)
	}
	var n int64
	var ov, sv *int64
	var chain *int
	var body, value []byte
	var typeURL *string
	_, err = pgx.ForEachRow(rows, []any{&n, &ov, &body, &chain, &sv, &typeURL, &value}, func() error {
		l := &out[n-1]
		if ov != nil {
			l.offer.Version, l.offer.Body, l.offer.Chain = *ov, slices.Clone(body), *chain
		}
		if sv != nil {
			l.state = scheduler.State{Version: *sv, Value: &anypb.Any{TypeUrl: *typeURL, Value: slices.Clone(value)}}
		}
		return nil
	})
	if err != nil {
		return nil, wrap("load offers", err)
	}
	return out, nil
}

// Put implements scheduler.Store: a PutMany of one.
func (s *Store) Put(ctx context.Context, id string, body []byte, ifVersion int64) (int64, error) {
	versions, errs, err := s.PutMany(ctx, []PutOffer{{ID: id, Body: body, IfVersion: ifVersion}})
	if err != nil {
		return 0, err
	}
	return versions[0], errs[0]
}

// PutOffer is one offer of PutMany: Put's arguments.
type PutOffer = scheduler.PutOffer

// PutMany writes offers from outside, each as Put writes it, in one
// transaction (a bulk load: the scheduler's benchmark puts its offers so,
// as River's inserts its jobs). versions[i] and errs[i] are offers[i]'s
// outcome: a refusal (ErrConflict, ErrInvalid; ErrInvalid too for an
// offer that is in offers twice) writes nothing of it and does not stop
// the others; err is the call's, after which nothing is written.
func (s *Store) PutMany(ctx context.Context, offers []PutOffer) (versions []int64, errs []error, err error) {
	offers = slices.Clone(offers)
	todo, errs := scheduler.OncePerOffer("PutMany", len(offers),
		func(i int) error { return offers[i].Check() }, func(i int) string { return offers[i].ID })
	shardOf := make([]int, len(offers))
	for _, i := range todo {
		shardOf[i] = s.shardOf(offers[i].ID)
	}
	slices.SortFunc(todo, func(a, b int) int {
		if shardOf[a] != shardOf[b] {
			return shardOf[a] - shardOf[b]
		}
		return cmpString(offers[a].ID, offers[b].ID)
	})
	err = s.ptx(ctx, "put offers", func(tx *pipeTx) error {
		versions = make([]int64, len(offers))
		for _, i := range todo {
			errs[i] = nil
		}
		if len(todo) == 0 {
			return nil
		}
		shards, ids := make([]int32, len(todo)), make([]string, len(todo))
		for k, i := range todo {
			shards[k], ids[k] = int32(shardOf[i]), offers[i].ID //nolint:gosec // below maxShards
		}
		b := &pgx.Batch{}
		b.Queue("SELECT o.offer_id, o.version, o.body FROM "+s.t("offers")+" o JOIN unnest($1::integer[], $2::text[]) AS u(shard, offer_id)"+
			" ON o.shard = u.shard AND o.offer_id = u.offer_id ORDER BY o.shard, o.offer_id FOR UPDATE OF o", shards, ids)
		b.Queue("SELECT clock_timestamp()")
		br, err := tx.read(ctx, b, "put offers")
		if err != nil {
			return err
		}
		old := map[string]offerRow{}
		var now time.Time
		err = func() error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var id string
			var o offerRow
			if _, err := pgx.ForEachRow(rows, []any{&id, &o.version, &o.body}, func() error {
				old[id] = offerRow{o.version, slices.Clone(o.body)}
				return nil
			}); err != nil {
				return err
			}
			return br.QueryRow().Scan(&now)
		}()
		if err != nil {
			br.Close()
			return wrap("put offers: read", err)
		}
		if err := br.Close(); err != nil {
			return wrap("put offers: read", err)
		}
		w := &pgx.Batch{}
		var newShards []int32
		var newIDs []string
		var newBodies, records [][]byte
		var recIDs []string
		marked := map[int]bool{}
		for _, i := range todo {
			p := offers[i]
			sh := shardOf[i]
			cur := old[p.ID]
			if p.IfVersion != scheduler.AnyVersion && cur.version != p.IfVersion {
				if cur.version == 0 {
					errs[i] = fmt.Errorf("%w: offer %q does not exist (asked to replace version %d)", scheduler.ErrConflict, p.ID, p.IfVersion)
				} else {
					errs[i] = fmt.Errorf("%w: offer %q is at version %d, not %d", scheduler.ErrConflict, p.ID, cur.version, p.IfVersion)
				}
				continue
			}
			versions[i] = cur.version
			if cur.version == 0 {
				newShards, newIDs, newBodies = append(newShards, int32(sh)), append(newIDs, p.ID), append(newBodies, p.Body) //nolint:gosec // below maxShards
			} else {
				fields, err := scheduler.ChangedFields(cur.body, p.Body)
				if err != nil {
					errs[i] = err
					continue
				}
				if len(fields) == 0 {
					continue // the same body: no new version, no trigger
				}
				w.Queue("UPDATE "+s.t("offers")+" SET version = version + 1, body = $3, chain = 0 WHERE shard = $1 AND offer_id = $2", sh, p.ID, p.Body)
				s.queueMark(w, sh, p.ID, "", fields, 0)
			}
			versions[i]++
			marked[sh] = true
			rec, err := json.Marshal(scheduler.Record{OfferID: p.ID, Shard: sh, OfferVersion: versions[i], Body: p.Body, Time: now})
			if err != nil {
				return fmt.Errorf("pgstore: encode the changelog record of %q: %w", p.ID, err)
			}
			recIDs, records = append(recIDs, p.ID), append(records, rec)
		}
		if len(newIDs) > 0 {
			w.Queue("INSERT INTO "+s.t("offers")+" (shard, offer_id, version, body, chain) SELECT shard, offer_id, 1, body, 0"+
				" FROM unnest($1::integer[], $2::text[], $3::bytea[]) AS u(shard, offer_id, body)", newShards, newIDs, newBodies)
			// A new offer's mark: every field changed. A mark may be left
			// from an offer of that id deleted before: merged.
			w.Queue("INSERT INTO "+s.t("changed")+" AS c (shard, offer_id, seq, source, all_fields, fields, chain)"+
				" SELECT shard, offer_id, nextval('"+s.t("seq")+"'), '', true, '{}', 0 FROM unnest($1::integer[], $2::text[]) AS u(shard, offer_id)"+
				" ON CONFLICT (shard, offer_id) DO UPDATE SET seq = EXCLUDED.seq, source = '', all_fields = true, chain = GREATEST(c.chain, EXCLUDED.chain)",
				newShards, newIDs)
		}
		for _, sh := range slices.Sorted(maps.Keys(marked)) {
			s.queueNotify(w, sh, "")
		}
		s.queueOutbox(w, recIDs, records)
		if w.Len() == 0 {
			return nil // nothing written: the transaction is rolled back
		}
		return tx.commit(ctx, w, "put offers")
	})
	if err != nil {
		return nil, nil, err
	}
	return versions, errs, nil
}

// outbox writes the changelog record of a save.
func (s *Store) outbox(ctx context.Context, tx pgx.Tx, r scheduler.Record) error {
	if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&r.Time); err != nil {
		return wrap("outbox", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgstore: encode the changelog record of %q: %w", r.OfferID, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.t("outbox")+" (offer_id, record) VALUES ($1, $2)", r.OfferID, b); err != nil {
		return wrap("outbox", err)
	}
	_, err = tx.Exec(ctx, "SELECT pg_notify($1, '')", s.outboxChannel)
	return wrap("notify", err)
}

// UpdateState implements scheduler.Store.
func (s *Store) UpdateState(ctx context.Context, id, stage string, state *anypb.Any, version int64) (bool, error) {
	if err := scheduler.CheckStateUpdate(id, stage, state); err != nil {
		return false, err
	}
	sh := s.shardOf(id)
	ok := false
	err := s.tx(ctx, "update state", func(tx pgx.Tx) error {
		var ov int64
		var body []byte
		err := tx.QueryRow(ctx, "SELECT version, body FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id = $2 FOR SHARE", sh, id).Scan(&ov, &body)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: offer %q", scheduler.ErrNotFound, id)
		}
		if err != nil {
			return wrap("update state", err)
		}
		sv, err := s.writeState(ctx, tx, sh, id, stage, state, version)
		if errors.Is(err, scheduler.ErrConflict) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		return s.outbox(ctx, tx, scheduler.Record{OfferID: id, Shard: sh, OfferVersion: ov, Body: body, Stage: stage,
			StateType: state.GetTypeUrl(), State: state.GetValue(), StateVersion: sv})
	})
	return ok, err
}

// writeState sets a stage's state if it is still at version; it returns
// the new version.
func (s *Store) writeState(ctx context.Context, tx pgx.Tx, sh int, id, stage string, state *anypb.Any, version int64) (int64, error) {
	var have int64
	err := tx.QueryRow(ctx, "SELECT version FROM "+s.t("states")+" WHERE shard = $1 AND offer_id = $2 AND stage_id = $3 FOR UPDATE", sh, id, stage).Scan(&have)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, wrap("read state", err)
	}
	if have != version {
		return 0, fmt.Errorf("%w: state of stage %q of offer %q is at version %d, not %d", scheduler.ErrConflict, stage, id, have, version)
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+s.t("states")+" (shard, offer_id, stage_id, version, type_url, value) VALUES ($1, $2, $3, $4, $5, $6)"+
		" ON CONFLICT (shard, offer_id, stage_id) DO UPDATE SET version = EXCLUDED.version, type_url = EXCLUDED.type_url, value = EXCLUDED.value",
		sh, id, stage, have+1, state.GetTypeUrl(), nonNil(state.GetValue()))
	if err != nil {
		return 0, wrap("write state", err)
	}
	return have + 1, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Save implements scheduler.Store: a SaveMany of one.
func (s *Store) Save(ctx context.Context, l scheduler.Lease, sv scheduler.Save) (scheduler.Saved, error) {
	out, errs, err := s.SaveMany(ctx, l, []scheduler.Save{sv})
	if err != nil {
		return scheduler.Saved{}, err
	}
	if errs[0] != nil {
		return scheduler.Saved{}, errs[0]
	}
	return out[0], nil
}
