package rsclient

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// conn answers every call at addr with answers[addr] (nil: served).
type conn struct {
	addr    string
	answers map[string]error
	calls   *[]string
}

func (c *conn) Invoke(_ context.Context, _ string, _, _ any, _ ...grpc.CallOption) error {
	*c.calls = append(*c.calls, c.addr)
	return c.answers[c.addr]
}

func (c *conn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

func notLeader(leader string) error {
	st, _ := status.New(codes.Unavailable, "not the leader").
		WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, LeaderAddress: leader})
	return st.Err()
}

func run(t *testing.T, addrs []string, answers map[string]error) ([]string, error) {
	t.Helper()
	var calls []string
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		if addr == "undialable" {
			return nil, errors.New("bad address")
		}
		return &conn{addr: addr, answers: answers, calls: &calls}, nil
	}
	err := OnLeader(t.Context(), dial, "r1", addrs, func(ctx context.Context, c rspb.BucketServiceClient) error {
		_, err := c.Lookup(ctx, &rspb.LookupRequest{})
		return err
	})
	return calls, err
}

func TestOnLeaderFollowsTheRedirectFirst(t *testing.T) {
	calls, err := run(t, []string{"old", "a", "b"}, map[string]error{"old": notLeader("b"), "a": status.Error(codes.Unavailable, "down")})
	if err != nil || !slices.Equal(calls, []string{"old", "b"}) {
		t.Fatalf("calls %v, err %v: want old, then the leader it named (b), served", calls, err)
	}
}

func TestOnLeaderReturnsARefusalAsItIs(t *testing.T) {
	refusal := status.Error(codes.FailedPrecondition, "not being sent")
	calls, err := run(t, []string{"a", "b"}, map[string]error{"a": refusal})
	if !errors.Is(err, refusal) || !slices.Equal(calls, []string{"a"}) {
		t.Fatalf("calls %v, err %v: want a's refusal as it is, b not asked", calls, err)
	}
}

func TestOnLeaderNamesWhatItTriedWhenNoneServed(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	calls, err := run(t, []string{"a", "undialable", "", "a", "b"}, map[string]error{"a": down, "b": notLeader("a")})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "no leader of replicaset r1 answered (tried [a undialable b])") ||
		!slices.Equal(calls, []string{"a", "b"}) {
		t.Fatalf("calls %v, err %v: want each address once and an Unavailable naming them", calls, err)
	}
	_, err = run(t, nil, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no member with an address") {
		t.Fatalf("no address: %v", err)
	}
}
