package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/router"
)

// A peer that ran out of its share of --timeout is named with the time it
// had, not with all of --timeout ("did not answer within 10s: did not
// answer within 2s").
func TestCallErrorNamesTheTimeAPeerHad(t *testing.T) {
	for _, tt := range []struct {
		msg, want string
	}{
		{"did not answer within 2s", "peer 127.0.0.1:3301 did not answer within 2s (--timeout 10s)"},
		{"context deadline exceeded", "peer 127.0.0.1:3301 did not answer within 10s: context deadline exceeded"},
	} {
		err := callError(10*time.Second, &client.Error{Op: "status", Peer: "127.0.0.1:3301", Code: codes.DeadlineExceeded, Msg: tt.msg})
		if err.Error() != tt.want {
			t.Errorf("%q: got %q, want %q", tt.msg, err.Error(), tt.want)
		}
	}
}

// A call the peer forwarded to another instance that was unavailable is
// reported as the peer's answer naming that instance, never as "peer A
// unavailable" (during a failover the live peer was blamed for the dead
// leader's refusal).
func TestCallErrorNamesTheInstanceAForwardFailedAt(t *testing.T) {
	msg := router.ForwardFailedPrefix + `127.0.0.1:27301 (replicaset r1), which is unavailable: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:27301: connect: connection refused"`
	err := callError(10*time.Second, &client.Error{Op: "insert into offers", Peer: "127.0.0.1:27302", Code: codes.Unavailable, Msg: msg})
	want := "peer 127.0.0.1:27302: forwarded to 127.0.0.1:27301 (replicaset r1), which is unavailable: connection error: "
	if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "27302 unavailable") {
		t.Fatalf("got %q, want it to start %q", err, want)
	}
}

// A call whose connection broke after it was sent is reported as the
// peer's unknown outcome, in the words docs/data.md documents, not as
// "peer A unavailable".
func TestCallErrorSaysAnUnknownOutcomeAsDocumented(t *testing.T) {
	cl, err := client.New(t.Context(), client.Config{Peers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.Do(t.Context(), "map-call echo", true, func(context.Context, *grpc.ClientConn, ...grpc.CallOption) error {
		return status.Error(codes.Unavailable, "error reading from server: EOF")
	})
	got := callError(10*time.Second, err).Error()
	want := "peer 127.0.0.1:1: the call's outcome is unknown (error reading from server: EOF)"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
