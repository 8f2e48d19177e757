package datav1

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRedirectOf(t *testing.T) {
	st, err := status.New(codes.Unavailable, "not the leader").WithDetails(&Redirect{Reason: Redirect_REASON_NOT_LEADER, LeaderAddress: "10.0.0.2:3301"})
	if err != nil {
		t.Fatal(err)
	}
	if rd := RedirectOf(st.Err()); rd.GetReason() != Redirect_REASON_NOT_LEADER || rd.GetLeaderAddress() != "10.0.0.2:3301" {
		t.Fatalf("RedirectOf = %v", rd)
	}
	for _, e := range []error{nil, errors.New("plain"), status.Error(codes.Unavailable, "no detail")} {
		if rd := RedirectOf(e); rd != nil {
			t.Fatalf("RedirectOf(%v) = %v, want nil", e, rd)
		}
	}
}
