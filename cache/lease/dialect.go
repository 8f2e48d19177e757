package lease

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dialect names the SQL database a SQLStore talks to.
type Dialect string

// The supported dialects.
const (
	// SQLite (modernc.org/sqlite, driver "sqlite"): one writer at a time;
	// claims run in BEGIN IMMEDIATE transactions, which stand in for
	// SKIP LOCKED. For one host (development, tests, the loopback demo):
	// its file locks are only reliable on a local file system.
	SQLite Dialect = "sqlite"
	// MySQL 8.0.1+ or MariaDB 10.6+ (github.com/go-sql-driver/mysql, driver
	// "mysql"): SELECT ... FOR UPDATE SKIP LOCKED in READ COMMITTED,
	// DATETIME(6) times from UTC_TIMESTAMP(6).
	MySQL Dialect = "mysql"
	// PostgreSQL 9.5+ (github.com/jackc/pgx/v5/stdlib, driver "pgx"):
	// SELECT ... FOR UPDATE SKIP LOCKED in READ COMMITTED, times from
	// clock_timestamp().
	PostgreSQL Dialect = "postgres"
)

func (d Dialect) isolation() sql.IsolationLevel {
	if d == SQLite {
		return sql.LevelDefault // serializable; BEGIN IMMEDIATE through the DSN
	}
	return sql.LevelReadCommitted
}

// queries are a dialect's statements for one table. Placeholders are '?'
// (rebound to $n for PostgreSQL); the argument order is in the comments.
type queries struct {
	create         []string
	insert         string // dc, shard, range_begin, range_end
	pick           string // dc, host, host -> shard, epoch (locks the row)
	pickCandidates string // dc, host, host -> shard... (no locks); with pickOne instead of pick
	pickOne        string // dc, shard, host -> epoch (locks the row)
	claim          string // host, ttl_us, dc, shard, old epoch
	getRange       string // dc, shard -> range_begin, range_end
	ping           string // dc, shard, host, epoch
	release        string // dc, shard, host, epoch
	list           string // dc -> shard, range_begin, range_end, host, epoch, ttl_us, locked_us, ping_us, expired
}

// sqlParts are the pieces that differ between dialects.
type sqlParts struct {
	now        string // the database's current time, in the column's type
	expiredAt  string // the time before which a last_ping is expired (uses ttl_us)
	micros     string // fmt pattern: a time column as microseconds since 1970
	nullsFirst string
	lock       string // row-locking suffix of a SELECT
	createSQL  string
}

func (d Dialect) parts() (sqlParts, error) {
	switch d {
	case SQLite:
		now := "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"
		return sqlParts{
			now:       now,
			expiredAt: "(" + now + " - ttl_us)",
			micros:    "%s",
			createSQL: `CREATE TABLE IF NOT EXISTS %s (
  dc TEXT NOT NULL,
  shard INTEGER NOT NULL,
  range_begin TEXT NOT NULL,
  range_end TEXT NOT NULL,
  host TEXT NOT NULL DEFAULT '',
  locked_time INTEGER,
  last_ping INTEGER,
  ttl_us INTEGER NOT NULL DEFAULT 0,
  epoch INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (dc, shard)
)`,
		}, nil
	case MySQL:
		return sqlParts{
			now:       "UTC_TIMESTAMP(6)",
			expiredAt: "(UTC_TIMESTAMP(6) - INTERVAL ttl_us MICROSECOND)",
			micros:    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', %s)",
			lock:      " FOR UPDATE SKIP LOCKED",
			createSQL: `CREATE TABLE IF NOT EXISTS %s (
  dc VARCHAR(64) NOT NULL,
  shard INT NOT NULL,
  range_begin VARCHAR(20) NOT NULL,
  range_end VARCHAR(20) NOT NULL,
  host VARCHAR(255) NOT NULL DEFAULT '',
  locked_time DATETIME(6) NULL,
  last_ping DATETIME(6) NULL,
  ttl_us BIGINT NOT NULL DEFAULT 0,
  epoch BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (dc, shard)
) ENGINE=InnoDB`,
		}, nil
	case PostgreSQL:
		return sqlParts{
			now:        "clock_timestamp()",
			expiredAt:  "(clock_timestamp() - ttl_us * interval '1 microsecond')",
			micros:     "(EXTRACT(EPOCH FROM %s) * 1000000)::BIGINT",
			nullsFirst: " NULLS FIRST",
			lock:       " FOR UPDATE SKIP LOCKED",
			createSQL: `CREATE TABLE IF NOT EXISTS %s (
  dc TEXT NOT NULL,
  shard INTEGER NOT NULL,
  range_begin TEXT NOT NULL,
  range_end TEXT NOT NULL,
  host TEXT NOT NULL DEFAULT '',
  locked_time TIMESTAMPTZ,
  last_ping TIMESTAMPTZ,
  ttl_us BIGINT NOT NULL DEFAULT 0,
  epoch BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (dc, shard)
)`,
		}, nil
	}
	return sqlParts{}, fmt.Errorf("%w: SQL dialect %q; use %q, %q or %q", ErrInvalid, string(d), SQLite, MySQL, PostgreSQL)
}

func (d Dialect) queries(table string) (queries, error) {
	p, err := d.parts()
	if err != nil {
		return queries{}, err
	}
	claimable := "(host = ? OR host = '' OR last_ping IS NULL OR last_ping < " + p.expiredAt + ")"
	order := " ORDER BY (host = ?) DESC, last_ping ASC" + p.nullsFirst + ", shard ASC"
	q := queries{
		create: []string{fmt.Sprintf(p.createSQL, table)},
		insert: "INSERT INTO " + table + " (dc, shard, range_begin, range_end) VALUES (?, ?, ?, ?)",
		claim: "UPDATE " + table + " SET host = ?, epoch = epoch + 1, locked_time = " + p.now +
			", last_ping = " + p.now + ", ttl_us = ? WHERE dc = ? AND shard = ? AND epoch = ?",
		getRange: "SELECT range_begin, range_end FROM " + table + " WHERE dc = ? AND shard = ?",
		ping: "UPDATE " + table + " SET last_ping = " + p.now +
			" WHERE dc = ? AND shard = ? AND host = ? AND epoch = ? AND last_ping >= " + p.expiredAt,
		release: "UPDATE " + table + " SET host = '', locked_time = NULL, last_ping = NULL, ttl_us = 0" +
			" WHERE dc = ? AND shard = ? AND host = ? AND epoch = ?",
		list: "SELECT shard, range_begin, range_end, host, epoch, ttl_us, " +
			fmt.Sprintf(p.micros, "locked_time") + ", " + fmt.Sprintf(p.micros, "last_ping") +
			", CASE WHEN host = '' OR last_ping IS NULL OR last_ping < " + p.expiredAt + " THEN 1 ELSE 0 END" +
			" FROM " + table + " WHERE dc = ? ORDER BY shard",
	}
	if d == MySQL {
		q.pickCandidates = "SELECT shard FROM " + table + " WHERE dc = ? AND " + claimable + order
		q.pickOne = "SELECT epoch FROM " + table + " WHERE dc = ? AND shard = ? AND " + claimable + p.lock
	} else {
		q.pick = "SELECT shard, epoch FROM " + table + " WHERE dc = ? AND " + claimable + order + " LIMIT 1" + p.lock
	}
	if d == PostgreSQL {
		for i := range q.create {
			q.create[i] = rebind(q.create[i])
		}
		for _, s := range []*string{&q.insert, &q.pick, &q.claim, &q.getRange, &q.ping, &q.release, &q.list} {
			*s = rebind(*s)
		}
	}
	return q, nil
}

// rebind turns '?' placeholders into PostgreSQL's $1, $2, ...
func rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// isNoTable reports whether err says the lease table does not exist.
func (d Dialect) isNoTable(err error) bool {
	switch d {
	case MySQL:
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 1146
	case PostgreSQL:
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "42P01"
	case SQLite:
		return strings.Contains(err.Error(), "no such table")
	}
	return false
}
