package lease

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers driver "pgx"
	_ "modernc.org/sqlite"             // registers driver "sqlite"
)

// Drivers lists the driver names Open accepts.
func Drivers() []string { return []string{"sqlite", "mysql", "postgres", "shardkit"} }

// Open opens a lease store by driver name: "sqlite", "mysql" and
// "postgres" go to OpenSQL (table is the table name); "shardkit" dials the
// cluster instance at dsn (host:port) and uses its leases (table is the
// namespace of the lease names). An empty table takes the default.
func Open(driver, dsn, table string) (Store, error) {
	switch driver {
	case "shardkit":
		return OpenCluster(dsn, ClusterOptions{Namespace: table})
	case "sqlite", "mysql", "postgres", "postgresql", "pgx":
		return OpenSQL(driver, dsn, SQLOptions{Table: table})
	}
	return nil, fmt.Errorf("%w: driver %q; use one of %s", ErrInvalid, driver, strings.Join(Drivers(), ", "))
}

// OpenExisting is Open for a lease user (a server claiming shards), which
// must not create what init-leases creates: for SQLite, a database file
// that does not exist is refused with ErrNotInitialized instead of being
// created empty. Whether the table holds the datacenter's shards is for
// Rows to say (ErrNotInitialized again).
func OpenExisting(driver, dsn, table string) (Store, error) {
	if driver == "sqlite" {
		if path, ok := sqliteFile(dsn); ok {
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%w: the SQLite lease database %s does not exist; create it and its shards with `shardkit cache init-leases --driver sqlite --dsn %s --dc DC --shards N` (or --ranges FILE)",
					ErrNotInitialized, path, dsn)
			}
		}
	}
	return Open(driver, dsn, table)
}

// sqliteFile is the file a modernc.org/sqlite DSN names; false for an
// in-memory database.
func sqliteFile(dsn string) (string, bool) {
	base, _, _ := strings.Cut(dsn, "?")
	base = strings.TrimPrefix(base, "file:")
	if base == "" || strings.Contains(base, ":memory:") {
		return "", false
	}
	return base, true
}

// OpenSQL opens a lease store on database/sql.
//
//   - driver "sqlite": dsn is a file name or a "file:" URI of modernc.org/sqlite.
//     OpenSQL adds a 10 s busy timeout, WAL journal, synchronous=NORMAL and
//     immediate transactions unless the DSN already sets them.
//   - driver "mysql": a github.com/go-sql-driver/mysql DSN
//     (user:pass@tcp(host:3306)/db). OpenSQL sets clientFoundRows, parseTime
//     and the UTC location.
//   - driver "postgres" (or "pgx"): a pgx URL or keyword/value DSN.
//
// The store owns the opened *sql.DB and closes it on Close.
func OpenSQL(driver, dsn string, opts SQLOptions) (*SQLStore, error) {
	var (
		dialect  Dialect
		sqlName  string
		finalDSN string
		err      error
	)
	switch driver {
	case "sqlite":
		dialect, sqlName = SQLite, "sqlite"
		finalDSN, err = sqliteDSN(dsn)
	case "mysql":
		dialect, sqlName = MySQL, "mysql"
		finalDSN, err = mysqlDSN(dsn)
	case "postgres", "postgresql", "pgx":
		dialect, sqlName, finalDSN = PostgreSQL, "pgx", dsn
	default:
		return nil, fmt.Errorf("%w: SQL driver %q; use one of sqlite, mysql, postgres", ErrInvalid, driver)
	}
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(sqlName, finalDSN)
	if err != nil {
		return nil, fmt.Errorf("lease: open %s database: %w", driver, err)
	}
	if dialect == SQLite {
		// One connection per process is plenty for a lease table and keeps
		// this process from queueing on its own write lock.
		db.SetMaxOpenConns(1)
	} else {
		db.SetMaxOpenConns(4)
		db.SetConnMaxIdleTime(time.Minute)
	}
	s, err := NewSQLStore(db, dialect, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}

// SQLiteDSN adds the connection options the lease store needs to a
// modernc.org/sqlite DSN; callers that open their own *sql.DB use it too.
func SQLiteDSN(dsn string) (string, error) { return sqliteDSN(dsn) }

func sqliteDSN(dsn string) (string, error) {
	if dsn == "" {
		return "", fmt.Errorf("%w: empty SQLite DSN; give a file name such as ./leases.db", ErrInvalid)
	}
	base, query, _ := strings.Cut(dsn, "?")
	vals, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("%w: SQLite DSN %q has a bad query string: %w", ErrInvalid, dsn, err)
	}
	if !hasAny(vals, "_busy_timeout", "_timeout") && !hasPragma(vals, "busy_timeout") {
		vals.Set("_busy_timeout", "10000")
	}
	if !hasAny(vals, "_journal_mode", "_journal") && !hasPragma(vals, "journal_mode") && !strings.Contains(base, ":memory:") {
		vals.Set("_journal_mode", "WAL")
	}
	if !hasAny(vals, "_txlock") {
		vals.Set("_txlock", "immediate")
	}
	if !hasAny(vals, "_synchronous", "_sync") && !hasPragma(vals, "synchronous") {
		// In WAL mode NORMAL does not fsync on commit, which keeps the
		// write lock held for microseconds: a holder frozen (SIGSTOP) in
		// the middle of a ping is then unlikely to hold it. Safe against
		// process crashes; a power loss may drop the last commits, and
		// kills every holder on this host with them.
		vals.Set("_synchronous", "NORMAL")
	}
	return base + "?" + vals.Encode(), nil
}

func hasAny(vals url.Values, keys ...string) bool {
	for _, k := range keys {
		if _, ok := vals[k]; ok {
			return true
		}
	}
	return false
}

func hasPragma(vals url.Values, name string) bool {
	for _, p := range vals["_pragma"] {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(p)), name) {
			return true
		}
	}
	return false
}

func mysqlDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("%w: MySQL DSN: %w; want user:password@tcp(host:3306)/database", ErrInvalid, err)
	}
	cfg.ClientFoundRows = true
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg.FormatDSN(), nil
}
