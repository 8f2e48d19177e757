package cli

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// fakeSharding answers RebalanceStatus with a fixed response.
type fakeSharding struct {
	datav1.UnimplementedShardingServiceServer
	mu   sync.Mutex
	resp *datav1.RebalanceStatusResponse
	next []*datav1.RebalanceStatusResponse // the answers after resp, one per call; the last stays
	sets int                               // SetRebalancer calls
}

func (f *fakeSharding) SetRebalancer(context.Context, *datav1.SetRebalancerRequest) (*datav1.SetRebalancerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	return &datav1.SetRebalancerResponse{}, nil
}

func (f *fakeSharding) RebalanceStatus(context.Context, *datav1.RebalanceStatusRequest) (*datav1.RebalanceStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.resp
	if len(f.next) > 0 {
		f.resp, f.next = f.next[0], f.next[1:]
	}
	return r, nil
}

func (f *fakeSharding) serve(t *testing.T) string {
	t.Helper()
	return serveGRPC(t, func(s *grpc.Server) { datav1.RegisterShardingServiceServer(s, f) })
}

func balance(stale bool) *datav1.RebalanceStatusResponse {
	r := &datav1.RebalanceStatusResponse{
		BucketCount: 30,
		Settings:    &datav1.RebalancerSettings{ThresholdPercent: 1, MaxSending: 100, MaxReceiving: 100},
		Replicasets: []*datav1.ReplicasetBalance{
			{ReplicasetId: "r1", Weight: 1, Buckets: 15, Target: 15, Available: true},
			{ReplicasetId: "r2", Weight: 1, Buckets: 15, Target: 15, Available: true},
		},
	}
	if stale {
		r.Stale, r.StaleReason = true, "no leader of group 0"
	}
	return r
}

// A rebalance status that no instance could confirm with group 0's leader
// is shown, marked so, and the command exits 3; --watch does not take a
// stale "balanced" for done.
func TestRebalanceStatusNotConfirmed(t *testing.T) {
	t.Parallel()
	addr := (&fakeSharding{resp: balance(true)}).serve(t)

	code, out, errOut := runMain(t, "rebalance", "status", "--peer", addr)
	if code != exitNoQuorum {
		t.Fatalf("exit %d, want %d: %s", code, exitNoQuorum, errOut)
	}
	if !strings.Contains(out, "NOT CONFIRMED: no leader of group 0;") || !strings.Contains(out, "r2") {
		t.Errorf("table:\n%s", out)
	}
	if !strings.Contains(errOut, "not confirmed with group 0's leader (no leader of group 0)") {
		t.Errorf("stderr %q", errOut)
	}

	code, out, _ = runMain(t, "rebalance", "status", "--peer", addr, "--format", "json")
	var v struct {
		Stale       bool   `json:"stale"`
		StaleReason string `json:"stale_reason"`
	}
	if code != exitNoQuorum || json.Unmarshal([]byte(out), &v) != nil || !v.Stale || v.StaleReason != "no leader of group 0" {
		t.Errorf("json: exit %d, %s", code, out)
	}

	// --watch does not take a stale view of a balanced cluster for done: it
	// asks again, and stops at the first confirmed one.
	seq := &fakeSharding{resp: balance(true), next: []*datav1.RebalanceStatusResponse{balance(false)}}
	code, out, errOut = runMain(t, "rebalance", "status", "--peer", seq.serve(t), "--watch")
	if code != 0 || strings.Count(out, "NOT CONFIRMED") != 1 || strings.Count(out, "moves in progress") != 2 {
		t.Errorf("watch, stale then confirmed: exit %d\n%s%s", code, out, errOut)
	}

	// rebalance config writes back the settings it does not change as it
	// read them: not from a stale view.
	cfg := &fakeSharding{resp: balance(true)}
	code, _, errOut = runMain(t, "rebalance", "config", "--max-sending", "5", "--peer", cfg.serve(t))
	cfg.mu.Lock()
	defer cfg.mu.Unlock()
	if code != exitNoQuorum || cfg.sets != 0 || !strings.Contains(errOut, "could not read the current settings: no leader of group 0") {
		t.Errorf("config on a stale view: exit %d, %d sets, stderr %q", code, cfg.sets, errOut)
	}
}
