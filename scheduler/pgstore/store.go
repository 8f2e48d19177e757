package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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
	// channel is the NOTIFY channel of wake-ups.
	channel string
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
	s := &Store{pool: pool, schema: opts.Schema, channel: opts.Schema + "_wake"}
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
	sh := s.shardOf(id)
	o := scheduler.Offer{ID: id}
	err := s.pool.QueryRow(ctx, "SELECT version, body, chain FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id = $2", sh, id).Scan(&o.Version, &o.Body, &o.Chain)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return o, scheduler.State{}, wrap("load offer "+id, err)
	}
	if stage == "" {
		return o, scheduler.State{}, nil
	}
	var st scheduler.State
	var typeURL string
	var value []byte
	err = s.pool.QueryRow(ctx, "SELECT version, type_url, value FROM "+s.t("states")+" WHERE shard = $1 AND offer_id = $2 AND stage_id = $3", sh, id, stage).Scan(&st.Version, &typeURL, &value)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return o, st, wrap("load state of "+id, err)
	default:
		st.Value = &anypb.Any{TypeUrl: typeURL, Value: value}
	}
	return o, st, nil
}

// Put implements scheduler.Store.
func (s *Store) Put(ctx context.Context, id string, body []byte, ifVersion int64) (int64, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return 0, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := scheduler.CheckBody(body); err != nil {
		return 0, err
	}
	if ifVersion < scheduler.AnyVersion {
		return 0, fmt.Errorf("%w: version %d: use 0 (create), a version, or AnyVersion", scheduler.ErrInvalid, ifVersion)
	}
	sh := s.shardOf(id)
	var version int64
	err := s.tx(ctx, "put offer "+id, func(tx pgx.Tx) error {
		var old []byte
		err := tx.QueryRow(ctx, "SELECT version, body FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id = $2 FOR UPDATE", sh, id).Scan(&version, &old)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return wrap("put offer "+id, err)
		}
		if ifVersion != scheduler.AnyVersion && version != ifVersion {
			if version == 0 {
				return fmt.Errorf("%w: offer %q does not exist (asked to replace version %d)", scheduler.ErrConflict, id, ifVersion)
			}
			return fmt.Errorf("%w: offer %q is at version %d, not %d", scheduler.ErrConflict, id, version, ifVersion)
		}
		var fields []string
		if version == 0 {
			_, err = tx.Exec(ctx, "INSERT INTO "+s.t("offers")+" (shard, offer_id, version, body, chain) VALUES ($1, $2, 1, $3, 0)", sh, id, body)
		} else {
			if fields, err = scheduler.ChangedFields(old, body); err != nil {
				return err
			}
			if len(fields) == 0 {
				return nil // the same body: no new version, no trigger
			}
			_, err = tx.Exec(ctx, "UPDATE "+s.t("offers")+" SET version = version + 1, body = $3, chain = 0 WHERE shard = $1 AND offer_id = $2", sh, id, body)
		}
		if err != nil {
			return wrap("put offer "+id, err)
		}
		version++
		if err := s.markChanged(ctx, tx, sh, id, "", fields, 0); err != nil {
			return err
		}
		return s.outbox(ctx, tx, scheduler.Record{OfferID: id, Shard: sh, OfferVersion: version, Body: body})
	})
	return version, err
}

// markChanged makes or merges the offer's changed-offer mark and wakes the
// shard's runner.
func (s *Store) markChanged(ctx context.Context, tx pgx.Tx, sh int, id, source string, fields []string, chain int) error {
	all := fields == nil
	if all {
		fields = []string{}
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+s.t("changed")+" AS c (shard, offer_id, seq, source, all_fields, fields, chain)"+
		" VALUES ($1, $2, nextval('"+s.t("seq")+"'), $3, $4, $5, $6)"+
		" ON CONFLICT (shard, offer_id) DO UPDATE SET seq = EXCLUDED.seq,"+
		" source = CASE WHEN c.source = EXCLUDED.source THEN c.source ELSE '' END,"+
		" all_fields = c.all_fields OR EXCLUDED.all_fields,"+
		" fields = ARRAY(SELECT DISTINCT f FROM unnest(c.fields || EXCLUDED.fields) AS f ORDER BY f),"+
		" chain = GREATEST(c.chain, EXCLUDED.chain)", sh, id, source, all, fields, chain)
	if err != nil {
		return wrap("mark offer "+id+" changed", err)
	}
	return s.notify(ctx, tx, sh, "")
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
	_, err = tx.Exec(ctx, "SELECT pg_notify($1, 'outbox')", s.channel)
	return wrap("notify", err)
}

// UpdateState implements scheduler.Store.
func (s *Store) UpdateState(ctx context.Context, id, stage string, state *anypb.Any, version int64) (bool, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return false, err
	}
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return false, err
	}
	if state == nil {
		return false, fmt.Errorf("%w: no state given for stage %q of offer %q", scheduler.ErrInvalid, stage, id)
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

// Save implements scheduler.Store.
func (s *Store) Save(ctx context.Context, l scheduler.Lease, sv scheduler.Save) (scheduler.Saved, error) {
	if err := s.checkShard(l, sv.OfferID); err != nil {
		return scheduler.Saved{}, err
	}
	if err := scheduler.ValidateID("stage", sv.Stage); err != nil {
		return scheduler.Saved{}, err
	}
	if sv.Body != nil && sv.Patch != nil {
		return scheduler.Saved{}, fmt.Errorf("%w: save of offer %q by stage %q has both a body and a patch", scheduler.ErrInvalid, sv.OfferID, sv.Stage)
	}
	if sv.Body != nil {
		if err := scheduler.CheckBody(sv.Body); err != nil {
			return scheduler.Saved{}, err
		}
	}
	var out scheduler.Saved
	err := s.tx(ctx, "save", func(tx pgx.Tx) error {
		out = scheduler.Saved{}
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		var version int64
		var body []byte
		var chain int
		err := tx.QueryRow(ctx, "SELECT version, body, chain FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id = $2 FOR UPDATE", l.Shard, sv.OfferID).Scan(&version, &body, &chain)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: offer %q (deleted while stage %q ran)", scheduler.ErrNotFound, sv.OfferID, sv.Stage)
		}
		if err != nil {
			return wrap("save: read offer", err)
		}
		if sv.Patch == nil && version != sv.ReadVersion {
			return fmt.Errorf("%w: offer %q is at version %d; stage %q read version %d", scheduler.ErrConflict, sv.OfferID, version, sv.Stage, sv.ReadVersion)
		}
		out.OfferVersion = version
		newBody, fields := sv.Body, sv.Fields
		if sv.Patch != nil {
			if newBody, err = scheduler.ApplyPatch(body, sv.Patch); err != nil {
				return err
			}
			if fields, err = scheduler.ChangedFields(body, newBody); err != nil {
				return err
			}
			if len(fields) == 0 {
				newBody = nil
			}
		}
		if newBody != nil && !bytes.Equal(newBody, body) {
			if _, err := tx.Exec(ctx, "UPDATE "+s.t("offers")+" SET version = version + 1, body = $3, chain = $4 WHERE shard = $1 AND offer_id = $2",
				l.Shard, sv.OfferID, newBody, sv.Chain); err != nil {
				return wrap("save: write offer", err)
			}
			out.OfferVersion, out.Changed, body = version+1, true, newBody
			source := sv.Stage
			if version != sv.ReadVersion {
				source = "" // a patch on a newer offer: the stage too is asked about it
			}
			if err := s.markChanged(ctx, tx, l.Shard, sv.OfferID, source, fields, sv.Chain); err != nil {
				return err
			}
		}
		if sv.State != nil {
			if out.StateVersion, err = s.writeState(ctx, tx, l.Shard, sv.OfferID, sv.Stage, sv.State, sv.StateVersion); err != nil {
				return err
			}
		} else {
			out.StateVersion = sv.StateVersion
		}
		if _, _, err := s.lockEntry(ctx, tx, l.Shard, sv.Stage, sv.OfferID); err != nil {
			return err
		}
		// A patch that changed nothing on a newer offer than the stage read:
		// the stage has not seen that offer and no mark will ask it, so its
		// entry stays due and it runs again.
		rerun := sv.Patch != nil && version != sv.ReadVersion && !out.Changed
		if !rerun {
			if err := s.deleteEntry(ctx, tx, l.Shard, sv.Stage, sv.OfferID); err != nil {
				return err
			}
			if !sv.Timer.IsZero() {
				if err := s.insertEntry(ctx, tx, scheduler.Entry{Shard: l.Shard, Stage: sv.Stage, OfferID: sv.OfferID, Due: sv.Timer, Timer: true}); err != nil {
					return err
				}
			}
		}
		if sv.AfterSave {
			if _, err := tx.Exec(ctx, "INSERT INTO "+s.t("aftersave")+" (shard, stage_id, offer_id, seq) VALUES ($1, $2, $3, nextval('"+s.t("seq")+"'))"+
				" ON CONFLICT (shard, stage_id, offer_id) DO UPDATE SET seq = EXCLUDED.seq", l.Shard, sv.Stage, sv.OfferID); err != nil {
				return wrap("save: after-save", err)
			}
			if err := s.notify(ctx, tx, l.Shard, sv.Stage); err != nil {
				return err
			}
		}
		if !out.Changed && sv.State == nil {
			return nil // nothing new to publish
		}
		r := scheduler.Record{OfferID: sv.OfferID, Shard: l.Shard, OfferVersion: out.OfferVersion, Body: body, Stage: sv.Stage}
		if sv.State != nil {
			r.StateType, r.State, r.StateVersion = sv.State.GetTypeUrl(), sv.State.GetValue(), out.StateVersion
		} else if _, st, err := s.loadStateTx(ctx, tx, l.Shard, sv.OfferID, sv.Stage); err != nil {
			return err
		} else if st.Value != nil {
			r.StateType, r.State, r.StateVersion = st.Value.GetTypeUrl(), st.Value.GetValue(), st.Version
		}
		return s.outbox(ctx, tx, r)
	})
	if err != nil {
		return scheduler.Saved{}, err
	}
	return out, nil
}

func (s *Store) loadStateTx(ctx context.Context, tx pgx.Tx, sh int, id, stage string) (bool, scheduler.State, error) {
	var st scheduler.State
	var typeURL string
	var value []byte
	err := tx.QueryRow(ctx, "SELECT version, type_url, value FROM "+s.t("states")+" WHERE shard = $1 AND offer_id = $2 AND stage_id = $3", sh, id, stage).Scan(&st.Version, &typeURL, &value)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, st, nil
	}
	if err != nil {
		return false, st, wrap("read state", err)
	}
	st.Value = &anypb.Any{TypeUrl: typeURL, Value: value}
	return true, st, nil
}
