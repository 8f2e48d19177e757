package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// A write whose connection broke after sending and whose retry failed
// otherwise ends with the texts docs/data.md documents: "the write's
// outcome is unknown (<the first attempt's account>); the retries did not
// learn it: <the retry's error>", the first attempt's peer named.
func TestAnUnknownOutcomeSaysSoInTheDocumentedWords(t *testing.T) {
	f := &fakeData{noMulti: true}
	var n atomic.Int64
	f.write = func(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		if n.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		return nil, status.Error(codes.PermissionDenied, "no")
	}
	serveData(t, f)
	c := newPipeClient(t, Config{RetryBackoff: time.Millisecond, DisablePipelining: true}, f.addr)
	_, err := c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrOutcomeUnknown) || e.Peer != f.addr {
		t.Fatalf("%v: want ErrOutcomeUnknown from peer %s", err, f.addr)
	}
	want := "the write's outcome is unknown (error reading from server: EOF); the retries did not learn it: "
	if !strings.HasPrefix(e.Msg, want) || !strings.HasSuffix(e.Msg, "peer "+f.addr+": no") {
		t.Fatalf("message %q, want %q then the retry's error", e.Msg, want)
	}

	// Every attempt broken: the write's outcome is unknown, said once.
	g := &fakeData{noMulti: true}
	g.write = func(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
	}
	serveData(t, g)
	c = newPipeClient(t, Config{Attempts: 2, RetryBackoff: time.Millisecond, DisablePipelining: true}, g.addr)
	_, err = c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")})
	if !errors.As(err, &e) || !strings.HasPrefix(e.Msg, "the write's outcome is unknown (error reading from server: EOF") ||
		strings.Count(e.Msg, "outcome is unknown") != 1 {
		t.Fatalf("every attempt broken: %v, want one \"the write's outcome is unknown (...)\"", err)
	}

	// A replicaset's own account is not said twice.
	first := &Error{Op: "insert", Peer: "a", Msg: "the write's outcome is unknown (x); retrying it with the same request id on this replicaset is safe"}
	if got := outcomeUnknownAfter(true, first, first).Msg; got != first.Msg {
		t.Fatalf("a replicaset's own account became %q", got)
	}
}
