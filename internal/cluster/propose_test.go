package cluster

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/meta"
)

// Refusals reach clients with the gRPC code they act on: a joiner retries
// Unavailable, stops on the others; an instance stops on PermissionDenied.
func TestRefusalCodes(t *testing.T) {
	for _, tc := range []struct {
		code meta.Code
		want codes.Code
	}{
		{meta.CodeInvalid, codes.InvalidArgument},
		{meta.CodeNotFound, codes.NotFound},
		{meta.CodeAlreadyExists, codes.AlreadyExists},
		{meta.CodeFailedPrecondition, codes.FailedPrecondition},
		{meta.CodeExpelled, codes.PermissionDenied},
		{meta.CodeUnavailable, codes.Unavailable},
	} {
		err := StatusError(&meta.Refusal{Code: tc.code, Msg: "why"})
		if got := status.Code(err); got != tc.want || status.Convert(err).Message() != "why" {
			t.Errorf("refusal code %d: %v, want %v with the message", tc.code, err, tc.want)
		}
	}
}
