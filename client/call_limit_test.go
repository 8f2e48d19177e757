package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// bigAnswers answers every Call and MapCall with 5 MB, more than gRPC's
// 4 MiB a client receives, and counts them.
type bigAnswers struct {
	*fakeData
	calls atomic.Int64
}

func (b *bigAnswers) Call(context.Context, *datav1.CallRequest) (*datav1.CallResponse, error) {
	b.calls.Add(1)
	return &datav1.CallResponse{Result: make([]byte, 5<<20)}, nil
}

func (b *bigAnswers) MapCall(context.Context, *datav1.MapCallRequest) (*datav1.MapCallResponse, error) {
	b.calls.Add(1)
	return &datav1.MapCallResponse{Results: []*datav1.ReplicasetResult{{ReplicasetId: "r1", Result: make([]byte, 5<<20)}}}, nil
}

// Arguments larger than an instance takes are refused before anything is
// sent, naming the limit, as invalid (the CLI exits 2): no retry changes
// them.
func TestOversizedCallArgumentsAreRefusedBeforeSending(t *testing.T) {
	f := &fakeData{}
	b := &bigAnswers{fakeData: f}
	serveAs(t, f, b)
	c := newPipeClient(t, Config{}, f.addr)
	args := tuple.Tuple{tuple.String(strings.Repeat("x", 5<<20))}
	_, err := c.Call(t.Context(), "echo", args, CallOptions{})
	_, merr := c.MapCall(t.Context(), "echo", args, RW)
	for _, err := range []error{err, merr} {
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || e.Retryable ||
			!strings.Contains(e.Msg, "the arguments: a tuple of 5242886 bytes is more than 1048576") {
			t.Errorf("5 MB of arguments: %v, want an invalid refusal naming the size and the limit", err)
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the instance, want none", n)
	}
}

// gRPC's refusal of a message larger than its limit (here the answer) is
// not retried: the same call meets it again. Config.Attempts is 8.
func TestAMessageOverGRPCsLimitIsNotRetried(t *testing.T) {
	f := &fakeData{}
	b := &bigAnswers{fakeData: f}
	serveAs(t, f, b)
	c := newPipeClient(t, Config{Attempts: 8}, f.addr)
	_, err := c.Call(t.Context(), "echo", tuple.Tuple{tuple.String("x")}, CallOptions{})
	if !errors.Is(err, ErrInvalid) || IsRetryable(err) || !strings.Contains(err.Error(), "larger than gRPC carries: grpc: received message larger than max") {
		t.Fatalf("an answer over gRPC's limit: %v, want an invalid refusal that names it", err)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("call tried %d times, want once", n)
	}
	_, err = c.MapCall(t.Context(), "echo", tuple.Tuple{tuple.String("x")}, RO)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("a map-call answer over gRPC's limit: %v, want invalid", err)
	}
	if n := b.calls.Load(); n != 2 {
		t.Fatalf("map-call tried %d times, want once", n-1)
	}
}
