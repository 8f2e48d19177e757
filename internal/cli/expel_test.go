package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

func TestExpelSuccess(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{expel: func(_ context.Context, r *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
		return &clusterv1.ExpelResponse{Instance: &clusterv1.Instance{
			InstanceId: r.GetInstanceId(), RaftId: 3, Uuid: "u3",
			CurrentGrade: grade(clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED, 2),
		}}, nil
	}}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "expel", "--peer", addr, "--force", "--timeout", "90s", "i3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "instance i3 expelled (raft_id 3, uuid u3, current grade Expelled(2))\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	r := f.lastExpelReq()
	if r.GetInstanceId() != "i3" || !r.GetForce() || r.GetTimeoutMs() != 90_000 {
		t.Errorf("request %v: want i3, force, 90000 ms", r)
	}
	// Defaults: no force, 60 s.
	if code, _, errOut := runMain(t, "expel", "--peer", addr, "i5"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if r := f.lastExpelReq(); r.GetInstanceId() != "i5" || r.GetForce() || r.GetTimeoutMs() != 60_000 {
		t.Errorf("request %v: want i5, no force, 60000 ms", r)
	}
}

func TestExpelErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		expel func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error)
		wants []string
	}{
		{"server timeout", func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
			// The server's own message (cluster/expel.go) is shown as it is.
			return nil, status.Error(codes.DeadlineExceeded, `expel of "i3" not confirmed within 1.5s: its current grade is still Online(2)`)
		}, []string{`shardkit: expel of "i3" not confirmed within 1.5s: its current grade is still Online(2)`}},
		{"refused without force", func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, `attempt to expel instance "i3" which is not Offline but Online (target Online); stop it first, or rerun with --force`)
		}, []string{`expel of i3: attempt to expel instance "i3" which is not Offline but Online (target Online); stop it first, or rerun with --force`}},
		{"last instance", func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, `cannot expel "i3": it is the last instance of the cluster`)
		}, []string{`expel of i3: cannot expel "i3": it is the last instance of the cluster`}},
		{"unknown instance", func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
			return nil, status.Error(codes.NotFound, "no instance \"i3\"\nin the cluster")
		}, []string{"expel of i3: no instance \"i3\"; in the cluster"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeCluster{expel: tt.expel}
			addr := f.serve(t)
			code, out, errOut := runMain(t, "expel", "--peer", addr, "--timeout", "1.5s", "i3")
			if code == 0 {
				t.Fatalf("exit 0, output %q", out)
			}
			if strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line", errOut)
			}
			if strings.Count(errOut, "expel of") != 1 {
				t.Errorf("stderr %q: says \"expel of\" more than once", errOut)
			}
			for _, w := range tt.wants {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func TestExpelClientDeadline(t *testing.T) {
	t.Parallel()
	// A server that never answers: the RPC deadline (timeout + the client's
	// 10s margin) ends it.
	f := &fakeCluster{expel: func(ctx context.Context, _ *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	addr := f.serve(t)
	var out bytes.Buffer
	err := runExpel(t.Context(), expelOptions{clusterFlags: clusterFlags{peers: addr, timeout: 100 * time.Millisecond}}, "i3", &out)
	if err == nil || !strings.HasPrefix(err.Error(), "expel of i3 not confirmed within 100ms") {
		t.Errorf("error %v: want a not-confirmed timeout", err)
	}
	if r := f.lastExpelReq(); r == nil || r.GetTimeoutMs() != 100 {
		t.Errorf("request %v: want timeout_ms 100", r)
	}
}

func TestExpelBadInput(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"no instance", []string{"expel", "--peer", dead}, []string{"accepts 1 arg"}},
		{"bad instance id", []string{"expel", "--peer", dead, "i 3"}, []string{"instance id", `"i 3"`}},
		{"bad timeout", []string{"expel", "--peer", dead, "--timeout", "-1s", "i3"}, []string{"--timeout"}},
		{"unreachable", []string{"expel", "--peer", dead, "i3"}, []string{"expel of i3", "peer " + dead, "unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runMain(t, tt.args...)
			if code == 0 {
				t.Fatal("exit 0")
			}
			for _, w := range tt.wants {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

// --lose-buckets is sent, and what the expel gave up is said.
func TestExpelLoseBucketsSaysWhatIsLost(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{expel: func(_ context.Context, r *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
		resp := &clusterv1.ExpelResponse{Instance: &clusterv1.Instance{
			InstanceId: r.GetInstanceId(), RaftId: 1, Uuid: "u1", CurrentGrade: grade(clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED, 1),
		}}
		if r.GetLoseBuckets() {
			resp.LostBuckets, resp.LostReplicasetId = 3000, "r1"
		}
		return resp, nil
	}}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "expel", "--peer", addr, "--force", "--lose-buckets", "i1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !f.lastExpelReq().GetLoseBuckets() {
		t.Errorf("request %v: want lose_buckets", f.lastExpelReq())
	}
	if want := "lost: the data of the 3000 buckets of replicaset r1 (--lose-buckets)"; !strings.Contains(out, want) {
		t.Errorf("output %q does not say %q", out, want)
	}
	if _, _, _ = runMain(t, "expel", "--peer", addr, "i2"); f.lastExpelReq().GetLoseBuckets() {
		t.Errorf("request %v: lose_buckets without the flag", f.lastExpelReq())
	}
	one := &fakeCluster{expel: func(_ context.Context, r *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
		return &clusterv1.ExpelResponse{LostBuckets: 1, LostReplicasetId: "r5"}, nil
	}}
	code, out, errOut = runMain(t, "expel", "--peer", one.serve(t), "--force", "--lose-buckets", "i5")
	if want := "lost: the data of the 1 bucket of replicaset r5 (--lose-buckets); it stays assigned to r5, which is expelled\n"; code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("one bucket lost: exit %d, output %q, want it to end %q (%s)", code, out, want, errOut)
	}
}
