package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

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

// PutMany decides each offer as Put would: created, replaced, left alone
// when unchanged, refused on a version conflict, twice in one call or a
// bad body, the others written with their marks and records.
func TestPutManyDecidesEachOffer(t *testing.T) {
	t.Parallel()
	s := factory(t)(t, 4)(t).(*pgstore.Store)
	if _, err := s.Put(t.Context(), "old", []byte(`{"a":1}`), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "same", []byte(`{"a":1}`), 0); err != nil {
		t.Fatal(err)
	}
	offers := []pgstore.PutOffer{
		{ID: "new", Body: []byte(`{"n":1}`)},
		{ID: "old", Body: []byte(`{"a":2}`), IfVersion: 1},
		{ID: "same", Body: []byte(`{"a":1}`), IfVersion: scheduler.AnyVersion},
		{ID: "conflict", Body: []byte(`{}`), IfVersion: 3},
		{ID: "new", Body: []byte(`{"n":2}`)},
		{ID: "bad", Body: []byte(`[1]`)},
	}
	versions, errs, err := s.PutMany(t.Context(), offers)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		version int64
		err     error
	}{{1, nil}, {2, nil}, {1, nil}, {0, scheduler.ErrConflict}, {0, scheduler.ErrInvalid}, {0, scheduler.ErrInvalid}} {
		if versions[i] != want.version || (want.err == nil) != (errs[i] == nil) || !errors.Is(errs[i], want.err) {
			t.Errorf("offer %d (%s): version %d, %v; want %d, %v", i, offers[i].ID, versions[i], errs[i], want.version, want.err)
		}
	}
	for id, want := range map[string]string{"new": `{"n":1}`, "old": `{"a":2}`, "same": `{"a":1}`, "conflict": "", "bad": ""} {
		o, _, err := s.Load(t.Context(), id, "")
		absent := want == "" && o.Version == 0
		if err != nil || (string(o.Body) != want && !absent) {
			t.Errorf("Load(%s) = %s v%d, %v; want %q", id, o.Body, o.Version, err, want)
		}
	}
	marked := map[string]bool{}
	for sh := range s.Shards() {
		l, err := s.Claim(t.Context(), "r", []int{sh}, time.Minute)
		if err != nil || len(l) != 1 {
			t.Fatalf("Claim(%d) = %v, %v", sh, l, err)
		}
		cs, err := s.Changes(t.Context(), l[0], 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			marked[c.OfferID] = true
		}
	}
	if len(marked) != 3 || !marked["new"] || !marked["old"] || !marked["same"] {
		t.Fatalf("marks of %v, want new, old and same (from its first put)", marked)
	}
	var records int
	if err := s.Pool().QueryRow(t.Context(), "SELECT count(*) FROM "+s.Schema()+".outbox").Scan(&records); err != nil || records != 4 {
		t.Fatalf("outbox rows = %d, %v; want 4 (two first puts, new, old)", records, err)
	}
}
