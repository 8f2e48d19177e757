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

// With Config.Attempts left zero, a call with a deadline is tried until
// its deadline: a leader election (NOT_LEADER naming no leader) longer
// than DefaultAttempts tries does not fail it. A call without a deadline
// still gives up after DefaultAttempts.
func TestACallWithADeadlineIsTriedUntilIt(t *testing.T) {
	f := &fakeData{noMulti: true}
	var n atomic.Int64
	election := int64(DefaultAttempts + 4)
	f.write = func(_ context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		if n.Add(1) <= election {
			st, _ := status.New(codes.Unavailable, "no leader yet").WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, ReplicasetId: "r1"})
			return nil, st.Err()
		}
		return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 1}}}, nil
	}
	serveData(t, f)
	c := newPipeClient(t, Config{RetryBackoff: time.Millisecond, DisablePipelining: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")}); err != nil {
		t.Fatalf("a write through an election of %d refusals, with a deadline: %v", election, err)
	}
	if got := n.Load(); got != election+1 {
		t.Fatalf("%d tries, want %d", got, election+1)
	}

	n.Store(0)
	_, err := c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")})
	if err == nil || !strings.Contains(err.Error(), "gave up after 8 attempts") || n.Load() != DefaultAttempts {
		t.Fatalf("without a deadline: %v after %d tries, want a refusal after %d", err, n.Load(), DefaultAttempts)
	}
}

// twoMembers routes rs1 to a leader that does not answer (dead) and a
// member that serves (f).
type twoMembers struct {
	*fakeData
	dead string
}

func (m *twoMembers) GetRouting(ctx context.Context, req *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	r, _ := m.fakeData.GetRouting(ctx, req)
	r.Replicasets[0].LeaderAddress = m.dead
	r.Replicasets[0].Members = []*datav1.Member{{InstanceId: "i0", Address: m.dead}, {InstanceId: "i1", Address: m.addr}}
	return r, nil
}

// A leader the routing table names that cannot be reached is asked once,
// not again and again: the calls after it go to another member, also
// after the table is read again and still names the dead leader.
func TestADeadLeaderIsAskedOnceThenPassedOver(t *testing.T) {
	dead := &fakeData{noMulti: true}
	dead.write = func(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		return nil, status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp: connect: connection refused\"")
	}
	serveData(t, dead)
	live := &fakeData{noMulti: true}
	serveAs(t, live, &twoMembers{fakeData: live, dead: dead.addr})
	c := newPipeClient(t, Config{RetryBackoff: time.Millisecond, DisablePipelining: true}, live.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range uint64(5) {
		if i == 3 {
			if _, err := c.refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(i), tuple.String("v")}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if n := dead.unaryWrites.Load(); n != 1 {
		t.Fatalf("the dead leader was asked %d times, want once", n)
	}
	if n := live.unaryWrites.Load(); n != 5 {
		t.Fatalf("the live member served %d writes, want 5", n)
	}
}
