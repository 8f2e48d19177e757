package lease_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/cache/lease/leasetest"
)

// sqlFactory opens a new store on the same database for every call.
func sqlFactory(driver, dsn string) leasetest.Factory {
	return func(t *testing.T) lease.Store {
		t.Helper()
		s, err := lease.OpenSQL(driver, dsn, lease.SQLOptions{})
		if err != nil {
			t.Fatalf("OpenSQL(%s): %v", driver, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, sqlFactory("sqlite", filepath.Join(t.TempDir(), "leases.db")))
}

func TestMySQLConformance(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("SHARDKIT_TEST_MYSQL_DSN")
	if dsn == "" {
		t.Skip("SHARDKIT_TEST_MYSQL_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
	}
	leasetest.Run(t, sqlFactory("mysql", dsn))
}

func TestPostgreSQLConformance(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("SHARDKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("SHARDKIT_TEST_POSTGRES_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
	}
	leasetest.Run(t, sqlFactory("postgres", dsn))
}

// TestOpenExistingRefusesAMissingSQLiteFile: a lease user's open does not
// create an empty database where init-leases made none.
func TestOpenExistingRefusesAMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nosuch.db")
	for _, dsn := range []string{missing, "file:" + missing + "?_busy_timeout=100"} {
		if _, err := lease.OpenExisting("sqlite", dsn, ""); !errors.Is(err, lease.ErrNotInitialized) || !strings.Contains(err.Error(), "shardkit cache init-leases") {
			t.Errorf("OpenExisting(%q) = %v, want ErrNotInitialized naming init-leases", dsn, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenExisting created %s: %v", missing, err)
	}
	made, err := lease.Open("sqlite", missing, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := made.Init(t.Context(), "dc1", []lease.Range{{Begin: 0, End: 0}}); err != nil {
		t.Fatal(err)
	}
	made.Close()
	s, err := lease.OpenExisting("sqlite", missing, "")
	if err != nil {
		t.Fatalf("OpenExisting of an initialised database: %v", err)
	}
	defer s.Close()
	if rows, err := s.Rows(t.Context(), "dc1"); err != nil || len(rows) != 1 {
		t.Fatalf("Rows = %v, %v", rows, err)
	}
}

// Stores of one new SQLite file made and initialised at once (the servers
// of a dc starting together) all succeed: the table is created in an
// immediate transaction, which waits for the other writers, where a
// plain CREATE TABLE could fail at once with SQLITE_BUSY when another
// connection wrote between its read and its write.
func TestConcurrentInitsOfOneSQLiteFileSucceed(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		dsn := filepath.Join(t.TempDir(), fmt.Sprintf("leases-%d.db", round))
		const n = 8
		stores := make([]lease.Store, n)
		for i := range stores {
			stores[i] = sqlFactory("sqlite", dsn)(t)
		}
		errs := make(chan error, n)
		for _, s := range stores {
			go func() { errs <- s.Init(t.Context(), "dc1", []lease.Range{{Begin: 0, End: 0}}) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: Init: %v", round, err)
			}
		}
	}
}
