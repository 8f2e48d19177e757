package goals

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/shardkit/shardkit/cache"
	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
)

// Description tells the cache client about the goals service.
func Description() cache.Description[*goalsv1.Hit, uint64, []uint64, *goalsv1.MatchShardedRequest, *goalsv1.MatchShardedResponse] {
	return cache.Description[*goalsv1.Hit, uint64, []uint64, *goalsv1.MatchShardedRequest, *goalsv1.MatchShardedResponse]{
		Method:      goalsv1.GoalsMatcherService_MatchSharded_FullMethodName,
		ShardingKey: func(h *goalsv1.Hit) uint64 { return h.GetCounterId() },
		EntryID:     func(h *goalsv1.Hit) uint64 { return h.GetWatchId() },
		Serialize: func(hits []*goalsv1.Hit, req *goalsv1.MatchShardedRequest) error {
			req.Hits = hits
			return nil
		},
		Deserialize: func(resp *goalsv1.MatchShardedResponse, values map[uint64][]uint64) (cache.Shard, bool, error) {
			s, err := cache.ShardFromProto(resp.GetShard())
			if err != nil {
				return cache.Shard{}, false, err
			}
			for _, r := range resp.GetReaches() {
				values[r.GetWatchId()] = r.GetGoalIds()
			}
			return s, resp.GetAllMatched(), nil
		},
	}
}

// Client is the typed goals client.
type Client = cache.Client[*goalsv1.Hit, uint64, []uint64, *goalsv1.MatchShardedRequest, *goalsv1.MatchShardedResponse]

// Service is the goals server: a cache.Handler over the rules of the shard
// it holds.
type Service struct {
	goalsv1.UnimplementedGoalsMatcherServiceServer
	handler *cache.Handler[*goalsv1.Hit, *goalsv1.MatchShardedRequest, *goalsv1.MatchShardedResponse]
	rules   atomic.Pointer[Rules]
	shards  cache.ShardSource
	delay   atomic.Int64 // nanoseconds added to every non-empty request
}

// NewService answers for the shards of src once SetRules was called.
func NewService(src cache.ShardSource, metrics *cache.ServerMetrics) *Service {
	s := &Service{shards: src}
	s.handler = &cache.Handler[*goalsv1.Hit, *goalsv1.MatchShardedRequest, *goalsv1.MatchShardedResponse]{
		Shards:      readySource{s},
		Keys:        func(req *goalsv1.MatchShardedRequest) ([]*goalsv1.Hit, error) { return req.GetHits(), nil },
		ShardingKey: func(h *goalsv1.Hit) uint64 { return h.GetCounterId() },
		Lookup:      s.lookup,
		SetShard: func(resp *goalsv1.MatchShardedResponse, sh cache.Shard, all bool) {
			resp.Shard, resp.AllMatched = sh.Proto(), all
		},
		Metrics: metrics,
	}
	return s
}

// readySource holds no shard until the rules are loaded.
type readySource struct{ s *Service }

func (r readySource) Current() (cache.Shard, bool) {
	sh, ok := r.s.shards.Current()
	return sh, ok && r.s.rules.Load() != nil
}

// SetRules installs the loaded rules; the service answers from then on.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// SetDelay makes every non-empty request wait d first (to play a slow
// replica in tests and benchmarks).
func (s *Service) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// MatchSharded implements goalsv1.GoalsMatcherServiceServer.
func (s *Service) MatchSharded(ctx context.Context, req *goalsv1.MatchShardedRequest) (*goalsv1.MatchShardedResponse, error) {
	if d := time.Duration(s.delay.Load()); d > 0 && len(req.GetHits()) > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("goals: %w", ctx.Err())
		case <-t.C:
		}
	}
	return s.handler.Handle(ctx, req)
}

func (s *Service) lookup(_ context.Context, _ cache.Shard, hits []*goalsv1.Hit, resp *goalsv1.MatchShardedResponse) error {
	rules := s.rules.Load()
	resp.Reaches = make([]*goalsv1.GoalReach, 0, len(hits))
	for _, h := range hits {
		resp.Reaches = append(resp.Reaches, &goalsv1.GoalReach{WatchId: h.GetWatchId(), GoalIds: rules.Match(h.GetCounterId(), h.GetUrl())})
	}
	return nil
}

// DemoHit returns hit number i of the demo traffic over counters 1..counters.
func DemoHit(i, counters, perCounter int) *goalsv1.Hit {
	c := i%counters + 1
	j := (i / counters) % max(perCounter, 1)
	url := fmt.Sprintf("https://site%d.example/page/%d", c, j)
	if i%3 == 0 {
		url += "?thanks"
	}
	return &goalsv1.Hit{CounterId: DemoCounterID(c), WatchId: uint64(i), Url: url}
}

// Equal compares goal lists (nil and empty are equal).
func Equal(a, b []uint64) bool { return slices.Equal(a, b) }
