package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// consoleInstance starts a one-instance cluster with an HTTP port of 30
// buckets and a space "kv" (k unsigned, v string) holding n rows; it
// returns the HTTP base URL and a client.
func consoleInstance(ctx context.Context, t *testing.T, n int) (string, *client.Client) {
	t.Helper()
	lis, addr := servertest.Listen(t)
	hlis, haddr := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: lis, HTTPListener: hlis, AutoOfflineTimeout: 5 * time.Second,
		ShutdownTimeout: 5 * time.Second, InitBucketCount: 30})
	c, err := client.New(ctx, client.Config{Peers: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Online first: an operation on a replicaset none of whose members is
	// Online yet is refused (no quorum), whatever the test asks of it.
	pollOK(t, "the instance Online", func() error {
		st, err := c.Status(ctx, false)
		if err != nil {
			return err
		}
		for _, is := range st.GetInstances() {
			if g := is.GetInstance().GetCurrentGrade().GetVariant(); g != clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
				return fmt.Errorf("%s is %v", is.GetInstance().GetInstanceId(), g)
			}
		}
		if len(st.GetInstances()) == 0 {
			return fmt.Errorf("no instance yet")
		}
		return nil
	})
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		return err
	})
	for i := range n {
		pollOK(t, "a row", func() error {
			_, err := c.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String(fmt.Sprintf("v%d", i))})
			return err
		})
	}
	return "http://" + haddr, c
}

// call makes one API request and decodes its JSON answer into out (when
// not nil); it returns the HTTP status and the raw body.
func call(t *testing.T, method, u, body string, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, u, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// The console's API reads spaces, a key's tuple, ranges and scan pages,
// the bucket map and the rebalancer, and refuses bad input naming it.
func TestConsoleAPIReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	base, c := consoleInstance(ctx, t, 25)

	var spaces struct {
		Spaces []struct {
			Name        string   `json:"name"`
			PrimaryKey  []string `json:"primary_key"`
			ShardingKey []string `json:"sharding_key"`
			Fields      []struct{ Name, Type string }
		} `json:"spaces"`
	}
	if code, body := call(t, "GET", base+"/api/v1/spaces", "", &spaces); code != 200 || len(spaces.Spaces) != 1 ||
		spaces.Spaces[0].Name != "kv" || strings.Join(spaces.Spaces[0].PrimaryKey, ",") != "k" ||
		len(spaces.Spaces[0].Fields) != 2 || spaces.Spaces[0].Fields[1].Type != "string" {
		t.Fatalf("spaces: %d %s", code, body)
	}

	var got struct {
		Found   bool            `json:"found"`
		Tuple   json.RawMessage `json:"tuple"`
		Version uint64          `json:"version"`
		Bucket  uint32          `json:"bucket"`
		Info    struct {
			Leader bool `json:"leader"`
		} `json:"info"`
	}
	wantBucket, err := c.Space("kv").Bucket(ctx, tuple.Uint(7))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, "GET", base+"/api/v1/spaces/kv/tuple?key="+url.QueryEscape("[7]"), "", &got); code != 200 || !got.Found ||
		string(got.Tuple) != `[7,"v7"]` || got.Version == 0 || got.Bucket != wantBucket || !got.Info.Leader {
		t.Errorf("key [7]: %d %s (want bucket %d)", code, body, wantBucket)
	}
	got.Found = true
	if code, body := call(t, "GET", base+"/api/v1/spaces/kv/tuple?mode=ro&key=[99]", "", &got); code != 200 || got.Found {
		t.Errorf("key [99] (absent): %d %s", code, body)
	}
	var cnt struct {
		Count uint64 `json:"count"`
	}
	if code, body := call(t, "GET", base+"/api/v1/spaces/kv/count", "", &cnt); code != 200 || cnt.Count != 25 {
		t.Errorf("count: %d %s", code, body)
	}

	// A scan pages through every row once.
	type page struct {
		Tuples []struct {
			Tuple  []any  `json:"tuple"`
			Bucket uint32 `json:"bucket"`
		} `json:"tuples"`
		More      bool   `json:"more"`
		Next      uint32 `json:"next_bucket"`
		NextAfter string `json:"next_after"`
	}
	seen := map[float64]bool{}
	q := "limit=4"
	for range 100 {
		var p page
		if code, body := call(t, "GET", base+"/api/v1/spaces/kv/scan?"+q, "", &p); code != 200 {
			t.Fatalf("scan %s: %d %s", q, code, body)
		}
		for _, tv := range p.Tuples {
			k := tv.Tuple[0].(float64)
			if seen[k] {
				t.Fatalf("scan: key %v twice", k)
			}
			seen[k] = true
		}
		if !p.More {
			break
		}
		q = fmt.Sprintf("limit=4&bucket=%d&after=%s", p.Next, p.NextAfter)
	}
	if len(seen) != 25 {
		t.Errorf("the scan saw %d of 25 keys", len(seen))
	}
	// A range of key 7's bucket holds key 7.
	var p page
	if code, body := call(t, "GET", fmt.Sprintf("%s/api/v1/spaces/kv/range?bucket=%d", base, wantBucket), "", &p); code != 200 ||
		len(p.Tuples) == 0 {
		t.Errorf("range of bucket %d: %d %s", wantBucket, code, body)
	}

	var bk struct {
		BucketCount uint32 `json:"bucket_count"`
		Ranges      []struct {
			First, Last  uint32
			ReplicasetID string `json:"replicaset_id"`
		} `json:"ranges"`
		Replicasets []struct {
			ReplicasetID string `json:"replicaset_id"`
			Buckets      uint32 `json:"buckets"`
		} `json:"replicasets"`
	}
	if code, body := call(t, "GET", base+"/api/v1/buckets", "", &bk); code != 200 || bk.BucketCount != 30 || len(bk.Replicasets) != 1 ||
		bk.Replicasets[0].Buckets != 30 || len(bk.Ranges) == 0 || bk.Ranges[0].First != 1 || bk.Ranges[len(bk.Ranges)-1].Last != 30 {
		t.Errorf("buckets: %d %s", code, body)
	}
	if code, body := call(t, "GET", base+"/api/v1/rebalance", "", nil); code != 200 || !strings.Contains(body, `"bucket_count":30`) {
		t.Errorf("rebalance: %d %s", code, body)
	}

	for _, tc := range []struct{ path, code, says string }{
		{"/api/v1/spaces/nope/tuple?key=[1]", "NotFound", `no space "nope"`},
		{"/api/v1/spaces/kv/tuple", "InvalidArgument", "no key: pass ?key= a JSON array of k"},
		{"/api/v1/spaces/kv/tuple?key=[\"x\"]", "InvalidArgument", "key [\"x\"]"},
		{"/api/v1/spaces/kv/tuple?key=[1]&mode=fast", "InvalidArgument", `mode "fast"`},
		{"/api/v1/spaces/kv/range", "InvalidArgument", "no bucket: pass ?bucket= a number from 1 to 30"},
		{"/api/v1/spaces/kv/range?bucket=31", "InvalidArgument", `bucket "31": want a number from 1 to 30`},
		{"/api/v1/spaces/kv/scan?limit=0", "InvalidArgument", `limit "0"`},
		{"/api/v1/spaces/kv/scan?after=***", "InvalidArgument", "not a cursor"},
	} {
		var e struct{ Error, Code string }
		code, body := call(t, "GET", base+tc.path, "", nil)
		_ = json.Unmarshal([]byte(body), &e)
		if code/100 != 4 || e.Code != tc.code || !strings.Contains(e.Error, tc.says) {
			t.Errorf("GET %s: %d %s; want %s saying %q", tc.path, code, body, tc.code, tc.says)
		}
	}
}

// The operations go through the gRPC handlers: each refusal is the
// server's own message, and an accepted one changes the cluster.
func TestConsoleAPIOperations(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	base, c := consoleInstance(ctx, t, 0)
	rb, err := c.Sharding().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs := rb.GetReplicasets()[0].GetReplicasetId()

	for _, tc := range []struct {
		path, body string
		status     int
		says       string
	}{
		{"/api/v1/replicasets/" + rs + "/weight", "", 400, "the request body is empty"},
		{"/api/v1/replicasets/" + rs + "/weight", `{"wieght": 2}`, 400, `unknown field "wieght"`},
		{"/api/v1/replicasets/" + rs + "/weight", `{}`, 400, "no weight"},
		{"/api/v1/replicasets/" + rs + "/weight", `{"weight": 2} {}`, 400, "more than one JSON value"},
		{"/api/v1/replicasets/nope/weight", `{"weight": 2}`, 404, `nope`},
		{"/api/v1/replicasets/nope/lock", `{"locked": true}`, 404, "nope"},
		{"/api/v1/buckets/0/move", `{"to": "` + rs + `"}`, 400, `bucket "0"`},
		{"/api/v1/buckets/5/move", `{"to": "nope"}`, 404, "nope"},
		{"/api/v1/buckets/5/move", `{"to": "` + rs + `"}`, 400, "is on " + rs + " already"},
		{"/api/v1/buckets/5/pin", `{}`, 400, "no pinned"},
		{"/api/v1/instances/nope/expel", `{}`, 404, "nope"},
		{"/api/v1/reshard", `{"step": "go"}`, 400, `step "go"`},
	} {
		var e struct{ Error, Code string }
		code, body := call(t, "POST", base+tc.path, tc.body, nil)
		_ = json.Unmarshal([]byte(body), &e)
		if code != tc.status || !strings.Contains(e.Error, tc.says) {
			t.Errorf("POST %s %s: %d %s; want %d saying %q", tc.path, tc.body, code, body, tc.status, tc.says)
		}
	}

	// A form (what another site's page may send without CORS) is refused.
	resp, err := http.Post(base+"/api/v1/replicasets/"+rs+"/weight", "application/x-www-form-urlencoded", strings.NewReader(`{"weight": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "Content-Type: application/json") {
		t.Errorf("a form POST: %d %s", resp.StatusCode, b)
	}
	if code, body := call(t, "POST", base+"/api/v1/replicasets/"+rs+"/weight", `{"weight": 3}`, nil); code != 200 {
		t.Fatalf("set weight: %d %s", code, body)
	}
	if code, body := call(t, "POST", base+"/api/v1/buckets/5/pin", `{"pinned": true}`, nil); code != 200 {
		t.Fatalf("pin: %d %s", code, body)
	}
	if code, body := call(t, "POST", base+"/api/v1/replicasets/"+rs+"/lock", `{"locked": true}`, nil); code != 200 {
		t.Fatalf("lock: %d %s", code, body)
	}
	if code, body := call(t, "POST", base+"/api/v1/reshard", `{"step": "plan"}`, nil); code != 200 {
		t.Fatalf("reshard plan: %d %s", code, body)
	}
	pollOK(t, "the weight, pin and lock in the rebalance status", func() error {
		rb, err := c.Sharding().Status(ctx)
		if err != nil {
			return err
		}
		r := rb.GetReplicasets()[0]
		if r.GetWeight() != 3 || !r.GetLocked() || r.GetPinned() != 1 {
			return fmt.Errorf("replicaset %v", r)
		}
		return nil
	})
}

// The events stream sends the cluster's status at once, and this
// instance's load is sampled from its own registry.
func TestConsoleEventsAndMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	base, _ := consoleInstance(ctx, t, 3)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var ev struct {
		Stale  bool `json:"stale"`
		Status struct {
			Instances []struct {
				CurrentGrade struct{ Variant string } `json:"current_grade"`
			} `json:"instances"`
		} `json:"status"`
	}
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if ev.Stale || len(ev.Status.Instances) != 1 || ev.Status.Instances[0].CurrentGrade.Variant != "Online" {
		t.Errorf("first event: %+v", ev)
	}

	var m struct {
		Instances []struct {
			InstanceID string `json:"instance_id"`
			Samples    []struct {
				WritesPerSec float64 `json:"writes_per_s"`
			} `json:"samples"`
			Error string `json:"error"`
		} `json:"instances"`
	}
	pollOK(t, "a sample with the writes", func() error {
		if code, body := call(t, "GET", base+"/api/v1/metrics/cluster", "", &m); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		if len(m.Instances) != 1 || m.Instances[0].Error != "" {
			return fmt.Errorf("%+v", m)
		}
		for _, s := range m.Instances[0].Samples {
			if s.WritesPerSec > 0 {
				return nil
			}
		}
		return fmt.Errorf("no sample shows a write: %+v", m)
	})
}

// On an instance that is not group 0's leader, an operation is forwarded
// to the leader (as the gRPC call is) and a key's tuple is read from the
// replicaset that holds it.
func TestConsoleAPIForwards(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var addrs, https []string
	var liss, hliss []net.Listener
	for range 2 {
		l, a := servertest.Listen(t)
		hl, ha := servertest.Listen(t)
		addrs, liss, https, hliss = append(addrs, a), append(liss, l), append(https, "http://"+ha), append(hliss, hl)
	}
	for i := range 2 {
		servertest.Run(t, server.InstanceConfig{Listener: liss[i], HTTPListener: hliss[i], Peers: addrs[:1], AutoOfflineTimeout: 10 * time.Second,
			ShutdownTimeout: 5 * time.Second, InitBucketCount: 30})
	}
	c, err := client.New(ctx, client.Config{Peers: addrs, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	pollOK(t, "two replicasets, each with a leader", func() error {
		rb, err := c.Sharding().Status(ctx)
		if err != nil {
			return err
		}
		if n := len(rb.GetReplicasets()); n != 2 {
			return fmt.Errorf("%d replicasets", n)
		}
		for _, r := range rb.GetReplicasets() {
			if !r.GetAvailable() || r.GetBuckets() != r.GetTarget() {
				return fmt.Errorf("replicaset %v", r)
			}
		}
		return nil
	})
	pollOK(t, "the space and its rows", func() error {
		if _, err := c.CreateSpace(ctx, client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true); err != nil {
			return err
		}
		for k := range uint64(10) {
			if _, err := c.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("v")}); err != nil {
				return err
			}
		}
		return nil
	})
	var st struct {
		LeaderRaftID uint64 `json:"leader_raft_id"`
		Instances    []struct {
			RaftID      uint64 `json:"raft_id"`
			HTTPAddress string `json:"http_address"`
		} `json:"instances"`
	}
	if code, body := call(t, "GET", https[0]+"/api/v1/cluster", "", &st); code != 200 {
		t.Fatalf("status: %d %s", code, body)
	}
	var follower string
	for _, in := range st.Instances {
		if in.RaftID != st.LeaderRaftID {
			follower = "http://" + in.HTTPAddress
		}
	}
	if follower == "" {
		t.Fatalf("no follower in %+v", st)
	}
	rb, err := c.Sharding().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs := rb.GetReplicasets()[0].GetReplicasetId()
	if code, body := call(t, "POST", follower+"/api/v1/replicasets/"+rs+"/weight", `{"weight": 5}`, nil); code != 200 {
		t.Fatalf("set weight on a follower: %d %s", code, body)
	}
	pollOK(t, "the weight", func() error {
		rb, err := c.Sharding().Status(ctx)
		if err != nil {
			return err
		}
		for _, r := range rb.GetReplicasets() {
			if r.GetReplicasetId() == rs && r.GetWeight() != 5 {
				return fmt.Errorf("weight %d", r.GetWeight())
			}
		}
		return nil
	})
	var health struct {
		Instances []struct {
			InstanceID string `json:"instance_id"`
			Ready      bool   `json:"ready"`
			Reason     string `json:"reason"`
		} `json:"instances"`
	}
	pollOK(t, "both ready, as each says", func() error {
		if code, body := call(t, "GET", follower+"/api/v1/health/cluster", "", &health); code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		if len(health.Instances) != 2 || !health.Instances[0].Ready || !health.Instances[1].Ready {
			return fmt.Errorf("%+v", health)
		}
		return nil
	})
	// A scan page goes on across the replicasets until it is full.
	var p struct {
		Tuples []json.RawMessage `json:"tuples"`
		More   bool              `json:"more"`
	}
	if code, body := call(t, "GET", https[0]+"/api/v1/spaces/kv/scan?limit=100", "", &p); code != 200 || len(p.Tuples) != 10 || p.More {
		t.Errorf("a scan of both replicasets: %d %s", code, body)
	}
	// Every key, read through each instance, whichever replicaset holds it.
	for _, base := range https {
		for k := range 10 {
			var got struct {
				Found bool `json:"found"`
			}
			if code, body := call(t, "GET", fmt.Sprintf("%s/api/v1/spaces/kv/tuple?key=[%d]", base, k), "", &got); code != 200 || !got.Found {
				t.Errorf("key %d through %s: %d %s", k, base, code, body)
			}
		}
	}
}

// An instance with a console's event stream open stops without waiting
// for the stream: the stream ends when the HTTP server shuts down.
func TestConsoleEventsEndAtShutdown(t *testing.T) {
	lis, _ := servertest.Listen(t)
	hlis, haddr := servertest.Listen(t)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- server.RunInstance(ctx, server.InstanceConfig{Listener: lis, HTTPListener: hlis, DataDir: t.TempDir(),
			ShutdownTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))}, "boot")
	}()
	var body io.ReadCloser
	pollOK(t, "the event stream", func() error {
		resp, err := http.Get("http://" + haddr + "/api/v1/events") //nolint:bodyclose // closed below, once read
		if err == nil {
			body = resp.Body
		}
		return err
	})
	defer body.Close()
	if _, err := bufio.NewReader(body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) { // stopped while it booted
			t.Errorf("the instance ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the instance did not stop")
	}
	if strings.Contains(logs.String(), "HTTP server did not stop gracefully") {
		t.Errorf("the event stream held the HTTP server's stop:\n%s", logs.String())
	}
}
