package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/pgstore"
	"github.com/shardkit/shardkit/scheduler/storetest"
)

func dsn(t *testing.T) string {
	t.Helper()
	d := os.Getenv("SHARDKIT_TEST_POSTGRES_DSN")
	if d == "" {
		t.Skip("SHARDKIT_TEST_POSTGRES_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
	}
	return d
}

// factory gives every call a schema of its own, dropped when the test
// ends, so that tests (and other packages' tests) never share tables.
func factory(t *testing.T) storetest.Factory {
	t.Helper()
	d := dsn(t)
	return func(t *testing.T, shards int) storetest.Opener {
		t.Helper()
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		schema := "sched_test_" + hex.EncodeToString(b[:])
		first, err := pgstore.Open(t.Context(), d, pgstore.Options{Schema: schema, Shards: shards})
		if err != nil {
			t.Fatalf("Open(%s): %v", schema, err)
		}
		first.Close()
		t.Cleanup(func() { dropSchema(t, d, schema) })
		return func(t *testing.T) scheduler.Store {
			t.Helper()
			s, err := pgstore.Open(t.Context(), d, pgstore.Options{Schema: schema})
			if err != nil {
				t.Fatalf("Open(%s): %v", schema, err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
}

func dropSchema(t *testing.T, dsn, schema string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, factory(t))
}

func TestRunner(t *testing.T) {
	t.Parallel()
	storetest.RunRunner(t, factory(t))
}

// TestConcurrentOpensOfANewSchema: stores opened together on a new schema
// all succeed (they take turns creating it) and agree on its shards.
func TestConcurrentOpensOfANewSchema(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "sched_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { dropSchema(t, d, schema) })
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() {
			s, err := pgstore.Open(t.Context(), d, pgstore.Options{Schema: schema, Shards: 8})
			if err == nil {
				if s.Shards() != 8 {
					err = fmt.Errorf("Shards() = %d, want 8", s.Shards())
				}
				s.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	if _, err := pgstore.Open(t.Context(), d, pgstore.Options{Schema: schema, Shards: 4}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Open with another shard count = %v, want ErrInvalid", err)
	}
	if _, err := pgstore.Open(t.Context(), d, pgstore.Options{Schema: "Bad-Name"}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Open with a bad schema name = %v, want ErrInvalid", err)
	}
}
