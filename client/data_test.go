package client_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

func dataClient(t *testing.T, opts ...grpc.DialOption) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), client.Config{Peers: []string{clusterAddr}, DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// space creates a space of offers (shop, offer) -> price, sharded by shop,
// named after the test.
func offersSpace(t *testing.T, c *client.Client, name string) *client.Space {
	t.Helper()
	_, err := c.CreateSpace(t.Context(), client.SpaceDef{
		Name: name,
		Format: tuple.Format{
			{Name: "shop", Type: tuple.TypeUnsigned}, {Name: "offer", Type: tuple.TypeString}, {Name: "price", Type: tuple.TypeDouble, Nullable: true},
		},
		PrimaryKey:  []string{"shop", "offer"},
		ShardingKey: []string{"shop"},
	}, false)
	if err != nil {
		t.Fatalf("CreateSpace %s: %v", name, err)
	}
	return c.Space(name)
}

func offer(shop uint64, id string, price float64) tuple.Tuple {
	return tuple.Tuple{tuple.Uint(shop), tuple.String(id), tuple.Double(price)}
}

func key(shop uint64, id string) []tuple.Value {
	return []tuple.Value{tuple.Uint(shop), tuple.String(id)}
}

func TestCRUDWithTheSeedsAnswers(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "crud_offers")

	ins, err := s.Insert(ctx, offer(1, "a", 10))
	if err != nil || ins.Found || !ins.Tuple.Equal(offer(1, "a", 10)) || ins.Version == 0 {
		t.Fatalf("Insert = %+v, %v", ins, err)
	}
	_, err = s.Insert(ctx, offer(1, "a", 11))
	if !errors.Is(err, client.ErrAlreadyExists) || !strings.Contains(err.Error(), `duplicate key [1,"a"] in space crud_offers`) {
		t.Fatalf("duplicate Insert: %v", err)
	}
	got, info, err := s.Select(ctx, key(1, "a"), client.RW)
	if err != nil || !got.Found || got.Version != ins.Version || !info.Leader {
		t.Fatalf("Select = %+v %+v, %v", got, info, err)
	}
	if miss, _, err := s.Select(ctx, key(1, "zz"), client.RO); err != nil || miss.Found {
		t.Fatalf("Select of a missing key = %+v, %v", miss, err)
	}
	up, err := s.Update(ctx, key(1, "a"), []tuple.Op{{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(0.5)}})
	if err != nil || !up.Tuple.Equal(offer(1, "a", 10.5)) || up.Version <= ins.Version {
		t.Fatalf("Update = %+v, %v", up, err)
	}
	// Compare-and-set: a stale version is refused and says the real one.
	_, err = s.Replace(ctx, offer(1, "a", 99), client.IfVersion(ins.Version))
	var ce *client.Error
	if !errors.Is(err, client.ErrConditionFailed) || !errors.As(err, &ce) || ce.ActualVersion != up.Version {
		t.Fatalf("stale CAS: %v (actual version %d), want ErrConditionFailed naming %d", err, ce.ActualVersion, up.Version)
	}
	if _, err := s.Replace(ctx, offer(1, "a", 99), client.IfVersion(up.Version)); err != nil {
		t.Fatalf("CAS at the current version: %v", err)
	}
	ups, err := s.Upsert(ctx, offer(1, "b", 1), []tuple.Op{{Code: tuple.OpAdd, Field: tuple.FieldRef{Number: 3}, Arg: tuple.Double(1)}})
	if err != nil || ups.Found || !ups.Tuple.Equal(offer(1, "b", 1)) {
		t.Fatalf("Upsert (insert) = %+v, %v", ups, err)
	}
	del, err := s.Delete(ctx, key(1, "a"))
	if err != nil || !del.Found || !del.Tuple.Equal(offer(1, "a", 99)) {
		t.Fatalf("Delete = %+v, %v", del, err)
	}
	if n, err := c.Count(ctx, "crud_offers"); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v, want 1", n, err)
	}
	// Refusals name what was wrong.
	_, err = s.Insert(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("c"), tuple.String("cheap")})
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "field 3 (price): expected double") {
		t.Fatalf("a tuple of the wrong type: %v", err)
	}
	if _, err := c.Space("no_such_space").Insert(ctx, offer(1, "a", 1)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a missing space: %v", err)
	}
	if _, err := c.DropSpace(ctx, "crud_offers", false); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "holds 1 tuple;") {
		t.Fatalf("dropping a space with a tuple: %v", err)
	}
}

func TestABatchAcrossSpacesIsAtomic(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	offersSpace(t, c, "batch_offers")
	offersSpace(t, c, "batch_states")
	// Same sharding key (shop 7): one bucket, one atomic batch.
	res, err := c.Batch().Insert("batch_offers", offer(7, "x", 1)).Insert("batch_states", offer(7, "x", 0)).Do(ctx)
	if err != nil || len(res) != 2 {
		t.Fatalf("batch = %v, %v", res, err)
	}
	// The second op refuses: neither is applied.
	_, err = c.Batch().Insert("batch_offers", offer(7, "y", 1)).Insert("batch_states", offer(7, "x", 0)).Do(ctx)
	var ce *client.Error
	if !errors.Is(err, client.ErrAlreadyExists) || !errors.As(err, &ce) || ce.OpIndex != 2 {
		t.Fatalf("refused batch: %v (op %d), want ErrAlreadyExists on op 2", err, ce.OpIndex)
	}
	if r, _, _ := c.Space("batch_offers").Select(ctx, key(7, "y"), client.RW); r.Found {
		t.Fatal("the refused batch's first op was applied")
	}
	// Two sharding keys are two buckets: refused before sending.
	_, err = c.Batch().Insert("batch_offers", offer(7, "z", 1)).Insert("batch_offers", offer(8, "z", 1)).Do(ctx)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "a batch writes one bucket") {
		t.Fatalf("a batch over two buckets: %v", err)
	}
}

// A write whose answer is lost is retried with the same request id: it is
// applied once, and the retry gets the first answer. As a unary call (the
// answer lost past its deadline) and on the data stream (the stream broken
// by the answer).
func TestARetriedWriteIsAppliedOnce(t *testing.T) {
	t.Run("unary", func(t *testing.T) {
		var dropped atomic.Int32
		drop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && strings.HasSuffix(method, "/Write") && dropped.Add(1) == 1 {
				return status.Error(codes.DeadlineExceeded, "injected: the answer was lost")
			}
			return err
		}
		c, err := client.New(t.Context(), client.Config{Peers: []string{clusterAddr}, DisableStream: true,
			DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(drop)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		insertOnce(t, c, "retry_offers", func() int32 { return dropped.Load() })
	})
	t.Run("stream", func(t *testing.T) {
		var writes atomic.Int32
		breakAtWrite := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/Stream") {
				return s, err
			}
			return &lossyStream{ClientStream: s, writes: &writes}, nil
		}
		c, err := client.New(t.Context(), client.Config{Peers: []string{clusterAddr},
			DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(breakAtWrite)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		insertOnce(t, c, "retry_stream_offers", func() int32 { return writes.Load() })
	})
}

// lossyStream is a data stream that breaks at the first answer to a
// write it receives, as a connection lost after the instance applied it.
type lossyStream struct {
	grpc.ClientStream
	writes *atomic.Int32
}

func (s *lossyStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if resp, ok := m.(*datav1.StreamResponse); ok {
		for _, r := range resp.GetReplies() {
			if r.GetResult().GetWrite() != nil && s.writes.Add(1) == 1 {
				return status.Error(codes.Unavailable, "injected: the stream broke with the answer")
			}
		}
	}
	return nil
}

// insertOnce inserts one row whose first answer sent() says is lost, and
// checks it was applied once and the retry got the first answer.
func insertOnce(t *testing.T, c *client.Client, space string, sent func() int32) {
	t.Helper()
	s := offersSpace(t, c, space)
	r, err := s.Insert(t.Context(), offer(3, "once", 1))
	if err != nil {
		t.Fatalf("an insert whose first answer was lost: %v (a retry that applied it again would be a duplicate key)", err)
	}
	if sent() < 2 || !r.Tuple.Equal(offer(3, "once", 1)) {
		t.Fatalf("writes answered %d, result %+v", sent(), r)
	}
	if n, err := c.Count(t.Context(), space); err != nil || n != 1 {
		t.Fatalf("count %d, %v, want 1", n, err)
	}
}

func TestRangeAndMapCall(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "range_offers")
	for _, id := range []string{"d", "b", "a", "c"} {
		if _, err := s.Insert(ctx, offer(42, id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.Bucket(ctx, tuple.Uint(42), tuple.String("a"))
	if err != nil {
		t.Fatal(err)
	}
	page, more, err := s.Range(ctx, client.RangeOptions{Bucket: b, Limit: 3})
	if err != nil || !more || len(page) != 3 {
		t.Fatalf("Range = %d tuples, more %v, %v", len(page), more, err)
	}
	rest, more, err := s.Range(ctx, client.RangeOptions{Bucket: b, After: page[2].Tuple[:2], Limit: 3, Mode: client.RO})
	if err != nil || more || len(rest) != 1 {
		t.Fatalf("Range after = %d, more %v, %v", len(rest), more, err)
	}
	if id, _ := rest[0].Tuple[1].AsString(); id != "d" {
		t.Fatalf("last tuple %v, want d", rest[0].Tuple)
	}
	res, err := c.MapCall(ctx, "echo", tuple.Tuple{tuple.String("hi")}, client.RO)
	if err != nil || len(res) != 1 || !res[0].Result.Equal(tuple.Tuple{tuple.String("hi")}) {
		t.Fatalf("MapCall echo = %+v, %v", res, err)
	}
	if _, err := c.Call(ctx, "no_such_proc", nil, client.CallOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unknown procedure: %v", err)
	}
}

func TestSpacesAreListedAndDropped(t *testing.T) {
	c := dataClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	offersSpace(t, c, "listed_offers")
	defs, err := c.Spaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *client.SpaceDef
	for i := range defs {
		if defs[i].Name == "listed_offers" {
			found = &defs[i]
		}
	}
	if found == nil || strings.Join(found.PrimaryKey, ",") != "shop,offer" || !slices.Equal(found.ShardingKey, []string{"shop"}) || found.Format[2].Nullable != true {
		t.Fatalf("listed %+v", found)
	}
	if _, err := c.CreateSpace(ctx, client.SpaceDef{Name: "listed_offers", Format: found.Format, PrimaryKey: found.PrimaryKey, ShardingKey: []string{"shop"}}, true); err != nil {
		t.Fatalf("if-not-exists of the same space: %v", err)
	}
	if n, err := c.DropSpace(ctx, "listed_offers", false); err != nil || n != 0 {
		t.Fatalf("DropSpace of an empty space = %d, %v", n, err)
	}
	if _, err := c.Space("listed_offers").Insert(ctx, offer(1, "a", 1)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an insert into a dropped space: %v", err)
	}
}

// A sharding key chosen among the primary key's fields: a queue keyed
// (stage, due_at, entity_id) and sharded by entity_id shares its entity's
// bucket, so one batch writes both, and the queue's rows stay in key
// order within the bucket.
func TestAShardingKeyChosenAmongTheKeysFields(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	if _, err := c.CreateSpace(ctx, client.SpaceDef{
		Name:       "sk_entities",
		Format:     tuple.Format{{Name: "id", Type: tuple.TypeString}, {Name: "body", Type: tuple.TypeString}},
		PrimaryKey: []string{"id"},
	}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSpace(ctx, client.SpaceDef{
		Name:        "sk_queue",
		Format:      tuple.Format{{Name: "stage", Type: tuple.TypeString}, {Name: "due_at", Type: tuple.TypeUnsigned}, {Name: "entity_id", Type: tuple.TypeString}},
		PrimaryKey:  []string{"stage", "due_at", "entity_id"},
		ShardingKey: []string{"entity_id"},
	}, false); err != nil {
		t.Fatal(err)
	}
	defs, err := c.Spaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == "sk_queue" && !slices.Equal(d.ShardingKey, []string{"entity_id"}) {
			t.Fatalf("sk_queue is listed with sharding key %q", d.ShardingKey)
		}
	}
	for _, row := range []struct {
		stage string
		due   uint64
	}{{"price", 30}, {"photos", 20}, {"price", 10}} {
		if _, err := c.Batch().
			Replace("sk_entities", tuple.Tuple{tuple.String("e42"), tuple.String("v")}).
			Insert("sk_queue", tuple.Tuple{tuple.String(row.stage), tuple.Uint(row.due), tuple.String("e42")}).
			Do(ctx); err != nil {
			t.Fatalf("a batch of an entity and its queue row (%s, %d): %v", row.stage, row.due, err)
		}
	}
	eb, err := c.Space("sk_entities").Bucket(ctx, tuple.String("e42"))
	if err != nil {
		t.Fatal(err)
	}
	qb, err := c.Space("sk_queue").Bucket(ctx, tuple.String("zzz"), tuple.Uint(99), tuple.String("e42"))
	if err != nil || qb != eb {
		t.Fatalf("a queue row of e42 is in bucket %d (%v), the entity in %d", qb, err, eb)
	}
	rows, _, err := c.Space("sk_queue").Range(ctx, client.RangeOptions{Bucket: eb, Limit: 10})
	if err != nil || len(rows) != 3 {
		t.Fatalf("the bucket's queue rows: %v, %v", rows, err)
	}
	want := []string{"photos/20", "price/10", "price/30"}
	for i, r := range rows {
		stage, _ := r.Tuple[0].AsString()
		due, _ := r.Tuple[1].AsUint()
		if got := stage + "/" + strconv.FormatUint(due, 10); got != want[i] {
			t.Fatalf("row %d is %s, want %s (key order within the bucket)", i, got, want[i])
		}
	}
	// The instance computes the same bucket when the caller sends none.
	conn, err := c.Conn(clusterAddr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := datav1.NewDataServiceClient(conn).Get(ctx, &datav1.GetRequest{Space: "sk_queue", Mode: datav1.Mode_MODE_RW,
		Key: tuple.AppendTuple(nil, tuple.Tuple{tuple.String("price"), tuple.Uint(10), tuple.String("e42")})})
	if err != nil || !resp.GetFound() {
		t.Fatalf("a get routed by the instance: %v, %v", resp, err)
	}
}

// A fenced batch of an older holder is refused whole once a newer holder
// wrote through the fence, however late it comes; the newer holder's
// batches go on.
func TestAFencedBatchOfAnOlderHolderIsRefused(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	for _, d := range []client.SpaceDef{
		{Name: "fence_fences", Format: tuple.Format{{Name: "shard", Type: tuple.TypeString}, {Name: "ticket", Type: tuple.TypeUnsigned}}, PrimaryKey: []string{"shard"}},
		{Name: "fence_data", Format: tuple.Format{{Name: "shard", Type: tuple.TypeString}, {Name: "k", Type: tuple.TypeString}, {Name: "v", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"shard", "k"}, ShardingKey: []string{"shard"}},
	} {
		if _, err := c.CreateSpace(ctx, d, false); err != nil {
			t.Fatal(err)
		}
	}
	shard := []tuple.Value{tuple.String("s1")}
	if _, err := c.Space("fence_fences").Insert(ctx, tuple.Tuple{tuple.String("s1"), tuple.Uint(0)}); err != nil {
		t.Fatal(err)
	}
	write := func(ticket, v uint64) error {
		_, err := c.Batch().
			Fence(client.Fence{Space: "fence_fences", Key: shard, Field: "ticket", Ticket: ticket}).
			Replace("fence_data", tuple.Tuple{tuple.String("s1"), tuple.String("x"), tuple.Uint(v)}).
			Do(ctx)
		return err
	}
	if err := write(1, 10); err != nil { // A, ticket 1
		t.Fatalf("the first holder's write: %v", err)
	}
	if err := write(2, 20); err != nil { // B takes over with ticket 2
		t.Fatalf("the second holder's write: %v", err)
	}
	err := write(1, 11) // A again, paused past its lease
	var ce *client.Error
	if !errors.Is(err, client.ErrConditionFailed) || !errors.As(err, &ce) || ce.OpIndex != 1 {
		t.Fatalf("the older holder's write after the newer one's: %v, want ErrConditionFailed on op 1", err)
	}
	if got, _ := ce.ActualValue.AsUint(); got != 2 {
		t.Fatalf("the refusal names ticket %v, want 2", ce.ActualValue)
	}
	if err := write(2, 21); err != nil {
		t.Fatalf("the newer holder's next write: %v", err)
	}
	r, _, err := c.Space("fence_data").Select(ctx, []tuple.Value{tuple.String("s1"), tuple.String("x")}, client.RW)
	if err != nil || !r.Found {
		t.Fatal(r, err)
	}
	if v, _ := r.Tuple[2].AsUint(); v != 21 {
		t.Fatalf("the data holds %d, want 21 (the older holder's 11 refused)", v)
	}
	f, _, _ := c.Space("fence_fences").Select(ctx, shard, client.RW)
	if tk, _ := f.Tuple[1].AsUint(); tk != 2 {
		t.Fatalf("the fence holds ticket %d, want 2", tk)
	}
}
