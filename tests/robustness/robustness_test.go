package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// Environment variables of a run (docs/testing.md, "Robustness").
const (
	envDuration = "SHARDKIT_ROBUSTNESS_DURATION" // traffic under faults, e.g. 10m (default 40s)
	envSeed     = "SHARDKIT_ROBUSTNESS_SEED"     // the clients' and the nemesis' random choices
	envOut      = "SHARDKIT_ROBUSTNESS_OUT"      // where a failed run leaves its report
	envClients  = "SHARDKIT_ROBUSTNESS_CLIENTS"  // concurrent clients (default 6)
	envKeys     = "SHARDKIT_ROBUSTNESS_KEYS"     // keys they share (default 8)
	envFaults   = "SHARDKIT_ROBUSTNESS_FAULTS"   // comma-separated subset of allFaults
	// envReplicasets: replicasets of three instances (default 1); with 2
	// or more, the keys' buckets also move between them at random.
	envReplicasets = "SHARDKIT_ROBUSTNESS_REPLICASETS"
	// envShared=1: the clients share one client.Client, which pipelines
	// their calls, writes too, into Multi calls.
	envShared = "SHARDKIT_ROBUSTNESS_SHARED"
	// envDefect switches a deliberate defect on (one of defects), to show
	// that the run fails with it: the check can fail.
	envDefect = "SHARDKIT_ROBUSTNESS_DEFECT"
)

const defaultDuration = 40 * time.Second

type runConfig struct {
	duration    time.Duration
	replicasets int
	seed        uint64
	out         string
	defect      string // a key of defects, or ""
	traffic     trafficConfig
	nemesis     nemesisConfig
}

// configFromEnv is a run's configuration: the defaults (with
// replicasets replicasets), changed by the environment variables.
func configFromEnv(t *testing.T, replicasets int) runConfig {
	t.Helper()
	cfg := runConfig{
		duration:    defaultDuration,
		replicasets: replicasets,
		seed:        uint64(time.Now().UnixNano()),
		out:         os.Getenv(envOut),
		traffic: trafficConfig{
			clients: 6, keys: 8,
			opTimeout: 10 * time.Second, attemptTimeout: 3 * time.Second, quickAttempt: 250 * time.Millisecond, readerReads: 100,
			shortOps: 20, shortTimeout: 2 * time.Second,
			pause: 20 * time.Millisecond,
		},
		nemesis: nemesisConfig{
			faults: allFaults, quiet: 4 * time.Second, hold: 6 * time.Second,
			recover: 2 * time.Minute, termTimeout: 40 * time.Second,
		},
	}
	switch v := os.Getenv(envShared); v {
	case "", "0":
	case "1", "multi":
		cfg.traffic.shared, cfg.traffic.sharedMulti = true, v == "multi"
	default:
		t.Fatalf("%s=%q: want 1 (one client, its data stream) or multi (one client, its Multi pipeline)", envShared, v)
	}
	if v := os.Getenv(envDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", envDuration, v)
		}
		cfg.duration = d
	}
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", envSeed, v)
		}
		cfg.seed = s
	}
	for name, p := range map[string]*int{envClients: &cfg.traffic.clients, envKeys: &cfg.traffic.keys, envReplicasets: &cfg.replicasets} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*p = n
		}
	}
	if !failpoints {
		// The network faults set the transport's failpoints.
		cfg.nemesis.faults = processFaults
	}
	if v := os.Getenv(envFaults); v != "" {
		cfg.nemesis.faults = nil
		for _, f := range strings.Split(v, ",") {
			if !slices.Contains(allFaults, f) {
				t.Fatalf("%s: unknown fault %q; want some of %s", envFaults, f, strings.Join(allFaults, ","))
			}
			if !failpoints && slices.Contains(networkFaults, f) {
				t.Fatalf("%s: fault %s cuts raft links through failpoints: run go test -tags failpoints", envFaults, f)
			}
			cfg.nemesis.faults = append(cfg.nemesis.faults, f)
		}
	}
	if v := os.Getenv(envDefect); v != "" {
		if _, ok := defects[v]; !ok {
			t.Fatalf("%s=%q: want one of %s", envDefect, v, strings.Join(slices.Sorted(maps.Keys(defects)), ", "))
		}
		if !failpoints {
			t.Fatalf("%s=%s is a failpoint of the binary: run go test -tags failpoints", envDefect, v)
		}
		cfg.defect = v
	}
	return cfg
}

// TestRobustness: clients insert, replace, CAS, delete and read a few
// shared keys through every instance of a 3-instance cluster (one
// replicaset, replication factor 3) while a nemesis kills workers and
// whole instances with SIGKILL, stalls instances with SIGSTOP, restarts
// them with SIGTERM, and cuts raft links (with failpoints). Then: every key's history is linearizable
// (porcupine), no write is applied twice, no acknowledged write is lost,
// no write that failed with ErrUnavailable is applied, the replicas
// converge, Count agrees with the keys present, a write sent again with
// its request id is answered and not applied again (resend_test.go), and
// each instance's data, stopped, keeps the state machine's rules
// (verifyData).
func TestRobustness(t *testing.T) {
	robustness(t, 1)
}

// TestRobustnessWithMoves is TestRobustness with two replicasets (six
// instances), the keys' buckets moved between them at random while the
// faults strike (moves_test.go), and an audit of the bucket records at
// the end.
func TestRobustnessWithMoves(t *testing.T) {
	robustness(t, 2)
}

// robustness runs the robustness test on replicasets replicasets (unless
// the environment names another number).
func robustness(t *testing.T, replicasets int) {
	t.Helper()
	if testing.Short() {
		t.Skip("the robustness test runs a cluster under faults for a minute or more; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the robustness test finds workers through /proc (Linux only)")
	}
	cfg := configFromEnv(t, replicasets)
	if d, ok := t.Deadline(); ok && time.Until(d) < cfg.duration+5*time.Minute {
		t.Fatalf("%s=%v does not fit the test's deadline (%v left; it needs the duration plus about 5 minutes): pass a larger -timeout",
			envDuration, cfg.duration, time.Until(d).Round(time.Second))
	}
	t.Logf("seed %d (%s=%d repeats the random choices; the timing is the machine's), duration %v, %d clients on %d keys, faults %s",
		cfg.seed, envSeed, cfg.seed, cfg.duration, cfg.traffic.clients, cfg.traffic.keys, strings.Join(cfg.nemesis.faults, ","))

	logDir := t.TempDir()
	if cfg.out != "" {
		logDir = filepath.Join(cfg.out, fmt.Sprintf("run-%s-seed%d", time.Now().Format("20060102-150405"), cfg.seed))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	if cfg.defect != "" {
		t.Logf("deliberate defect %s (%s): this run must fail", cfg.defect, defects[cfg.defect])
		env = append(env, envFailpoints+"="+defects[cfg.defect])
	}
	c := newCluster(t, 3*cfg.replicasets, 3, logDir, env)
	r := &run{t: t, cfg: cfg, c: c, h: newHistory(), logDir: logDir}
	defer r.dumpOnFailure()
	if cfg.out != "" {
		// Registered after the cluster's cleanup, so it runs before it
		// kills the instances; the logs are removed only when all passed.
		t.Cleanup(func() {
			if !t.Failed() {
				for _, inst := range c.insts {
					inst.Kill()
				}
				_ = os.RemoveAll(logDir)
			}
		})
	}

	c.startAll()
	ctx := context.Background()
	if err := c.waitHealthy(ctx, 3*time.Minute); err != nil {
		t.Fatalf("the cluster did not come up: %v", err)
	}
	if cfg.replicasets > 1 {
		// The random moves below are the test's; the rebalancer's 1500
		// would keep the run from ending with no move in flight.
		if err := c.admin.Sharding().SetRebalancer(ctx, &datav1.RebalancerSettings{Disabled: true}, "disabled"); err != nil {
			t.Fatalf("disable the rebalancer: %v", err)
		}
	}
	r.prepare(ctx)
	// Last of all, with the instances stopped: each database checked.
	defer c.verifyData()
	defer func() {
		if r.cfg.replicasets > 1 && !t.Failed() {
			r.auditBuckets(ctx)
		}
	}()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	r.watch = newWatcher(r.c.addrs, r.cfg.seed, r.keyBuckets(ctx))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		r.watch.run(wctx)
	}()
	// A cluster that does not become whole again, or a final read that
	// keeps failing, fails the run, but the history is checked anyway.
	if r.traffic(ctx) {
		r.finalState(ctx)
		r.checkWatch()
	}
	stopWatch()
	<-watchDone
	r.verify()
}

// keyBuckets returns the buckets of the clients' keys.
func (r *run) keyBuckets(ctx context.Context) []uint32 {
	var out []uint32
	for k := range uint64(r.cfg.traffic.keys) {
		b, err := r.c.admin.Space(spaceName).Bucket(ctx, tuple.Uint(k+1))
		if err != nil {
			r.t.Fatalf("the bucket of key %d: %v", k+1, err)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// checkWatch waits (a minute at most) for the watch to show every
// acknowledged write, then checks what it saw (watcher.check).
func (r *run) checkWatch() {
	t := r.t
	recs := r.h.records()
	deadline := time.Now().Add(time.Minute)
	missing := r.watch.missing(recs)
	for len(missing) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		missing = r.watch.missing(recs)
	}
	for i, m := range missing {
		if i == 10 {
			t.Errorf("watch: ... and %d more acknowledged writes it never showed", len(missing)-10)
			break
		}
		t.Errorf("watch: an acknowledged write it never showed: %s", m)
	}
	for _, p := range r.watch.check(recs) {
		t.Errorf("watch: %s", p)
	}
	r.watch.mu.Lock()
	t.Logf("watch: %d buckets, %d values and %d deletes seen, stopped and resumed %d times", len(r.watch.seen), len(r.watch.values), len(r.watch.deletes), r.watch.restarts)
	r.watch.mu.Unlock()
}

// run is one robustness run's state, for the steps and the report.
type run struct {
	t      *testing.T
	cfg    runConfig
	c      *cluster
	h      *history
	logDir string
	nem    *nemesis
	watch  *watcher

	final   map[uint64]output
	verdict *verdict
	recs    []record
}

// prepare creates the space and waits until a write goes through.
func (r *run) prepare(ctx context.Context) {
	t := r.t
	deadline := time.Now().Add(2 * time.Minute)
	var err error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = r.c.admin.CreateSpace(cctx, spaceDef, true)
		if err == nil {
			_, err = r.c.admin.CreateSpace(cctx, resendSpaceDef, true)
		}
		if err == nil {
			// A key outside the clients' range: the first write proves
			// that buckets and schema reached the replicaset.
			_, err = r.c.admin.Space(spaceName).Replace(cctx, tuple.Tuple{tuple.Uint(0), tuple.String("probe")})
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("cannot create space %s and write to it: %v", spaceName, err)
}

// traffic runs the clients and the nemesis for the configured duration,
// heals the cluster, and stops the clients once it is whole; false when
// it did not become whole.
func (r *run) traffic(ctx context.Context) bool {
	t := r.t
	stop := make(chan struct{})
	var wg sync.WaitGroup
	clientErrs := make(chan error, r.cfg.traffic.clients)
	var shared *client.Client
	if r.cfg.traffic.shared {
		var err error
		// The data stream (the default) or, with "multi", the Multi
		// pipeline with writes too: either carries writes, CAS and reads
		// of several clients together under the faults.
		cfg := client.Config{Peers: r.c.addrs, Timeout: r.cfg.traffic.attemptTimeout}
		if r.cfg.traffic.sharedMulti {
			cfg.DisableStream, cfg.PipelineWrites = true, true
		}
		if shared, err = client.New(ctx, cfg); err != nil {
			t.Fatalf("the shared client: %v", err)
		}
		defer shared.Close()
	}
	for id := range r.cfg.traffic.clients {
		wg.Go(func() {
			if err := runClient(id, r.cfg.seed, r.cfg.traffic, r.c.addrs, r.c.names(), r.h, shared, stop); err != nil {
				clientErrs <- err
			}
		})
	}
	var resends resendStats
	wg.Go(func() { resends = r.resend(ctx, stop) })
	stopClients := func() {
		close(stop)
		wg.Wait()
		close(clientErrs)
		for err := range clientErrs {
			t.Errorf("client: %v", err)
		}
		t.Logf("resends: %d writes acknowledged, %d sent again and answered, %d with the first answer", resends.written, resends.resent, resends.same)
		for i, p := range resends.problems {
			if i == 10 {
				t.Errorf("resend: ... and %d more", len(resends.problems)-10)
				break
			}
			t.Errorf("resend: %s", p)
		}
	}
	r.nem = newNemesis(r.c, r.cfg.nemesis, r.cfg.seed, r.h, t.Logf)
	nctx, cancel := context.WithTimeout(ctx, r.cfg.duration+r.cfg.nemesis.recover+2*time.Minute)
	defer cancel()
	var moves moveStats
	stopMoves := make(chan struct{})
	movesDone := make(chan struct{})
	if r.cfg.replicasets > 1 {
		go func() {
			defer close(movesDone)
			moves = r.moveBuckets(nctx, stopMoves)
		}()
	} else {
		close(movesDone)
	}
	nemErr := r.nem.run(nctx, time.Now().Add(r.cfg.duration))
	close(stopMoves)
	<-movesDone
	if r.cfg.replicasets > 1 {
		t.Logf("bucket moves asked: %d, refused: %d (the last refusal: %s)", moves.asked, moves.refused, moves.last)
	}
	healErr := r.c.heal()
	var wholeErr error
	if healErr == nil {
		wholeErr = r.c.waitHealthy(ctx, r.cfg.nemesis.recover)
	}
	stopClients()
	_, counts := r.nem.history()
	t.Logf("faults injected: %v", counts)
	if nemErr != nil {
		t.Errorf("nemesis: %v", nemErr)
	}
	if err := errors.Join(healErr, wholeErr); err != nil {
		t.Errorf("after the faults: %v", err)
		return false
	}
	return true
}

// finalState reads every key on the healed cluster (recorded as one more
// client), then checks that every replica converges to it and that
// Count agrees.
func (r *run) finalState(ctx context.Context) {
	t := r.t
	final := map[uint64]output{}
	r.final = final
	sp := r.c.admin.Space(spaceName)
	id := r.cfg.traffic.clients
	for k := uint64(1); k <= uint64(r.cfg.traffic.keys); k++ {
		deadline := time.Now().Add(time.Minute)
		for {
			rec := doOp(sp, 10*time.Second, r.h, input{Kind: opRead, Key: k}, false)
			rec.Client, rec.Seq = id, int(k)
			r.h.add(rec)
			if rec.Class == clsDone {
				final[k] = rec.Out
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the final read of k%d keeps failing on a whole cluster: %s", k, rec.Err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	present := uint64(0)
	for _, o := range final {
		if o.Found {
			present++
		}
	}
	// Key 0 holds the probe written before the traffic.
	present++

	// Every replica, read locally (ro on the instance itself), reaches
	// the final state.
	deadline := time.Now().Add(time.Minute)
	for {
		diff := r.divergence(ctx, final)
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("replicas do not converge within a minute of the faults ending: %s", diff)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	deadline = time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := r.c.admin.Count(cctx, spaceName)
		cancel()
		if err == nil {
			if n != present {
				t.Errorf("Count(%s) = %d, but %d keys are present (k0 and %d of k1..k%d)", spaceName, n, present, present-1, r.cfg.traffic.keys)
				r.countDiagnosis(ctx, final)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("Count keeps failing on a whole cluster: %v", err)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// countDiagnosis logs, after a Count that disagrees with the keys
// present, what each replicaset counts and in which bucket each present
// key is, so that the instance logs' "bucket state" lines name the
// replicaset and the moves of the bucket whose count is off.
func (r *run) countDiagnosis(ctx context.Context, final map[uint64]output) {
	t := r.t
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := r.c.admin.MapCall(cctx, "count_buckets", tuple.Tuple{tuple.String(spaceName)}, client.RW) // [tuples, buckets held, their digest]
	for _, rr := range res {
		t.Logf("count diagnosis: replicaset %s counts %v (err %v)", rr.Replicaset, rr.Result, rr.Err)
	}
	if err != nil {
		t.Logf("count diagnosis: map-call count_buckets: %v", err)
	}
	sp := r.c.admin.Space(spaceName)
	for k := uint64(0); k <= uint64(r.cfg.traffic.keys); k++ {
		if k > 0 && !final[k].Found {
			continue
		}
		b, err := sp.Bucket(cctx, tuple.Uint(k))
		t.Logf("count diagnosis: k%d is present, in bucket %d (err %v)", k, b, err)
	}
}

// divergence reads every key on every instance locally (ro) and says
// where a replica differs from final ("" when none does).
func (r *run) divergence(ctx context.Context, final map[uint64]output) string {
	var diffs []string
	for _, inst := range r.c.insts {
		conn, err := r.c.admin.Conn(inst.Listen)
		if err != nil {
			return err.Error()
		}
		dc := datav1.NewDataServiceClient(conn)
		for _, k := range slices.Sorted(maps.Keys(final)) {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := dc.Get(gctx, &datav1.GetRequest{Space: spaceName, Key: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k)}), Mode: datav1.Mode_MODE_RO})
			cancel()
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("%s k%d: %v", inst.Name, k, err))
				continue
			}
			got := output{Result: resOK, Found: resp.GetFound(), Version: resp.GetVersion()}
			if resp.GetFound() {
				t, err := tuple.DecodeTuple(resp.GetTuple())
				if err == nil {
					got.Value, err = valueOf(t)
				}
				if err != nil {
					got.Value = "<" + err.Error() + ">"
				}
			}
			if want := final[k]; got != want {
				diffs = append(diffs, fmt.Sprintf("%s has k%d=%s, the leader %s (served by %s, applied %d)",
					inst.Name, k, describeFinal(got), describeFinal(want), resp.GetInfo().GetInstanceId(), resp.GetInfo().GetAppliedIndex()))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

// verify checks the history and the instance logs.
func (r *run) verify() {
	t := r.t
	for _, line := range r.c.scanLogs() {
		t.Errorf("instance log: %s", line)
	}
	r.recs = r.h.records()
	stats := map[string]int{}
	done := 0
	// patient: the operations that failed or ended unknown after trying
	// for the default deadline of a call (5 s) or longer: the cluster did
	// not recover within it. The others gave up sooner (the traffic's
	// short deadlines, a refusal).
	patient := 0
	for _, rec := range r.recs {
		ended := rec.Return
		if rec.Ended != 0 {
			ended = rec.Ended // a write of unknown outcome: when the client gave up
		}
		if rec.Class != clsDone && rec.Class != clsStaleRead && time.Duration(ended-rec.Call) >= 5*time.Second {
			patient++
		}
		what := rec.In.Kind.String()
		if rec.Class == clsStaleRead {
			what = "ro-read"
		}
		switch {
		case rec.Class == clsDone && rec.Out.Result == resOK:
			what += " ok"
			done++
		case rec.Class == clsDone:
			what += " refused"
			done++
		default:
			what += " " + rec.Class.String()
		}
		stats[what]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(stats)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, stats[k]))
	}
	t.Logf("operations: %d (%s); %d failed or unknown after trying 5 s or more", len(r.recs), strings.Join(parts, ", "), patient)
	if done < 50 {
		t.Errorf("only %d operations got an answer: the run checked too little", done)
	}
	timeout := max(2*time.Minute, r.cfg.duration)
	began := time.Now()
	r.verdict = check(r.recs, r.final, timeout)
	logVerdict(t, r.verdict, timeout, time.Since(began))
}

// logVerdict reports a verdict: its problems as errors.
func logVerdict(t *testing.T, v *verdict, timeout, took time.Duration) {
	t.Helper()
	t.Logf("porcupine: %s (%s, %d operations), %.1fs", v.Linearizable.Result, v.Linearizable.Stage, v.Linearizable.Checked, took.Seconds())
	for _, p := range v.Problems {
		t.Errorf("%s", p)
	}
	switch v.Linearizable.Result {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("the history is not linearizable (even with every write that failed without a definite answer possibly applied)")
	default:
		t.Errorf("porcupine did not finish within %v: the history is unchecked", timeout)
	}
	if v.Contract != nil {
		switch v.Contract.Result {
		case porcupine.Ok:
		case porcupine.Illegal:
			t.Errorf("the history is linearizable only if some writes that failed with ErrUnavailable (\"nothing was done\") were applied")
			for _, c := range v.Culprits {
				t.Errorf("%s", c)
			}
		default:
			t.Errorf("porcupine did not finish within %v on the history with ErrUnavailable writes not applied", timeout)
		}
	}
}

// TestRecheck checks a history a failed run saved (history.json in its
// report) again: SHARDKIT_ROBUSTNESS_HISTORY=path/history.json.
func TestRecheck(t *testing.T) {
	path := os.Getenv("SHARDKIT_ROBUSTNESS_HISTORY")
	if path == "" {
		t.Skip("SHARDKIT_ROBUSTNESS_HISTORY not set (a history.json of a robustness run's report)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var saved savedHistory
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	t.Logf("%s: %d operations, %d nemesis events", path, len(saved.Records), len(saved.Events))
	began := time.Now()
	v := check(saved.Records, saved.Final, 10*time.Minute)
	logVerdict(t, v, 10*time.Minute, time.Since(began))
}

// dumpOnFailure leaves the report of a failed run: the seed, the history,
// the nemesis' events, porcupine's visualization, the instances' logs
// (and their tails in the test output).
func (r *run) dumpOnFailure() {
	t := r.t
	if !t.Failed() {
		return
	}
	dir := r.logDir
	if r.cfg.out == "" {
		var err error
		if dir, err = os.MkdirTemp("", "shardkit-robustness-"); err != nil {
			t.Logf("cannot write the report: %v", err)
			return
		}
		if err := r.c.copyLogs(dir); err != nil {
			t.Logf("copying the instance logs: %v", err)
		}
	}
	recs := r.recs
	if recs == nil {
		recs = r.h.records()
	}
	var events []event
	if r.nem != nil {
		events, _ = r.nem.history()
	}
	files, err := report(dir, recs, r.final, events, r.verdict)
	if err != nil {
		t.Logf("writing the report: %v", err)
	}
	if r.watch != nil {
		p := filepath.Join(dir, "watch.txt")
		if err := os.WriteFile(p, r.watch.dump(), 0o644); err != nil {
			t.Logf("writing the watch's view: %v", err)
		} else {
			files = append(files, p)
		}
	}
	for _, inst := range r.c.insts {
		t.Logf("---- %s (%s) log tail ----\n%s", inst.Name, inst.Listen, inst.LogTail(40))
	}
	t.Logf("FAILED with seed %d (%s=%d); report in %s: %s and the instance logs", r.cfg.seed, envSeed, r.cfg.seed, dir, strings.Join(files, ", "))
}
