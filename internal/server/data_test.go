package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

func dataClient(t *testing.T, addr string) datav1.DataServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return datav1.NewDataServiceClient(conn)
}

// poll retries f until it succeeds or the deadline passes.
func pollOK(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A one-instance cluster stores a row: create a space, insert, read it
// back, and see the seed's refusals.
func TestOneInstanceStoresARow(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	c := dataClient(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	_, err := c.CreateSpace(ctx, &datav1.CreateSpaceRequest{Space: &datav1.Space{
		Name:       "kv",
		Format:     []*datav1.Field{{Name: "k", Type: "string"}, {Name: "v", Type: "bytes"}},
		PrimaryKey: []uint32{1},
	}})
	if err != nil {
		t.Fatalf("CreateSpace: %v", err)
	}
	row := tuple.AppendTuple(nil, tuple.Tuple{tuple.String("hello"), tuple.Bytes([]byte("world"))})
	var resp *datav1.WriteResponse
	pollOK(t, "the first insert (the buckets are bootstrapped)", func() error {
		var err error
		resp, err = c.Write(ctx, &datav1.WriteRequest{Ops: []*datav1.Op{{Kind: datav1.OpKind_OP_KIND_INSERT, Space: "kv", Tuple: row}}})
		if status.Code(err) == codes.AlreadyExists {
			return nil // an earlier attempt did it
		}
		return err
	})
	key := tuple.AppendTuple(nil, tuple.Tuple{tuple.String("hello")})
	got, err := c.Get(ctx, &datav1.GetRequest{Space: "kv", Key: key})
	if err != nil || !got.GetFound() || string(got.GetTuple()) != string(row) || !got.GetInfo().GetLeader() {
		t.Fatalf("Get = %v, %v", got, err)
	}
	_ = resp
	_, err = c.Write(ctx, &datav1.WriteRequest{Ops: []*datav1.Op{{Kind: datav1.OpKind_OP_KIND_INSERT, Space: "kv", Tuple: row}}})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second insert: %v, want AlreadyExists", err)
	}
	_, err = c.Write(ctx, &datav1.WriteRequest{Ops: []*datav1.Op{{Kind: datav1.OpKind_OP_KIND_INSERT, Space: "nope", Tuple: row}}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an insert into a missing space: %v, want NotFound", err)
	}
	cnt, err := c.Call(ctx, &datav1.CallRequest{Procedure: "count", Args: tuple.AppendTuple(nil, tuple.Tuple{tuple.String("kv")})})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := tuple.DecodeTuple(cnt.GetResult()); len(n) != 1 || !n[0].Equal(tuple.Uint(1)) {
		t.Fatalf("count = %v", n)
	}
	_, err = c.DropSpace(ctx, &datav1.DropSpaceRequest{Name: "kv"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("dropping a space with a tuple: %v, want FailedPrecondition", err)
	}
	if d, err := c.DropSpace(ctx, &datav1.DropSpaceRequest{Name: "kv", Force: true}); err != nil || d.GetTuples() != 1 {
		t.Fatalf("forced drop: %v, %v", d, err)
	}
}
