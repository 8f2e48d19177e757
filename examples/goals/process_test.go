package goals_test

// Real-process tests: goals-server and goals-client are built once per test
// run and started as subprocesses on loopback; every process a test starts
// is killed (with its process group) when the test ends, pass or fail.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/examples/goals"
	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goals-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bin returns the path of a built command, building both once.
func bin(tb testing.TB, name string) string {
	tb.Helper()
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", binDir+string(os.PathSeparator), "./cmd/goals-server", "./cmd/goals-client")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// backend is where the lease table lives.
type backend struct {
	name, driver, env string
}

var backends = []backend{
	{"sqlite", "sqlite", ""},
	{"mariadb", "mysql", "SHARDKIT_TEST_MYSQL_DSN"},
	{"postgres", "postgres", "SHARDKIT_TEST_POSTGRES_DSN"},
	{"shardkit", "shardkit", ""}, // a one-instance cluster in this test process
}

// world is one test's lease table, goals database and servers.
type world struct {
	t                 testing.TB
	dir               string
	driver, dsn       string
	table             string
	goalsDSN          string
	counters, perCtr  int
	store             lease.Store
	expected          *goals.Rules
	ttl, ping, margin time.Duration
}

func randomName(tb testing.TB) string {
	tb.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func newWorld(tb testing.TB, be backend, dcs []string, shards int) *world {
	tb.Helper()
	t := tb
	w := &world{t: t, dir: t.TempDir(), driver: be.driver, counters: 60, perCtr: 6,
		// Leases survive ~3 s of stalled pings (a -race process on a loaded
		// machine) yet expire soon enough for the takeover tests.
		ttl: 4 * time.Second, ping: 500 * time.Millisecond, margin: time.Second}
	w.table = "leases_" + randomName(t)
	switch {
	case be.driver == "shardkit":
		w.dsn = servertest.OneInstanceCluster(t)
	case be.env == "":
		w.dsn = filepath.Join(w.dir, "leases.db")
	default:
		w.dsn = os.Getenv(be.env)
		if w.dsn == "" {
			t.Skipf("%s is unset; run: eval \"$(bash scripts/services.sh env)\"", be.env)
		}
	}
	store, err := lease.Open(w.driver, w.dsn, w.table)
	if err != nil {
		t.Fatal(err)
	}
	w.store = store
	t.Cleanup(func() {
		if sqlStore, ok := store.(*lease.SQLStore); ok && be.env != "" {
			sqlStore.DB().Exec("DROP TABLE " + w.table) //nolint:errcheck // best effort on a shared server
		}
		store.Close()
	})
	ranges, err := goals.DemoRanges(w.counters, shards)
	if err != nil {
		t.Fatal(err)
	}
	for _, dc := range dcs {
		if err := store.Init(t.Context(), dc, ranges); err != nil {
			t.Fatalf("init leases: %v", err)
		}
	}
	w.goalsDSN = filepath.Join(w.dir, "goals.db")
	dsn, _ := lease.SQLiteDSN(w.goalsDSN)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := goals.SeedDemo(t.Context(), db, "goals", w.counters, w.perCtr, func(int) string { return "?" }); err != nil {
		t.Fatal(err)
	}
	w.expected, err = goals.NewRules(goals.DemoGoals(w.counters, w.perCtr))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// proc is one started goals-server.
type proc struct {
	dc, addr, logPath string
	cmd               *exec.Cmd
	done              chan struct{}
	waitErr           error
}

func (w *world) start(dc string, extra ...string) *proc {
	t := w.t
	t.Helper()
	n := randomName(t)
	p := &proc{dc: dc, logPath: filepath.Join(w.dir, "server-"+n+".log"), done: make(chan struct{})}
	addrFile := filepath.Join(w.dir, "addr-"+n)
	args := append([]string{"serve", "--dc", dc, "--listen", "127.0.0.1:0", "--addr-file", addrFile,
		"--lease-driver", w.driver, "--lease-dsn", w.dsn, "--lease-table", w.table, "--goals-dsn", w.goalsDSN,
		"--lease-ttl", w.ttl.String(), "--lease-ping", w.ping.String(), "--lease-margin", w.margin.String()}, extra...)
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin(t, "goals-server"), args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		pgid := p.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGCONT) //nolint:errcheck // may be gone
		syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck // may be gone
		<-p.done
		if t.Failed() {
			out, _ := os.ReadFile(p.logPath)
			t.Logf("log of goals-server %s %s:\n%s", dc, p.addr, out)
		}
	})
	poll(t, "goals-server to write its address", func() bool {
		select {
		case <-p.done:
			out, _ := os.ReadFile(p.logPath)
			t.Fatalf("goals-server exited early (%v):\n%s", p.waitErr, out)
		default:
		}
		b, err := os.ReadFile(addrFile)
		p.addr = string(b)
		return err == nil && p.addr != ""
	})
	return p
}

func (p *proc) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		tb.Fatalf("kill -%v %s: %v", sig, p.addr, err)
	}
}

// exitCode waits for the process to end and returns its exit status.
func (p *proc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("goals-server %s still running after %v", p.addr, within)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		t.Fatalf("wait: %v", p.waitErr)
	}
	return 0
}

// shardOf pings addr with an empty request and returns the shard it holds.
func shardOf(ctx context.Context, addr string) (cache.Shard, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return cache.Shard{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := goalsv1.NewGoalsMatcherServiceClient(conn).MatchSharded(ctx, &goalsv1.MatchShardedRequest{})
	if err != nil {
		return cache.Shard{}, err
	}
	return cache.ShardFromProto(resp.GetShard())
}

func (w *world) waitServing(ps ...*proc) map[*proc]cache.Shard {
	w.t.Helper()
	out := map[*proc]cache.Shard{}
	for _, p := range ps {
		poll(w.t, "goals-server "+p.addr+" to serve", func() bool {
			s, err := shardOf(w.t.Context(), p.addr)
			out[p] = s
			return err == nil
		})
	}
	return out
}

func endpoints(ps []*proc) []cache.Endpoint {
	var eps []cache.Endpoint
	for _, p := range ps {
		eps = append(eps, cache.Endpoint{DC: p.dc, Addr: p.addr})
	}
	return eps
}

func poll(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after 30s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *world) checkGets(c *goals.Client, from, n int) {
	w.t.Helper()
	for i := range n {
		hits := make([]*goalsv1.Hit, 20)
		for j := range hits {
			hits[j] = goals.DemoHit((from+i)*len(hits)+j, w.counters, w.perCtr)
		}
		ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
		got, err := c.Get(ctx, hits)
		cancel()
		if err != nil {
			w.t.Fatalf("Get %d: %v", from+i, err)
		}
		for _, h := range hits {
			if want := w.expected.Match(h.GetCounterId(), h.GetUrl()); !goals.Equal(got[h.GetWatchId()], want) {
				w.t.Fatalf("Get %d: hit %v matched %v, want %v", from+i, h, got[h.GetWatchId()], want)
			}
		}
	}
}

// TestEndToEndSlowAndKilledReplica: 2 DCs x 3 shards; one replica answers
// 300 ms late, another is killed -9 mid-run; every Get succeeds with the
// right goals.
func TestEndToEndSlowAndKilledReplica(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, be, []string{"dc1", "dc2"}, 3)
			var ps []*proc
			for i := range 6 {
				dc := []string{"dc1", "dc2"}[i/3]
				var extra []string
				if i == 0 {
					extra = []string{"--delay", "300ms"}
				}
				ps = append(ps, w.start(dc, extra...))
			}
			held := w.waitServing(ps...)
			for i, p := range ps {
				for _, q := range ps[i+1:] {
					if p.dc == q.dc && held[p].Range() == held[q].Range() {
						t.Fatalf("%s and %s both hold %v in %s", p.addr, q.addr, held[p], p.dc)
					}
				}
			}
			reg := prometheus.NewRegistry()
			c, err := cache.New(t.Context(), goals.Description(), cache.Options{
				Resolver: cache.StaticResolver(endpoints(ps)...), PingPeriod: 100 * time.Millisecond, Registerer: reg,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Four goroutines of Gets; one replica is killed -9 while they run.
			loadDone := make(chan goals.LoadResult, 1)
			go func() {
				loadDone <- goals.RunLoad(t.Context(), c, goals.LoadConfig{
					Requests: 400, Concurrency: 4, Batch: 20, Counters: w.counters, PerCounter: w.perCtr,
					Timeout: 10 * time.Second, Expected: w.expected,
				})
			}()
			poll(t, "the first 50 Gets", func() bool {
				sent, _ := goals.RequestCounts(reg)
				return sent >= 50*6
			})
			ps[4].signal(t, syscall.SIGKILL)
			res := <-loadDone
			if res.Errors != 0 || res.Mismatches != 0 || res.Latency.TotalCount() != 400 {
				t.Fatalf("load with a slow and a killed replica: %s (first error: %v)", res.Summary(), res.FirstError)
			}
			t.Logf("load with a slow and a killed replica: %s", res.Summary())
			w.checkGets(c, 1000, 20)

			// The command-line client, through a hosts file.
			hosts := filepath.Join(w.dir, "hosts")
			var lines []string
			for _, p := range ps {
				lines = append(lines, p.dc+" "+p.addr)
			}
			if err := os.WriteFile(hosts, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin(t, "goals-client"), "get", "--hosts", hosts, "--demo", "40",
				"--counters", fmt.Sprint(w.counters), "--goals", fmt.Sprint(w.perCtr), "--check").CombinedOutput()
			if err != nil || strings.Count(string(out), "\n") != 40 {
				t.Fatalf("goals-client get: %v\n%s", err, out)
			}
		})
	}
}

// TestKillHolderLetsAnotherTakeOver: a holder killed -9 loses its shard to
// a waiting server after the TTL, at the next epoch.
func TestKillHolderLetsAnotherTakeOver(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, be, []string{"dc1"}, 2)
			a, b := w.start("dc1"), w.start("dc1")
			held := w.waitServing(a, b)
			spare := w.start("dc1")
			victim := a
			killed := time.Now()
			victim.signal(t, syscall.SIGKILL)
			var got cache.Shard
			poll(t, "the spare server to take the killed holder's shard", func() bool {
				s, err := shardOf(t.Context(), spare.addr)
				got = s
				return err == nil
			})
			t.Logf("takeover after kill -9: %v (TTL %v)", time.Since(killed).Round(time.Millisecond), w.ttl)
			if got.Range() != held[victim].Range() || got.Epoch != held[victim].Epoch+1 {
				t.Fatalf("spare holds %v, want %v at epoch %d", got, held[victim].Range(), held[victim].Epoch+1)
			}
			rows, err := w.store.Rows(t.Context(), "dc1")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Range == got.Range() && (r.Host != spare.addr || r.Epoch != got.Epoch) {
					t.Fatalf("lease row %+v, want held by %s at epoch %d", r, spare.addr, got.Epoch)
				}
			}
			if s, err := shardOf(t.Context(), b.addr); err != nil || s != held[b] {
				t.Fatalf("the other holder changed: %v %v", s, err)
			}
		})
	}
}

// TestPausedHolderStopsAndAborts: a holder stopped (SIGSTOP) past its TTL
// answers nothing once resumed and exits with status 3; the shard ends up
// with the waiting server at the next epoch. (On SQLite the waiting server
// may only get it after the resume: a process frozen while it holds the
// database's write lock blocks every writer until it runs again.)
func TestPausedHolderStopsAndAborts(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, be, []string{"dc1"}, 1)
			a := w.start("dc1")
			held := w.waitServing(a)[a]
			b := w.start("dc1")
			a.signal(t, syscall.SIGSTOP)
			poll(t, "the paused holder's lease to expire or move", func() bool {
				rows, err := w.store.Rows(t.Context(), "dc1")
				return err == nil && (rows[0].Expired || rows[0].Epoch > held.Epoch)
			})
			a.signal(t, syscall.SIGCONT)
			if s, err := shardOf(t.Context(), a.addr); err == nil {
				t.Fatalf("the resumed holder answered with %v; it must answer nothing", s)
			}
			if code := a.exitCode(t, 20*time.Second); code != 3 {
				out, _ := os.ReadFile(a.logPath)
				t.Fatalf("resumed holder exited with %d, want 3 (lease lost):\n%s", code, out)
			}
			poll(t, "the waiting server to serve the shard at the next epoch", func() bool {
				s, err := shardOf(t.Context(), b.addr)
				return err == nil && s.Epoch == held.Epoch+1
			})
		})
	}
}

// TestSixServersRaceForThreeShards: six goals-servers started at once in
// one DC of three shards: each shard is held and served exactly once, the
// other three servers answer nothing.
func TestSixServersRaceForThreeShards(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, be, []string{"dc1"}, 3)
			var ps []*proc
			for range 6 {
				ps = append(ps, w.start("dc1"))
			}
			serving := map[lease.Range]*proc{}
			poll(t, "three servers to serve", func() bool {
				clear(serving)
				for _, p := range ps {
					s, err := shardOf(t.Context(), p.addr)
					if err != nil {
						continue
					}
					if q, dup := serving[s.Range()]; dup {
						t.Fatalf("%s and %s both serve %v", q.addr, p.addr, s)
					}
					serving[s.Range()] = p
				}
				return len(serving) == 3
			})
			rows, err := w.store.Rows(t.Context(), "dc1")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				p := serving[r.Range]
				if p == nil || r.Host != p.addr || r.Expired {
					t.Fatalf("lease row %+v does not match the server of its range", r)
				}
			}
		})
	}
}

// TestServerRefusesALeaseTableThatIsNotThere: goals-server refuses, with
// the usage exit status and the command that makes the table, a SQLite
// lease database that does not exist (and does not create it), a database
// without the table, and a table without the server's DC.
func TestServerRefusesALeaseTableThatIsNotThere(t *testing.T) {
	t.Parallel()
	w := newWorld(t, backends[0], []string{"dc1"}, 2)
	empty := filepath.Join(w.dir, "empty.db")
	db, err := sql.Open("sqlite", empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE other (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	nosuch := filepath.Join(w.dir, "nosuch.db")
	tests := []struct {
		name, dsn, dc, words string
	}{
		{"a database file that does not exist", nosuch, "dc1", "does not exist"},
		{"a database without the table", empty, "dc1", "has no shards for dc"},
		{"a table without the server's dc", w.dsn, "dc2", "has no shards for dc \"dc2\""},
	}
	server := bin(t, "goals-server") // built (once) before any deadline starts
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		cmd := exec.CommandContext(ctx, server, "serve", "--dc", tc.dc, "--listen", "127.0.0.1:0",
			"--lease-dsn", tc.dsn, "--lease-table", w.table, "--goals-dsn", w.goalsDSN)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.words) || !strings.Contains(string(out), "shardkit cache init-leases") {
			t.Errorf("%s: %v, want exit status 2 saying %q and how to create the table:\n%s", tc.name, err, tc.words, out)
		}
		if strings.Contains(string(out), "listening") {
			t.Errorf("%s: the server listened before refusing:\n%s", tc.name, out)
		}
	}
	if _, err := os.Stat(nosuch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("goals-server created %s: %v", nosuch, err)
	}
}

// TestClientPrintsTheAnsweredHitsWhenSomeAreMissing: with one of two
// shards served, goals-client get prints the hits of the served shard
// (their goals right) and fails naming the others.
func TestClientPrintsTheAnsweredHitsWhenSomeAreMissing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, backends[0], []string{"dc1"}, 2)
	p := w.start("dc1")
	held := w.waitServing(p)[p]
	hosts := filepath.Join(w.dir, "hosts")
	if err := os.WriteFile(hosts, []byte("dc1 "+p.addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	demo := w.counters // one hit per counter: both shards have some
	answered := 0
	for i := range demo {
		if held.Range().Contains(goals.DemoHit(i, w.counters, w.perCtr).GetCounterId()) {
			answered++
		}
	}
	if answered == 0 || answered == demo {
		t.Fatalf("%d of %d demo hits on the served shard %v: the test needs both kinds", answered, demo, held)
	}
	cmd := exec.Command(bin(t, "goals-client"), "get", "--hosts", hosts, "--demo", fmt.Sprint(demo), "--timeout", "3s",
		"--counters", fmt.Sprint(w.counters), "--goals", fmt.Sprint(w.perCtr), "--check")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("goals-client get with a shard unserved: %v, want exit status 1\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != answered {
		t.Fatalf("printed %d lines, want the %d answered hits:\n%s\nstderr: %s", len(lines), answered, stdout.String(), stderr.String())
	}
	for _, l := range lines {
		var watch, counter uint64
		if _, err := fmt.Sscan(l, &watch, &counter); err != nil || !held.Range().Contains(counter) {
			t.Fatalf("line %q is not a hit of the served shard %v", l, held)
		}
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("%d hits have no answer", demo-answered)) || !strings.Contains(stderr.String(), "no answer for") {
		t.Fatalf("stderr does not name the unanswered hits: %s", stderr.String())
	}
}
