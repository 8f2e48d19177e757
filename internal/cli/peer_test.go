package cli

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardkit/shardkit/client"
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
