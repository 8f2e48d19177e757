package cache_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/cache/internal/kvpb"
)

// switchable is a ShardSource a test changes.
type switchable struct {
	mu    sync.Mutex
	shard cache.Shard
	held  bool
}

func (s *switchable) Current() (cache.Shard, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shard, s.held
}

func (s *switchable) set(sh cache.Shard, held bool) {
	s.mu.Lock()
	s.shard, s.held = sh, held
	s.mu.Unlock()
}

func TestHandler(t *testing.T) {
	t.Parallel()
	shard := cache.Shard{Begin: 100, End: 200, Epoch: 4}
	tests := []struct {
		name       string
		keys       []uint64
		held       bool
		lookupErr  error
		loseLease  bool // the lease changes during the lookup
		wantCode   codes.Code
		wantAll    bool
		wantLookup bool
		result     string
	}{
		{"ping", nil, true, nil, false, codes.OK, true, false, "ping"},
		{"all inside", []uint64{100, 150, 199}, true, nil, false, codes.OK, true, true, "ok"},
		{"one outside", []uint64{150, 200}, true, nil, false, codes.OK, false, false, "wrong_shard"},
		{"below", []uint64{99}, true, nil, false, codes.OK, false, false, "wrong_shard"},
		{"no lease", []uint64{150}, false, nil, false, codes.FailedPrecondition, false, false, "no_lease"},
		{"no lease ping", nil, false, nil, false, codes.FailedPrecondition, false, false, "no_lease"},
		{"lease lost during lookup", []uint64{150}, true, nil, true, codes.FailedPrecondition, false, true, "no_lease"},
		{"lookup fails", []uint64{150}, true, errors.New("disk on fire"), false, codes.Internal, false, true, "error"},
		{"lookup unavailable", []uint64{150}, true, status.Error(codes.Unavailable, "busy"), false, codes.Unavailable, false, true, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &switchable{shard: shard, held: tc.held}
			looked := false
			reg := prometheus.NewRegistry()
			h := &cache.Handler[*kvpb.Key, *kvpb.GetRequest, *kvpb.GetResponse]{
				Shards:      src,
				Keys:        func(req *kvpb.GetRequest) ([]*kvpb.Key, error) { return req.GetKeys(), nil },
				ShardingKey: func(k *kvpb.Key) uint64 { return k.GetShardingKey() },
				Lookup: func(_ context.Context, s cache.Shard, keys []*kvpb.Key, resp *kvpb.GetResponse) error {
					looked = true
					if s != shard {
						t.Errorf("lookup got shard %v", s)
					}
					if tc.loseLease {
						next := shard
						next.Epoch++
						src.set(next, true)
					}
					for _, k := range keys {
						resp.Entries = append(resp.Entries, &kvpb.Entry{Id: k.GetId(), Value: "x"})
					}
					return tc.lookupErr
				},
				SetShard: func(resp *kvpb.GetResponse, s cache.Shard, all bool) { resp.Shard, resp.AllMatched = s.Proto(), all },
				Metrics:  cache.NewServerMetrics(reg),
			}
			req := &kvpb.GetRequest{}
			for i, k := range tc.keys {
				req.Keys = append(req.Keys, &kvpb.Key{ShardingKey: k, Id: uint64(i)})
			}
			resp, err := h.Handle(t.Context(), req)
			if status.Code(err) != tc.wantCode {
				t.Fatalf("Handle: %v, want code %v", err, tc.wantCode)
			}
			if looked != tc.wantLookup {
				t.Fatalf("lookup called %v, want %v", looked, tc.wantLookup)
			}
			if n := metric(t, reg, "shardkit_cache_server_requests_total", map[string]string{"result": tc.result}); n != 1 {
				t.Fatalf("result %q counted %v times", tc.result, n)
			}
			if err != nil {
				return
			}
			got, err := cache.ShardFromProto(resp.GetShard())
			if err != nil || got != shard {
				t.Fatalf("answer shard %v %v, want %v", got, err, shard)
			}
			if resp.GetAllMatched() != tc.wantAll {
				t.Fatalf("all_matched %v, want %v", resp.GetAllMatched(), tc.wantAll)
			}
			if !tc.wantAll && len(resp.GetEntries()) != 0 {
				t.Fatalf("a wrong-shard answer carries %d entries", len(resp.GetEntries()))
			}
			if tc.wantAll && len(resp.GetEntries()) != len(tc.keys) {
				t.Fatalf("%d entries for %d keys", len(resp.GetEntries()), len(tc.keys))
			}
		})
	}
}

func TestShardFromProto(t *testing.T) {
	t.Parallel()
	if _, err := cache.ShardFromProto(nil); !errors.Is(err, cache.ErrBadAnswer) {
		t.Fatalf("nil shard: %v", err)
	}
	s := cache.Shard{Begin: 5, End: 5, Epoch: 1}
	if _, err := cache.ShardFromProto(s.Proto()); !errors.Is(err, cache.ErrBadAnswer) {
		t.Fatalf("empty range: %v", err)
	}
	whole := cache.Shard{Epoch: 9}
	got, err := cache.ShardFromProto(whole.Proto())
	if err != nil || got != whole || !got.Contains(^uint64(0)) {
		t.Fatalf("whole space: %v %v", got, err)
	}
}
