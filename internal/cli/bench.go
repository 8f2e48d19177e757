package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/bench"
)

type benchOptions struct {
	peers      string
	cfg        bench.Config
	format     string
	progress   bool
	cpuprofile string
	pipelining bool
	stream     bool
	sec        securityFlags
}

func newBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load the cluster's data layer and print ops/s, errors and latency percentiles",
		Long: `Runs --clients concurrent calls of the public client against a space for
--count operations or for --duration, and prints ops/s, errors and the
p50/p99/p99.9 latency of the successful calls.

Workloads (keys are unsigned integers 0..--keys-1):
  insert   walks the key range once, in order, shared by the clients
           (--keys N --count N loads N distinct rows)
  replace  writes keys drawn uniformly from the range
  get      linearizable reads (at the replicaset leader) of keys drawn
           uniformly; every key is written first, untimed (--preload)
  mixed    each operation a get (50%) or a replace (50%) of a uniformly
           drawn key; preloaded like get
  scan     each client reads the whole space (client Space.Scan, pages of
           --page-size rows), again from the start when it ends; an
           operation is a row, a latency a page's; preloaded like get
           (--keys 1000000 --count 1000000: an export of a million rows)
  range    each operation reads --page-size rows of a bucket drawn
           uniformly (client Space.Range, at the leader); reads counts
           the rows; preloaded like get

Without --space it uses the space "bench" (key unsigned, the primary key;
value bytes), made when missing; a named space is made with that definition
when missing and must have it when it exists. The clients share --conns
connections (one client per connection); each call has a --timeout deadline.
With --pipelining (the default) a client's writes and point reads to one
instance go on one data stream (--stream=false: the point reads share Multi
calls instead, writes too with --pipeline-writes); --pipelining=false makes
each call its own RPC.
With --rate N the calls are paced: N operations a second in all, each client
on a fixed schedule, and a call's latency is counted from when the schedule
had it start (a call held up by a slow one before it counts its wait, as
wrk2 measures): the latency of a given load, not of as much load as the
cluster takes. Without --rate each client calls again as soon as it is
answered (a closed loop: the latencies of a saturated cluster).
Progress goes to stderr once a second when stderr is a terminal, or always
with --progress. The load shape matches bench/etcd's etcd-bench, for
scripts/bench-vs-etcd.sh.`,
		Example: `  shardkit bench --peer 127.0.0.1:3301 --workload replace --clients 64 --duration 10s
  shardkit bench --peer 127.0.0.1:3301 --workload insert --keys 100000 --count 100000 --clients 64 --format json
  shardkit bench --peer 127.0.0.1:3301 --workload replace --clients 64 --rate 5000 --duration 30s
  shardkit bench --peer 127.0.0.1:3301 --workload scan --keys 1000000 --count 1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("count") && cmd.Flags().Changed("duration") {
				return errors.New("give --count or --duration, not both")
			}
			if o.cfg.Count > 0 {
				o.cfg.Duration = 0
			}
			return runBench(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.peers, "peer", defaultPeer, "address (host:port) of a cluster instance; a comma-separated list")
	f.StringVar(&o.cfg.Space, "space", "", "space to load (default \""+bench.DefaultSpace+"\")")
	f.StringVar(&o.cfg.Workload, "workload", bench.Replace, strings.Join(bench.Workloads, ", "))
	f.IntVar(&o.cfg.Keys, "keys", bench.DefaultKeys, "the key range: keys 0..N-1")
	f.Int64Var(&o.cfg.Count, "count", 0, "operations to run in all (instead of --duration)")
	f.DurationVar(&o.cfg.Duration, "duration", bench.DefaultDuration, "how long the timed part runs")
	f.IntVar(&o.cfg.Clients, "clients", bench.DefaultClients, "concurrent calls")
	f.Float64Var(&o.cfg.Rate, "rate", 0, "operations a second in all, paced, latency counted from each call's scheduled start (0: as fast as the cluster answers)")
	f.IntVar(&o.cfg.Conns, "conns", bench.DefaultConns, "connections shared by the clients (one client.Client each)")
	f.IntVar(&o.cfg.ValueSize, "value-size", bench.DefaultValueSize, "bytes per value")
	f.DurationVar(&o.cfg.Timeout, "timeout", bench.DefaultTimeout, "deadline of each call")
	f.BoolVar(&o.cfg.Preload, "preload", true, "get, mixed, scan, range: write every key before the timed part (untimed)")
	f.DurationVar(&o.cfg.Settle, "settle", bench.DefaultSettle, "pause between the preload and the timed part")
	f.IntVar(&o.cfg.PageSize, "page-size", 1000, "scan: rows per page; range: rows per call (at most 10000)")
	f.IntVar(&o.cfg.Watchers, "watchers", 0, "watches of the space (every bucket) beside the load; their events' delay from the batch is reported")
	f.BoolVar(&o.pipelining, "pipelining", true, "client pipelining: calls made together to one instance go together (a data stream, or Multi calls); false: one RPC per call")
	f.IntVar(&o.cfg.PipelineDepth, "pipeline-depth", client.DefaultPipelineDepth, "with --stream=false: calls under way at once per instance, per connection")
	f.BoolVar(&o.cfg.PipelineWrites, "pipeline-writes", false, "with --stream=false: writes into the Multi pipeline too (client.Config.PipelineWrites); by default only point reads")
	f.BoolVar(&o.stream, "stream", true, "pipelining: writes and point reads on one data stream per instance (false: client.Config.DisableStream)")
	f.StringVar(&o.format, "format", "text", "text or json (one JSON object)")
	f.BoolVar(&o.progress, "progress", false, "progress on stderr once a second even when it is not a terminal")
	f.StringVar(&o.cpuprofile, "cpuprofile", "", "write the load generator's CPU profile of the whole run to this file")
	o.sec.register(f)
	return cmd
}

func runBench(cmd *cobra.Command, o benchOptions) error {
	if o.format != "text" && o.format != "json" {
		return fmt.Errorf("invalid --format %q: want text or json", o.format)
	}
	peers, err := client.ParsePeers(o.peers)
	if err != nil {
		return fmt.Errorf("--peer: %w", err)
	}
	cfg := o.cfg
	cfg.Peers = peers
	cfg.NoPipelining = !o.pipelining
	cfg.NoStream = !o.stream
	creds, err := o.sec.credentials()
	if err != nil {
		return err
	}
	if creds != nil {
		cfg.ClientConfig = func(c *client.Config) { c.Credentials = creds }
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	cfg.Log = stderr
	if o.progress || isTerminal(stderr) {
		cfg.Progress = stderr
	}
	stop, err := startCPUProfile(o.cpuprofile, stderr)
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.Run(cmd.Context(), cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := writeBenchResult(cmd.OutOrStdout(), o.format, res); err != nil {
		return err
	}
	if res.Ops == 0 {
		return fmt.Errorf("bench: no operation succeeded (%s)", count(res.Errors, "error"))
	}
	return nil
}

func writeBenchResult(w io.Writer, format string, r bench.Result) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(r) // one line
	}
	_, err := fmt.Fprintf(w, "system:     %s\nworkload:   %s (space %s, %d keys, %d-byte values)\nclients:    %d on %d connections, pipelining %s\n"+
		"ops:        %d in %.2fs (%d reads, %d writes)\nops/s:      %.0f\nerrors:     %d\nlatency:    p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms\n",
		r.System, r.Workload, r.Space, r.Keys, r.ValueSize, r.Clients, r.Conns, onOff(r.Pipelining), r.Ops, r.DurationS, r.Reads, r.Writes,
		r.OpsPerS, r.Errors, r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs)
	switch {
	case err != nil:
	case r.Workload == bench.Scan:
		_, err = fmt.Fprintf(w, "scan:       an op is a row read; the latencies are of pages of %d rows\n", r.PageSize)
	case r.Workload == bench.Range:
		_, err = fmt.Fprintf(w, "range:      an op is a call of up to %d rows; %.0f rows/s\n", r.PageSize, float64(r.Reads)/max(r.DurationS, 1e-9))
	}
	if err == nil && r.Rate > 0 {
		_, err = fmt.Fprintf(w, "paced:      %.0f ops/s asked (latency from each call's scheduled start)\n", r.Rate)
	}
	if err == nil && r.PreloadRows > 0 {
		_, err = fmt.Fprintf(w, "preload:    %s in %.1fs (untimed)\n", count(r.PreloadRows, "row"), r.PreloadS)
	}
	if err == nil && r.Watchers > 0 {
		_, err = fmt.Fprintf(w, "watchers:   %d received %d events; delay from the batch p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
			r.Watchers, r.WatchEvents, r.WatchP50Ms, r.WatchP99Ms, r.WatchMaxMs)
	}
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// startCPUProfile writes the process's CPU profile to path (nothing when
// path is empty) until stop; a failure to close the file is said on
// stderr.
func startCPUProfile(path string, stderr io.Writer) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := pf.Close(); err != nil {
			fmt.Fprintf(stderr, "shardkit: --cpuprofile: %v\n", err)
		}
	}, nil
}
