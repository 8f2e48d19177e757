package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultTable is the lease table's name unless SQLOptions.Table says
// otherwise.
const DefaultTable = "shardkit_cache_leases"

var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidTableName reports whether name may be spliced into SQL as a table
// name in every dialect: 1..63 letters, digits or '_', not starting with a
// digit.
func ValidTableName(name string) bool { return tableNameRE.MatchString(name) }

// SQLOptions tune a SQL store.
type SQLOptions struct {
	// Table is the lease table's name (letters, digits, underscore);
	// DefaultTable when empty.
	Table string
}

// SQLStore is a Store on a SQL database: SQLite, MySQL/MariaDB or
// PostgreSQL, chosen by its Dialect. The table is
//
//	(dc, shard, range_begin, range_end, host, locked_time, last_ping, ttl_us, epoch)
//
// with primary key (dc, shard). Times are the database's own; the
// expiry of a row is judged by the database as last_ping < now - ttl_us,
// where ttl_us is the TTL of the host that holds it.
type SQLStore struct {
	db      *sql.DB
	dialect Dialect
	q       queries
	ownsDB  bool
}

// NewSQLStore wraps db, which the caller keeps owning (Close does not close
// it). Prefer OpenSQL, which also sets the connection options each database
// needs (busy timeout and immediate transactions for SQLite; found-rows and
// UTC for MySQL).
func NewSQLStore(db *sql.DB, dialect Dialect, opts SQLOptions) (*SQLStore, error) {
	table := opts.Table
	if table == "" {
		table = DefaultTable
	}
	if !ValidTableName(table) {
		return nil, fmt.Errorf("%w: table name %q: use 1..63 letters, digits or '_', not starting with a digit", ErrInvalid, table)
	}
	q, err := dialect.queries(table)
	if err != nil {
		return nil, err
	}
	return &SQLStore{db: db, dialect: dialect, q: q}, nil
}

// DB returns the underlying database handle.
func (s *SQLStore) DB() *sql.DB { return s.db }

// Dialect returns the store's SQL dialect.
func (s *SQLStore) Dialect() Dialect { return s.dialect }

// Close closes the database if OpenSQL opened it.
func (s *SQLStore) Close() error {
	if s.ownsDB {
		return s.db.Close()
	}
	return nil
}

func (s *SQLStore) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: s.dialect.isolation()})
	if err != nil {
		return nil, fmt.Errorf("lease: begin %s transaction: %w", s.dialect, err)
	}
	return tx, nil
}

// Init implements Store.
func (s *SQLStore) Init(ctx context.Context, dc string, ranges []Range) error {
	if err := validateDC(dc); err != nil {
		return err
	}
	if err := CheckPartition(ranges); err != nil {
		return err
	}
	if err := s.createTable(ctx); err != nil {
		return err
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	existing, err := s.rows(ctx, tx, dc)
	if err != nil {
		return err
	}
	if len(existing) > 0 {
		if sameRanges(existing, ranges) {
			return nil
		}
		return fmt.Errorf("%w: dc %q has %d shards (%v ... ), asked for %d; to change them, stop the dc's servers and delete its rows first",
			ErrAlreadyInitialized, dc, len(existing), existing[0].Range, len(ranges))
	}
	for i, r := range ranges {
		if _, err := tx.ExecContext(ctx, s.q.insert, dc, i, formatBeginText(r.Begin), formatEnd(r.End)); err != nil {
			return fmt.Errorf("lease: insert shard %d of dc %q: %w", i, dc, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: commit shards of dc %q: %w", dc, err)
	}
	return nil
}

// createTable creates the lease table if it is not there. On SQLite the
// statements run in one transaction, which OpenSQL's DSN begins IMMEDIATE
// (waiting for other writers under the busy timeout): run alone, a CREATE
// TABLE reads the schema first and fails at once with SQLITE_BUSY when
// another connection writes before it upgrades (stores of one new file
// initialised together). Elsewhere they run as before (MySQL commits DDL
// implicitly anyway).
func (s *SQLStore) createTable(ctx context.Context) error {
	if s.dialect != SQLite {
		for _, stmt := range s.q.create {
			if _, err := s.db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("lease: create table: %w", err)
			}
		}
		return nil
	}
	// A new file's first connections can still be refused at once while
	// one of them turns it to WAL mode (no busy handler runs then): such
	// a refusal is retried for up to about a second.
	for attempt := 0; ; attempt++ {
		err := s.createTableTx(ctx)
		if err == nil || !sqliteBusy(err) || attempt >= sqliteBusyRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(sqliteBusyWait):
		}
	}
}

// How often, and how far apart, createTable retries SQLITE_BUSY on SQLite.
const (
	sqliteBusyRetries = 50
	sqliteBusyWait    = 20 * time.Millisecond
)

func (s *SQLStore) createTableTx(ctx context.Context) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, stmt := range s.q.create {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("lease: create table: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: create table: commit: %w", err)
	}
	return nil
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func sqliteBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

func sameRanges(rows []Row, ranges []Range) bool {
	if len(rows) != len(ranges) {
		return false
	}
	for i, r := range rows {
		if r.Shard != i || r.Range != ranges[i] {
			return false
		}
	}
	return true
}

// Claim implements Store.
func (s *SQLStore) Claim(ctx context.Context, req ClaimRequest) (Lease, error) {
	if err := validateClaim(req); err != nil {
		return Lease{}, err
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return Lease{}, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	shard, epoch, ok, err := s.pick(ctx, tx, req)
	if err != nil {
		if s.dialect.isNoTable(err) {
			return Lease{}, fmt.Errorf("%w: dc %q: the lease table does not exist; run `shardkit cache init-leases` first", ErrNotInitialized, req.DC)
		}
		return Lease{}, err
	}
	if !ok {
		if err := tx.Rollback(); err != nil {
			return Lease{}, fmt.Errorf("lease: roll back claim: %w", err)
		}
		return Lease{}, s.noFreeShard(ctx, req.DC)
	}
	res, err := tx.ExecContext(ctx, s.q.claim, req.Host, req.TTL.Microseconds(), req.DC, shard, epoch)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: claim shard %d of dc %q: %w", shard, req.DC, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Lease{}, fmt.Errorf("lease: claim shard %d of dc %q: %w", shard, req.DC, err)
	}
	if n != 1 {
		// The row is locked (or we hold the database's write lock), so its
		// epoch cannot have moved; this would be a bug in the dialect.
		return Lease{}, fmt.Errorf("lease: claim shard %d of dc %q changed %d rows, want 1", shard, req.DC, n)
	}
	var rb, re string
	if err := tx.QueryRowContext(ctx, s.q.getRange, req.DC, shard).Scan(&rb, &re); err != nil {
		return Lease{}, fmt.Errorf("lease: read range of shard %d of dc %q: %w", shard, req.DC, err)
	}
	r, err := parseStoredRange(rb, re)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: shard %d of dc %q: %w", shard, req.DC, err)
	}
	if err := tx.Commit(); err != nil {
		return Lease{}, fmt.Errorf("lease: commit claim of shard %d of dc %q: %w", shard, req.DC, err)
	}
	return Lease{DC: req.DC, Shard: shard, Range: r, Host: req.Host, Epoch: epoch + 1, TTL: req.TTL}, nil
}

// pick chooses and locks the shard to claim: the seed's preference order
// (held by me first, then oldest last_ping, then lowest shard), among rows
// that are mine, free or expired by database time.
func (s *SQLStore) pick(ctx context.Context, tx *sql.Tx, req ClaimRequest) (shard int, epoch uint64, ok bool, err error) {
	if s.q.pickCandidates == "" {
		err = tx.QueryRowContext(ctx, s.q.pick, req.DC, req.Host, req.Host).Scan(&shard, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, 0, false, nil
		}
		if err != nil {
			return 0, 0, false, fmt.Errorf("lease: choose a shard of dc %q: %w", req.DC, err)
		}
		return shard, epoch, true, nil
	}
	// InnoDB locks every row a locking scan examines, so a locking query
	// over all candidates would make concurrent claimers skip them all.
	// Read the candidates without locks, then lock them one by one.
	rows, err := tx.QueryContext(ctx, s.q.pickCandidates, req.DC, req.Host, req.Host)
	if err != nil {
		return 0, 0, false, fmt.Errorf("lease: list claimable shards of dc %q: %w", req.DC, err)
	}
	var cands []int
	for rows.Next() {
		var c int
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return 0, 0, false, fmt.Errorf("lease: list claimable shards of dc %q: %w", req.DC, err)
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, false, fmt.Errorf("lease: list claimable shards of dc %q: %w", req.DC, err)
	}
	for _, c := range cands {
		err := tx.QueryRowContext(ctx, s.q.pickOne, req.DC, c, req.Host).Scan(&epoch)
		if errors.Is(err, sql.ErrNoRows) {
			continue // locked by another claimer, or no longer claimable
		}
		if err != nil {
			return 0, 0, false, fmt.Errorf("lease: lock shard %d of dc %q: %w", c, req.DC, err)
		}
		return c, epoch, true, nil
	}
	return 0, 0, false, nil
}

func (s *SQLStore) noFreeShard(ctx context.Context, dc string) error {
	rows, err := s.Rows(ctx, dc)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: all %d shards of dc %q are held by live leases; wait for one to expire or add shards",
		ErrNoFreeShard, len(rows), dc)
}

// Ping implements Store.
func (s *SQLStore) Ping(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.ping, l.DC, l.Shard, l.Host, l.Epoch)
	if err != nil {
		return fmt.Errorf("lease: ping %v: %w", l, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("lease: ping %v: %w", l, err)
	}
	if n == 1 {
		return nil
	}
	return s.lost(ctx, l)
}

// Release implements Store.
func (s *SQLStore) Release(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.release, l.DC, l.Shard, l.Host, l.Epoch)
	if err != nil {
		return fmt.Errorf("lease: release %v: %w", l, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("lease: release %v: %w", l, err)
	}
	if n == 1 {
		return nil
	}
	return s.lost(ctx, l)
}

// lost explains why l is no longer held.
func (s *SQLStore) lost(ctx context.Context, l Lease) error {
	rows, err := s.Rows(ctx, l.DC)
	if err != nil {
		return fmt.Errorf("%w: %v (and reading the row failed: %w)", ErrLost, l, err)
	}
	for _, r := range rows {
		if r.Shard != l.Shard {
			continue
		}
		switch {
		case r.Epoch != l.Epoch || r.Host != l.Host:
			return fmt.Errorf("%w: %v: the shard is now held by %q at epoch %d", ErrLost, l, r.Host, r.Epoch)
		case r.Expired:
			return fmt.Errorf("%w: %v: expired in the database (last ping %v, ttl %v)", ErrLost, l, r.LastPing.Format(time.RFC3339Nano), r.TTL)
		}
		return fmt.Errorf("%w: %v: the row changed concurrently", ErrLost, l)
	}
	return fmt.Errorf("%w: %v: the shard row is gone", ErrLost, l)
}

// Rows implements Store.
func (s *SQLStore) Rows(ctx context.Context, dc string) ([]Row, error) {
	if err := validateDC(dc); err != nil {
		return nil, err
	}
	out, err := s.rows(ctx, s.db, dc)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: dc %q; run `shardkit cache init-leases --dc %s --shards N` first", ErrNotInitialized, dc, dc)
	}
	return out, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *SQLStore) rows(ctx context.Context, q querier, dc string) ([]Row, error) {
	rows, err := q.QueryContext(ctx, s.q.list, dc)
	if err != nil {
		if s.dialect.isNoTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("lease: list shards of dc %q: %w", dc, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var (
			r            Row
			rb, re       string
			ttlUS        int64
			locked, ping sql.NullInt64
			expired      int64
			epoch        int64
		)
		if err := rows.Scan(&r.Shard, &rb, &re, &r.Host, &epoch, &ttlUS, &locked, &ping, &expired); err != nil {
			return nil, fmt.Errorf("lease: read shard row of dc %q: %w", dc, err)
		}
		if r.Range, err = parseStoredRange(rb, re); err != nil {
			return nil, fmt.Errorf("lease: shard %d of dc %q: %w", r.Shard, dc, err)
		}
		r.DC = dc
		r.Epoch = uint64(epoch) //nolint:gosec // epochs start at 0 and only grow
		r.TTL = time.Duration(ttlUS) * time.Microsecond
		if locked.Valid {
			r.LockedTime = time.UnixMicro(locked.Int64).UTC()
		}
		if ping.Valid {
			r.LastPing = time.UnixMicro(ping.Int64).UTC()
		}
		r.Expired = expired != 0
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: list shards of dc %q: %w", dc, err)
	}
	return out, nil
}

func formatBeginText(b uint64) string { return fmt.Sprintf("%d", b) }

func parseStoredRange(b, e string) (Range, error) {
	begin, err := parseBegin(strings.TrimSpace(b))
	if err != nil {
		return Range{}, err
	}
	end, err := parseEnd(strings.TrimSpace(e))
	if err != nil {
		return Range{}, err
	}
	r := Range{Begin: begin, End: end}
	if !r.Valid() {
		return Range{}, fmt.Errorf("%w: stored range %v is empty", ErrInvalid, r)
	}
	return r, nil
}
