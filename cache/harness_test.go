package cache_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/cache/internal/kvpb"
)

// kvDesc describes the test KV service to the client.
func kvDesc() cache.Description[*kvpb.Key, uint64, string, *kvpb.GetRequest, *kvpb.GetResponse] {
	return cache.Description[*kvpb.Key, uint64, string, *kvpb.GetRequest, *kvpb.GetResponse]{
		Method:      kvpb.KVService_Get_FullMethodName,
		ShardingKey: func(k *kvpb.Key) uint64 { return k.GetShardingKey() },
		EntryID:     func(k *kvpb.Key) uint64 { return k.GetId() },
		Serialize: func(keys []*kvpb.Key, req *kvpb.GetRequest) error {
			req.Keys = keys
			return nil
		},
		Deserialize: func(resp *kvpb.GetResponse, values map[uint64]string) (cache.Shard, bool, error) {
			s, err := cache.ShardFromProto(resp.GetShard())
			if err != nil {
				return cache.Shard{}, false, err
			}
			for _, e := range resp.GetEntries() {
				values[e.GetId()] = e.GetValue()
			}
			return s, resp.GetAllMatched(), nil
		},
	}
}

type kvClient = cache.Client[*kvpb.Key, uint64, string, *kvpb.GetRequest, *kvpb.GetResponse]

// behaviour scripts a fake server.
type behaviour struct {
	delay      time.Duration // before answering anything
	getDelay   time.Duration // before answering a non-empty Get
	failGets   codes.Code    // answer non-empty Gets with this code (OK: no failure)
	failFirst  int           // ... only for the first failFirst Gets (0: always)
	empty      bool          // answer non-empty Gets with an empty message (no shard)
	noLease    bool          // hold no lease: FailedPrecondition through the Handler
	answerFrom *cache.Shard  // claim this shard instead (it moved)
	staleGets  *cache.Shard  // answer non-empty Gets from this shard with staleValue (pings are unchanged)
	// answer a non-empty Get only once this server has received a non-empty
	// Get of its own (orders two replicas' answers without timing)
	after *fakeServer
}

type fakeServer struct {
	kvpb.UnimplementedKVServiceServer
	dc, addr string
	srv      *grpc.Server
	handler  *cache.Handler[*kvpb.Key, *kvpb.GetRequest, *kvpb.GetResponse]

	mu    sync.Mutex
	shard cache.Shard
	b     behaviour

	gets, pings, cancelled, failed atomic.Int64
}

func (f *fakeServer) set(b behaviour) {
	f.mu.Lock()
	f.b = b
	f.mu.Unlock()
}

func (f *fakeServer) setShard(s cache.Shard) {
	f.mu.Lock()
	f.shard = s
	f.mu.Unlock()
}

func (f *fakeServer) Current() (cache.Shard, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shard
	if f.b.answerFrom != nil {
		s = *f.b.answerFrom
	}
	return s, !f.b.noLease
}

func (f *fakeServer) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	f.mu.Lock()
	b := f.b
	f.mu.Unlock()
	isPing := len(req.GetKeys()) == 0
	delay := b.delay
	if isPing {
		f.pings.Add(1)
	} else {
		n := f.gets.Add(1)
		delay += b.getDelay
		if b.after != nil {
			for b.after.gets.Load() == 0 {
				select {
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				case <-time.After(time.Millisecond):
				}
			}
		}
		if b.failGets != codes.OK && (b.failFirst == 0 || n <= int64(b.failFirst)) {
			f.failed.Add(1)
			return nil, status.Error(b.failGets, "scripted failure")
		}
		if b.empty {
			return &kvpb.GetResponse{}, nil
		}
		if b.staleGets != nil {
			resp := &kvpb.GetResponse{Shard: b.staleGets.Proto(), AllMatched: true}
			for _, k := range req.GetKeys() {
				resp.Entries = append(resp.Entries, &kvpb.Entry{Id: k.GetId(), Value: staleValue(k.GetId())})
			}
			return resp, nil
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			f.cancelled.Add(1)
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
	return f.handler.Handle(ctx, req)
}

func value(id uint64) string { return fmt.Sprintf("v%d", id) }

func staleValue(id uint64) string { return fmt.Sprintf("stale%d", id) }

func startServer(t *testing.T, dc string, shard cache.Shard) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{dc: dc, addr: lis.Addr().String(), shard: shard, srv: grpc.NewServer()}
	f.handler = &cache.Handler[*kvpb.Key, *kvpb.GetRequest, *kvpb.GetResponse]{
		Shards:      f,
		Keys:        func(req *kvpb.GetRequest) ([]*kvpb.Key, error) { return req.GetKeys(), nil },
		ShardingKey: func(k *kvpb.Key) uint64 { return k.GetShardingKey() },
		Lookup: func(_ context.Context, _ cache.Shard, keys []*kvpb.Key, resp *kvpb.GetResponse) error {
			for _, k := range keys {
				resp.Entries = append(resp.Entries, &kvpb.Entry{Id: k.GetId(), Value: value(k.GetId())})
			}
			return nil
		},
		SetShard: func(resp *kvpb.GetResponse, s cache.Shard, all bool) {
			resp.Shard, resp.AllMatched = s.Proto(), all
		},
	}
	kvpb.RegisterKVServiceServer(f.srv, f)
	go f.srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(f.srv.Stop)
	return f
}

// hostList is a Resolver whose list tests change.
type hostList struct {
	mu  sync.Mutex
	eps []cache.Endpoint
}

func (h *hostList) Resolve(context.Context) ([]cache.Endpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]cache.Endpoint(nil), h.eps...), nil
}

func (h *hostList) add(fs ...*fakeServer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range fs {
		h.eps = append(h.eps, cache.Endpoint{DC: f.dc, Addr: f.addr})
	}
}

const half = uint64(1) << 63

var (
	shard0 = cache.Shard{Begin: 0, End: half, Epoch: 1}
	shard1 = cache.Shard{Begin: half, End: 0, Epoch: 1}
)

// grid starts dcs x {shard0, shard1} servers: grid[dc][shard].
func grid(t *testing.T, dcs ...string) ([][]*fakeServer, *hostList) {
	t.Helper()
	hl := &hostList{}
	out := make([][]*fakeServer, len(dcs))
	for i, dc := range dcs {
		for _, s := range []cache.Shard{shard0, shard1} {
			f := startServer(t, dc, s)
			out[i] = append(out[i], f)
			hl.add(f)
		}
	}
	return out, hl
}

func newClient(t *testing.T, r cache.Resolver, reg prometheus.Registerer, tweak func(*cache.Options)) *kvClient {
	t.Helper()
	// A long host timeout: the first pings must not time out on a loaded machine.
	opts := cache.Options{Resolver: r, PingPeriod: time.Hour, ShardWait: 10 * time.Millisecond, HostTimeout: 10 * time.Second, Registerer: reg}
	if tweak != nil {
		tweak(&opts)
	}
	c, err := cache.New(t.Context(), kvDesc(), opts)
	if err != nil {
		t.Fatalf("cache.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keys returns n keys in shard0 and n in shard1, ids from base.
func keys(base uint64, n int) []*kvpb.Key {
	var out []*kvpb.Key
	for i := range n {
		id := base + uint64(i)
		out = append(out,
			&kvpb.Key{ShardingKey: uint64(i) + 1, Id: id*2 + 0},
			&kvpb.Key{ShardingKey: half + uint64(i) + 1, Id: id*2 + 1})
	}
	return out
}

func checkValues(t *testing.T, got map[uint64]string, ks []*kvpb.Key) {
	t.Helper()
	if len(got) != len(ks) {
		t.Fatalf("got %d values, want %d: %v", len(got), len(ks), got)
	}
	for _, k := range ks {
		if got[k.GetId()] != value(k.GetId()) {
			t.Fatalf("value of id %d = %q, want %q", k.GetId(), got[k.GetId()], value(k.GetId()))
		}
	}
}

func getCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// metric sums the samples of a counter (or histogram counts) whose labels
// include want.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
