package lease_test

import (
	"os"
	"path/filepath"
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
