package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// fakeSharding answers RebalanceStatus with a fixed response.
type fakeSharding struct {
	datav1.UnimplementedShardingServiceServer
	mu         sync.Mutex
	resp       *datav1.RebalanceStatusResponse
	next       []*datav1.RebalanceStatusResponse // the answers after resp, one per call; the last stays
	sets       int                               // SetRebalancer calls
	last       *datav1.RebalancerSettings        // the last settings sent
	lastFields []string                          // and the fields named
	pins       []string                          // PinBucket calls: "pin 4", "unpin 9"
}

func (f *fakeSharding) PinBucket(_ context.Context, req *datav1.PinBucketRequest) (*datav1.PinBucketResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pins = append(f.pins, map[bool]string{true: "pin", false: "unpin"}[req.GetPinned()]+fmt.Sprint(" ", req.GetBucket()))
	if req.GetBucket() > 30 {
		return nil, status.Errorf(codes.InvalidArgument, "bucket %d is outside [1, 30]", req.GetBucket())
	}
	return &datav1.PinBucketResponse{}, nil
}

func (f *fakeSharding) SetRebalancer(_ context.Context, req *datav1.SetRebalancerRequest) (*datav1.SetRebalancerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	f.last, f.lastFields = req.GetSettings(), req.GetFields()
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

	// rebalance config names the settings given; group 0 keeps the others
	// as they are when it applies the change, so a stale view (the others
	// go as read, for a build before the names) changes nothing of it.
	cfg := &fakeSharding{resp: balance(true)}
	addr = cfg.serve(t)
	code, out, errOut = runMain(t, "rebalance", "config", "--max-sending", "5", "--copy-pace", "off", "--enable", "--peer", addr)
	cfg.mu.Lock()
	if code != 0 || cfg.sets != 1 || cfg.last.GetMaxSending() != 5 || !cfg.last.GetCopyPaceOff() || cfg.last.GetDisabled() ||
		strings.Join(cfg.lastFields, ",") != "disabled,max_sending,copy_pace_off" ||
		!strings.Contains(out, "rebalancer: disabled=false max-sending=5 copy-pace=off (the other settings unchanged)") {
		t.Errorf("config --max-sending 5 --copy-pace off --enable: exit %d, %d sets of %v naming %v, stdout %q, stderr %q", code, cfg.sets, cfg.last, cfg.lastFields, out, errOut)
	}
	cfg.mu.Unlock()
	code, _, errOut = runMain(t, "rebalance", "config", "--peer", addr)
	cfg.mu.Lock()
	defer cfg.mu.Unlock()
	if code != exitUsage || cfg.sets != 1 || !strings.Contains(errOut, "changes nothing without a flag") {
		t.Errorf("config without a flag: exit %d, %d sets, stderr %q", code, cfg.sets, errOut)
	}
}

// --watch ends when nothing moves the buckets left without an operator
// (the rebalancer off, or the disbalance within its threshold), saying
// which, instead of redrawing forever.
func TestRebalanceStatusWatchEndsWhenNothingMovesByItself(t *testing.T) {
	t.Parallel()
	withinThreshold := balance(false)
	withinThreshold.BucketsToMove, withinThreshold.MaxDisbalancePercent = 1, 0.07
	off := balance(false)
	off.BucketsToMove, off.MaxDisbalancePercent, off.Settings.Disabled = 1500, math.MaxFloat64, true
	moving := balance(false)
	moving.BucketsToMove, moving.MaxDisbalancePercent = 1, 0.07
	moving.Moves = []*datav1.MoveInfo{{Bucket: 17, From: "r2", To: "r1", Phase: "copy"}}
	frozen := balance(false)
	frozen.Replicasets[1].Weight, frozen.Replicasets[1].Available = 0, false
	pinnedDrain := balance(false)
	pinnedDrain.Replicasets[0].Buckets, pinnedDrain.Replicasets[0].Target = 29, 29
	pinnedDrain.Replicasets[1] = &datav1.ReplicasetBalance{ReplicasetId: "r2", Buckets: 1, Target: 1, Pinned: 1, PinnedBuckets: []uint32{5}, Available: true,
		DrainWaits: "the drain of r2 (weight 0) waits for its 1 pinned bucket, which the rebalancer never moves: unpin it (shardkit bucket unpin 5)"}
	olderServer := balance(false) // a status without pinned_buckets and drain_waits
	olderServer.Replicasets[1] = &datav1.ReplicasetBalance{ReplicasetId: "r2", Buckets: 3, Target: 3, Pinned: 3, Available: true}
	for _, c := range []struct {
		name  string
		seq   []*datav1.RebalanceStatusResponse
		shows int // times the table is drawn
		last  string
	}{
		// Two polls a second apart must agree (a rebalance between two
		// batches looks settled for a moment).
		{"within the threshold", []*datav1.RebalanceStatusResponse{withinThreshold}, 2,
			"the max disbalance, 0.07%, is within the rebalancer's threshold, 1.00%: it leaves the buckets where they are (1 bucket to move)"},
		{"the rebalancer off", []*datav1.RebalanceStatusResponse{off}, 2,
			"the rebalancer is off: nothing moves the buckets left by itself (1500 buckets to move; shardkit rebalance config --enable)"},
		{"within the threshold between two batches, then moving, then within", []*datav1.RebalanceStatusResponse{withinThreshold, moving, withinThreshold}, 4, "within the rebalancer's threshold"},
		{"balanced", []*datav1.RebalanceStatusResponse{balance(false)}, 1, ""},
		{"balanced but r2 frozen with weight 0", []*datav1.RebalanceStatusResponse{frozen}, 1,
			"r2 has no quorum (start its instances again): the rebalancer leaves its 15 buckets where they are, so its weight 0 does not drain it"},
		// Nothing left to move (the targets count pinned buckets as
		// staying), yet the drain does not end: that is said, with the
		// command that ends it.
		{"drained but for a pinned bucket", []*datav1.RebalanceStatusResponse{pinnedDrain}, 2,
			"nothing moves the buckets left by itself: the drain of r2 (weight 0) waits for its 1 pinned bucket, which the rebalancer never moves: unpin it (shardkit bucket unpin 5)"},
		{"drained but for pinned buckets, an older server", []*datav1.RebalanceStatusResponse{olderServer}, 2,
			"nothing moves the buckets left by itself: the drain of r2 (weight 0) waits for its 3 pinned buckets, which the rebalancer never moves: unpin them (shardkit bucket unpin BUCKET...)"},
	} {
		f := &fakeSharding{resp: c.seq[0], next: c.seq[1:]}
		code, out, errOut := runMain(t, "rebalance", "status", "--peer", f.serve(t), "--watch")
		if code != 0 || strings.Count(out, "moves in progress") != c.shows {
			t.Errorf("%s: exit %d, want the table %d times:\n%s%s", c.name, code, c.shows, out, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if c.last != "" && !strings.Contains(lines[len(lines)-1], c.last) {
			t.Errorf("%s: the last line %q does not say %q", c.name, lines[len(lines)-1], c.last)
		}
		if c.last == "" && !strings.HasPrefix(lines[len(lines)-1], "moves in progress") {
			t.Errorf("%s: a balanced cluster's watch ends on %q", c.name, lines[len(lines)-1])
		}
	}
}

// Settings that group 0 would read as "the default" are refused before
// anything is asked, with exit 2 and what to give instead.
func TestRebalanceConfigRefusesZeroes(t *testing.T) {
	t.Parallel()
	f := &fakeSharding{resp: balance(false)}
	addr := f.serve(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-sending", "0"}, "invalid --max-sending 0: want at least 1 (the default is 100"},
		{[]string{"--max-receiving", "0"}, "invalid --max-receiving 0: want at least 1"},
		{[]string{"--threshold", "0"}, "invalid --threshold 0: want a percentage from 0.01 to 100 (the default is 1)"},
		{[]string{"--threshold", "101"}, "invalid --threshold 101"},
		{[]string{"--max-sending", "x"}, `invalid argument "x" for "--max-sending"`},
	} {
		code, _, errOut := runMain(t, append([]string{"rebalance", "config", "--peer", addr}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("config %v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sets != 0 {
		t.Errorf("%d settings were sent", f.sets)
	}
}

// A wrong command line exits 2 in the cluster commands too, as in the
// data commands (docs/data.md, "Exit codes").
func TestAWrongCommandLineExitsTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bucket", "move"},
		{"bucket", "move", "abc", "--to", "r1"},
		{"bucket", "move", "0", "--to", "r1"},
		{"replicaset", "weight", "r1"},
		{"replicaset", "weight", "r1", "x"},
		{"replicaset", "weight", "r1", "4294967296"},
		{"rebalance", "status", "--no-such-flag"},
		{"reshard", "plan", "extra"},
		{"reshard", "begin"},
		{"bucket", "shwo", "3"},
		{"bogus"},
		{"status", "--no-such-flag"},
		{"completion", "tcsh"},
	} {
		code, _, errOut := runMain(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, exitUsage, errOut)
		}
	}
	code, _, errOut := runMain(t, "reshard", "begin")
	if !strings.Contains(errOut, `unknown command "begin" for "shardkit reshard"; want one of: cleanup, copy, finish, plan, start`) {
		t.Errorf("reshard begin: exit %d, stderr %q", code, errOut)
	}
	// A group alone shows its help, as before.
	if code, out, _ := runMain(t, "reshard"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("reshard: exit %d\n%s", code, out)
	}
}

// The one line a wrong command line prints names what is wrong, once
// prefixed, in the flags' own terms.
func TestAWrongCommandLineSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t) // none of these may reach a cluster
	for _, tt := range []struct {
		args []string
		want string // all of stderr
	}{
		{[]string{"insert", "offers"}, "shardkit: insert takes 2 arguments, SPACE TUPLE; got 1\n"},
		{[]string{"space", "drop"}, "shardkit: space drop takes one argument, NAME; got 0\n"},
		{[]string{"user", "create", "carl"}, "shardkit: --role is required: admin, writer or reader\n"},
		{[]string{"user", "set-role", "carl"}, "shardkit: --role is required: admin, writer or reader\n"},
		{[]string{"user", "create", "carl", "--role", "boss"}, "shardkit: invalid --role \"boss\": want admin, writer or reader\n"},
		{[]string{"call", "--bucket", "7", "--replicaset", "r2", "echo", "[]"},
			"shardkit: give --bucket or --replicaset, not both: --bucket 7 runs the procedure on the replicaset holding that bucket, --replicaset r2 on that replicaset\n"},
		{[]string{"call", "--bucket", "0", "echo", "[]"},
			"shardkit: invalid --bucket 0: buckets are numbered from 1 to the cluster's bucket count (`shardkit rebalance status` shows it); without --bucket the procedure runs on any replicaset\n"},
		{[]string{"call", "--replicaset", "", "echo", "[]"}, "shardkit: invalid --replicaset \"\": give a replicaset id (`shardkit status` lists them)\n"},
	} {
		code, _, errOut := runMain(t, append(tt.args, "--peer", dead, "--timeout", "1s")...)
		if code != exitUsage || errOut != tt.want {
			t.Errorf("%v: exit %d, stderr %q; want exit %d, %q", tt.args, code, errOut, exitUsage, tt.want)
		}
	}
}

// fakeRouting answers GetRouting: buckets 1-15 on r1, 16-30 on r2.
type fakeRouting struct {
	datav1.UnimplementedDataServiceServer
}

var fakeSpace = &datav1.Space{Name: "s", Id: 1, PrimaryKey: []uint32{1}, ShardingKey: []uint32{1}, SchemaVersion: 1,
	Format: []*datav1.Field{{Name: "id", Type: "unsigned"}}}

// fakeSpace2's primary key is (region, id); its sharding key is region.
var fakeSpace2 = &datav1.Space{Name: "s2", Id: 2, PrimaryKey: []uint32{2, 1}, ShardingKey: []uint32{2}, SchemaVersion: 1,
	Format: []*datav1.Field{{Name: "id", Type: "unsigned"}, {Name: "region", Type: "string"}}}

func (fakeRouting) GetRouting(context.Context, *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	return &datav1.GetRoutingResponse{BucketCount: 30, Buckets: []*datav1.BucketRange{
		{First: 1, Last: 15, ReplicasetId: "r1"}, {First: 16, Last: 30, ReplicasetId: "r2"}},
		Spaces: []*datav1.Space{fakeSpace, fakeSpace2}, SchemaVersion: 1}, nil
}

func (fakeRouting) ListSpaces(context.Context, *datav1.ListSpacesRequest) (*datav1.ListSpacesResponse, error) {
	return &datav1.ListSpacesResponse{Spaces: []*datav1.Space{fakeSpace, fakeSpace2}}, nil
}

// bucket show names the bucket's replicaset and its move, if any.
func TestBucketShow(t *testing.T) {
	t.Parallel()
	st := balance(false)
	st.Moves = []*datav1.MoveInfo{{Bucket: 17, From: "r2", To: "r1", Generation: 3, Phase: "copy", AgeMs: 1200, Reason: "rebalancer"}}
	f := &fakeSharding{resp: st}
	addr := serveGRPC(t, func(s *grpc.Server) {
		datav1.RegisterShardingServiceServer(s, f)
		datav1.RegisterDataServiceServer(s, fakeRouting{})
	})
	code, out, errOut := runMain(t, "bucket", "show", "17", "--peer", addr)
	if code != 0 || out != "bucket 17: on r2\nmoving from r2 to r1 (generation 3): phase copy for 1.2s, rebalancer\n" {
		t.Errorf("bucket show 17: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "bucket", "show", "3", "--peer", addr)
	if code != 0 || out != "bucket 3: on r1\n" {
		t.Errorf("bucket show 3: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runMain(t, "bucket", "show", "31", "--peer", addr)
	if code != exitUsage || !strings.Contains(errOut, "bucket 31 is outside [1, 30]") {
		t.Errorf("bucket show 31: exit %d, stderr %q", code, errOut)
	}
	// A key's bucket: the one its sharding key falls in.
	want, err := sharding.BucketOf([]tuple.Value{tuple.Uint(42)}, 30)
	if err != nil {
		t.Fatal(err)
	}
	rs := "r1"
	if want > 15 {
		rs = "r2"
	}
	code, out, errOut = runMain(t, "bucket", "show", "--space", "s", "--key", "[42]", "--peer", addr)
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("bucket %d: on %s\n", want, rs)) {
		t.Errorf("bucket show of key [42]: exit %d, want bucket %d on %s\n%s%s", code, want, rs, out, errOut)
	}
	// A sharding key's parts alone pick the bucket, as the whole primary
	// key does.
	want, err = sharding.BucketOf([]tuple.Value{tuple.String("eu")}, 30)
	if err != nil {
		t.Fatal(err)
	}
	rs = "r1"
	if want > 15 {
		rs = "r2"
	}
	for _, key := range []string{`["eu"]`, `["eu", 42]`} {
		code, out, errOut = runMain(t, "bucket", "show", "--space", "s2", "--key", key, "--peer", addr)
		if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("bucket %d: on %s\n", want, rs)) {
			t.Errorf("bucket show of s2's key %s: exit %d, want bucket %d on %s\n%s%s", key, code, want, rs, out, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		want string // all of stderr
	}{
		{[]string{}, "shardkit: give a BUCKET, or --space and --key: which bucket to show\n"},
		{[]string{"3", "--space", "s", "--key", "[42]"}, "shardkit: give a BUCKET, or --space and --key, not both\n"},
		{[]string{"3", "--key", "[42]"}, "shardkit: give a BUCKET, or --space and --key, not both\n"},
		{[]string{"--space", "s"}, "shardkit: --space needs --key: the key whose bucket to show, as a JSON array\n"},
		{[]string{"--key", "[42]"}, "shardkit: --key needs --space: the space whose sharding key --key gives\n"},
		{[]string{"--space", "s", "--key", `["x"]`}, ""},
		{[]string{"--space", "s2", "--key", `[42]`}, ""},
		{[]string{"--space", "s2", "--key", `["eu", 42, 1]`},
			"shardkit: bucket show: the key has 3 elements; it needs 2 (region, id) (the sharding key region:string, or the primary key: region:string, id:unsigned)\n"},
	} {
		code, _, errOut := runMain(t, append([]string{"bucket", "show", "--peer", addr}, tc.args...)...)
		if code != exitUsage || tc.want != "" && errOut != tc.want {
			t.Errorf("bucket show %v: exit %d, stderr %q; want %d, %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
	// A pinned bucket and a locked replicaset are shown so, with the
	// commands that undo them.
	st = balance(false)
	st.Replicasets[0].Locked = true
	st.Replicasets[1].Pinned, st.Replicasets[1].PinnedBuckets = 2, []uint32{16, 17}
	f.mu.Lock()
	f.resp = st
	f.mu.Unlock()
	code, out, errOut = runMain(t, "bucket", "show", "17", "--peer", addr)
	if code != 0 || out != "bucket 17: on r2\npinned to r2: the rebalancer leaves it there and a move of it is refused (shardkit bucket unpin 17)\n" {
		t.Errorf("bucket show 17, pinned: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "bucket", "show", "3", "--peer", addr)
	if code != 0 || out != "bucket 3: on r1\nr1 is locked: it neither sends nor receives buckets (shardkit replicaset unlock r1)\n" {
		t.Errorf("bucket show 3, r1 locked: exit %d\n%s%s", code, out, errOut)
	}
}

// A step still running says so every tick, and nothing after stop.
func TestProgressTickerSaysAStepIsAlive(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var buf strings.Builder
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	stop := progressTicker(w, "reshard copy", 20*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := strings.Count(buf.String(), "reshard copy: still running after ")
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, %d lines", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	mu.Lock()
	at := buf.Len()
	mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if buf.Len() != at {
		t.Errorf("written after stop: %q", buf.String()[at:])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// During a reshard (the rebalancer paused by its start), other settings
// do not name the pause or the rebalancer's switch, so both stand (and go
// as read, for a build before the names); the operator's own --enable or
// --disable names the switch alone, which group 0 takes as ending the
// pause (meta.MergeRebalancer), and sends the pause ended. The status
// says whose the pause is.
func TestRebalanceConfigKeepsAReshardsPause(t *testing.T) {
	t.Parallel()
	paused := balance(false)
	paused.Settings.Disabled, paused.Settings.PausedByReshard = true, true
	for _, c := range []struct {
		args        []string
		wantFields  string
		wantPaused  bool
		wantDisable bool
	}{
		{[]string{"--copy-rate", "4MiB"}, "copy_bytes_per_s", true, true},
		{[]string{"--disable"}, "disabled", false, true},
		{[]string{"--enable"}, "disabled", false, false},
	} {
		f := &fakeSharding{resp: paused}
		code, _, errOut := runMain(t, append([]string{"rebalance", "config", "--peer", f.serve(t)}, c.args...)...)
		f.mu.Lock()
		got, fields := f.last, strings.Join(f.lastFields, ",")
		f.mu.Unlock()
		if code != 0 || fields != c.wantFields || got.GetPausedByReshard() != c.wantPaused || got.GetDisabled() != c.wantDisable {
			t.Errorf("config %v: exit %d, sent %v naming %s; want naming %s, paused_by_reshard %v, disabled %v (%s)", c.args, code, got, fields, c.wantFields, c.wantPaused, c.wantDisable, errOut)
		}
	}
	code, out, _ := runMain(t, "rebalance", "status", "--peer", (&fakeSharding{resp: paused}).serve(t))
	if code != 0 || !strings.Contains(out, "rebalancer off for a reshard (reshard cleanup turns it on)") {
		t.Errorf("status of a paused rebalancer: exit %d\n%s", code, out)
	}
}

// --copy-pace off turns the copy's own pace off, auto on again; unset, it
// is not sent (group 0 keeps it); anything else is refused, naming the
// flag. The status and the config's echo show it.
func TestRebalanceConfigCopyPace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    []string
		was     bool
		wantOff bool
	}{
		{[]string{"--copy-pace", "off"}, false, true},
		{[]string{"--copy-pace", "auto"}, true, false},
	} {
		st := balance(false)
		st.Settings.CopyPaceOff = c.was
		f := &fakeSharding{resp: st}
		code, out, errOut := runMain(t, append([]string{"rebalance", "config", "--peer", f.serve(t)}, c.args...)...)
		f.mu.Lock()
		got := f.last
		f.mu.Unlock()
		want := map[bool]string{true: "copy-pace=off", false: "copy-pace=auto"}[c.wantOff]
		if code != 0 || got.GetCopyPaceOff() != c.wantOff || !strings.Contains(out, want) {
			t.Errorf("config %v (was off: %v): exit %d, sent %v, printed %q; want copy_pace_off %v (%s)", c.args, c.was, code, got, out, c.wantOff, errOut)
		}
	}
	f := &fakeSharding{resp: balance(false)}
	code, out, errOut := runMain(t, "rebalance", "config", "--peer", f.serve(t), "--copy-rate", "4MiB")
	f.mu.Lock()
	fields := strings.Join(f.lastFields, ",")
	f.mu.Unlock()
	if code != 0 || fields != "copy_bytes_per_s" || strings.Contains(out, "copy-pace") {
		t.Errorf("config --copy-rate 4MiB: exit %d, naming %s, printed %q; want the copy rate alone (%s)", code, fields, out, errOut)
	}
	if code, _, errOut := runMain(t, "rebalance", "config", "--peer", "127.0.0.1:1", "--copy-pace", "fast"); code == 0 || !strings.Contains(errOut, `invalid --copy-pace "fast"`) {
		t.Errorf("--copy-pace fast: exit %d: %s", code, errOut)
	}
	st := balance(false)
	st.Settings.CopyPaceOff = true
	code, out, _ = runMain(t, "rebalance", "status", "--peer", (&fakeSharding{resp: st}).serve(t))
	if code != 0 || !strings.Contains(out, "copy pace off)") {
		t.Errorf("status with the pace off: exit %d\n%s", code, out)
	}
}

// The NOTE column says why a replicaset stands apart from the balance.
func TestRebalanceStatusNotes(t *testing.T) {
	st := balance(false)
	st.Replicasets = append(st.Replicasets,
		&datav1.ReplicasetBalance{ReplicasetId: "r3", Weight: 1, Locked: true, Available: true},
		&datav1.ReplicasetBalance{ReplicasetId: "r4", Weight: 1, Buckets: 3},
		&datav1.ReplicasetBalance{ReplicasetId: "r5", Available: true},
		&datav1.ReplicasetBalance{ReplicasetId: "r6", Available: true, Buckets: 2, Target: 2, Pinned: 2, PinnedBuckets: []uint32{4, 9},
			DrainWaits: "the drain of r6 (weight 0) waits for its 2 pinned buckets, which the rebalancer never moves: unpin them (shardkit bucket unpin 4 9)"})
	var out strings.Builder
	if err := writeBalance(&out, st); err != nil {
		t.Fatal(err)
	}
	notes := map[string]string{"r3": "locked", "r4": "no quorum: fewer than a majority of its members in service", "r5": "weight 0, holds none",
		"r6": "drain waits for 2 pinned buckets (below)"}
	found := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if note, ok := notes[f[0]]; ok {
			found++
			if !strings.HasSuffix(strings.TrimRight(line, " "), note) {
				t.Errorf("%s's line %q does not end with its note %q", f[0], line, note)
			}
		}
	}
	if found != len(notes) {
		t.Errorf("%d of %d replicasets shown:\n%s", found, len(notes), out.String())
	}
	if !strings.HasSuffix(out.String(), "\n"+st.Replicasets[5].DrainWaits+"\n") {
		t.Errorf("the table does not end with r6's drain_waits:\n%s", out.String())
	}
}

// bucket pin and unpin take several buckets (the command a drain's status
// gives names every pinned bucket): each is done in turn and said; a
// refusal names its bucket; a wrong one on the command line is refused
// before any is asked.
func TestBucketPinAndUnpinTakeSeveralBuckets(t *testing.T) {
	t.Parallel()
	f := &fakeSharding{resp: balance(false)}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "bucket", "unpin", "4", "9", "--peer", addr)
	if code != 0 || out != "bucket 4: unpinned\nbucket 9: unpinned\n" {
		t.Errorf("unpin 4 9: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "bucket", "pin", "5", "31", "6", "--peer", addr)
	if code != exitUsage || out != "bucket 5: pinned\n" || !strings.HasPrefix(errOut, "shardkit: bucket pin: bucket 31: ") || !strings.Contains(errOut, "bucket 31 is outside [1, 30]") {
		t.Errorf("pin 5 31 6: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runMain(t, "bucket", "unpin", "7", "x", "--peer", addr)
	if code != exitUsage || !strings.Contains(errOut, `invalid bucket "x"`) {
		t.Errorf("unpin 7 x: exit %d: %s", code, errOut)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := strings.Join(f.pins, ", "); got != "unpin 4, unpin 9, pin 5, pin 31" {
		t.Errorf("calls: %s", got)
	}
}

// count and agree make a count's words agree with it.
func TestCountAgrees(t *testing.T) {
	t.Parallel()
	got := strings.Join([]string{count(1, "tuple"), count(0, "tuple"), count(uint32(2), "pinned bucket"), agree(1, "it", "them"), agree(int64(3), "it", "them")}, ", ")
	if want := "1 tuple, 0 tuples, 2 pinned buckets, it, them"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
