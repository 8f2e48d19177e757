package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/numerator"
	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/synth"
	"github.com/shardkit/shardkit/sharding"
)

func newNumeratorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "numerator",
		Short: "Persistent <shard_id, doc_id> for offers across index generations (seed 003)",
	}
	cmd.AddCommand(newNumeratorRunCmd(), newNumeratorInspectCmd(), newNumeratorStatusCmd(), newNumeratorUnlockCmd(),
		newNumeratorGenCmd(), newNumeratorDumpCmd(), newNumeratorBenchCmd())
	return cmd
}

type coordFlags struct {
	kind   string
	addr   string
	master string
	ttl    time.Duration
	retry  time.Duration
	wait   time.Duration
	sec    securityFlags
}

// register adds the flags that name the coordinator.
func (c *coordFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&c.kind, "coordinator", "local", "coordinator: local (a directory), zookeeper, shardkit (a cluster's leases) or none")
	fl.StringVar(&c.addr, "coordinator-addr", ".shardkit-numerator", "local: the coordinator's directory; zookeeper: host:port[,host:port][/znode]; shardkit: host:port[,host:port][/lease-name] of cluster instances")
	c.sec.register(fl)
}

// registerLock adds the flags of a master taking the lock.
func (c *coordFlags) registerLock(cmd *cobra.Command) {
	host, _ := os.Hostname()
	fl := cmd.Flags()
	fl.StringVar(&c.master, "master-name", host, "this master's name in the write lock")
	fl.DurationVar(&c.ttl, "lock-ttl", coordinator.DefaultLockTTL, "the write lock is a lease of this TTL, renewed every TTL/3 while the run works: a master that dies frees it within one TTL, and a holder silent for a TTL is dropped and its report refused")
	fl.DurationVar(&c.ttl, "lock-timeout", coordinator.DefaultLockTTL, "the former name of --lock-ttl")
	_ = fl.MarkDeprecated("lock-timeout", "use --lock-ttl (the same setting: the lock's time to live, renewed every TTL/3)")
	fl.DurationVar(&c.retry, "lock-retry", coordinator.DefaultLockRetry, "retry interval while another master holds the lock")
	fl.DurationVar(&c.wait, "lock-wait", time.Hour, "give up if the lock is not granted within this time")
}

// openCoordinator opens the chosen backend; none returns nil.
func openCoordinator(ctx context.Context, c *coordFlags, logger *slog.Logger) (coordinator.Coordinator, error) {
	kind, addr := c.kind, c.addr
	switch kind {
	case "none":
		return nil, nil
	case "local":
		return coordinator.NewLocal(addr, time.Now)
	case "zookeeper":
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return coordinator.NewZooKeeper(cctx, addr, logger, time.Now)
	case "shardkit":
		creds, err := c.sec.credentials()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", coordinator.ErrInvalid, err)
		}
		return coordinator.NewShardkitWithCredentials(addr, creds)
	}
	return nil, fmt.Errorf("%w: --coordinator %q; want local, zookeeper, shardkit or none", coordinator.ErrInvalid, kind)
}

// parseSize reads sizes such as 512MiB, 2GiB, 1.5G, 4096 (bytes).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f != f || f*mult >= 1<<62 {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	return int64(f * mult), nil
}

type runFlags struct {
	tables       numerator.Tables
	scheme       uint32
	stateType    uint32
	ttl          uint64
	threshold    float64
	minDocs      int64
	force        bool
	dropFraction float64
	allowEmpty   bool
	memory       string
	tempDir      string
	coord        coordFlags
	quietSummary bool
	progress     bool
}

func newNumeratorRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Number one generation of offers: read the state and offers, write the new state",
		Long: `Reads the input state (the coordinator's last consistent state, copied to
--input-state when both are set) and the generation's offers, and writes the new
state plus the intermediate new-docs and expired-docs tables. With a
coordinator, the run holds the write lock and reports the new state's location
under its ticket; a run whose lock timed out is refused and its output is not
recorded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNumerator(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tables.InputState, "input-state", "", "input state (Parquet file or directory); with a coordinator that has a state, its state is copied here first")
	fl.StringVar(&f.tables.InputOffers, "input-offers", "", "input offers (Parquet file or directory): business_id, offer_id, shop_id, warehouse_id")
	fl.StringVar(&f.tables.NewDocs, "intermediate-new-docs", "", "where to write the new docs table (optional)")
	fl.StringVar(&f.tables.ExpiredDocs, "intermediate-expired-docs", "", "where to write the expired docs table (optional)")
	fl.StringVar(&f.tables.OutputState, "output-state", "", "where to write the new state (must not exist)")
	fl.Uint32Var(&f.scheme, "output-sharding-scheme", 0, "sharding scheme id of the output state (see 'shardkit numerator inspect --schemes')")
	fl.BoolVar(&f.force, "rebuild-state-force", false, "renumber every shard densely from 0 (also needed to change the scheme or state type)")
	fl.Uint32Var(&f.stateType, "state-type", 0, "T of the state version T.S.V.G")
	fl.Uint64Var(&f.ttl, "ttl", 3, "a key absent for more than this many runs frees its doc_id")
	fl.Float64Var(&f.threshold, "rebuild-threshold", numerator.DefaultRebuildThreshold, "rebuild a shard automatically when its holes exceed this share of its id range (>= 1 disables)")
	fl.Int64Var(&f.minDocs, "rebuild-min-docs", 1000, "shards with fewer ids never rebuild automatically")
	fl.Float64Var(&f.dropFraction, "allow-drop-fraction", numerator.DefaultAllowDropFraction, "refuse offers that lack more than this share of the docs the previous generation had (1 accepts any drop)")
	fl.BoolVar(&f.allowEmpty, "allow-empty", false, "accept an offers table without rows (refused otherwise: it would drop every doc)")
	fl.StringVar(&f.memory, "memory-limit", "1GiB", fmt.Sprintf("memory limit of the process (peak RSS), at least %dMiB: rows get half of it, or all but %dMiB when that is less (past it, shards spill sorted runs to --temp-dir)", numerator.MinProcessMemory>>20, numerator.MemoryReserve>>20))
	fl.StringVar(&f.tempDir, "temp-dir", "", "directory for spill files (default: the system's)")
	fl.BoolVar(&f.progress, "progress", false, "print progress on stderr (phase, rows, rate, ETA) every 10s even when stderr is not a terminal (in a terminal it is printed every second anyway)")
	fl.BoolVar(&f.quietSummary, "quiet", false, "print only the version line (\"version T.S.V.G run N\") on stdout")
	f.coord.register(cmd)
	f.coord.registerLock(cmd)
	return cmd
}

func runNumerator(ctx context.Context, stdout, stderr io.Writer, f runFlags) (err error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	limit, err := parseSize(f.memory)
	if err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	rowsBudget, goLimit, err := numerator.ProcessBudget(limit)
	if err != nil {
		return fmt.Errorf("--memory-limit %s: %w", f.memory, err)
	}
	scheme, err := sharding.DefaultRegistry().Lookup(sharding.SchemeID(f.scheme))
	if err != nil {
		return fmt.Errorf("--output-sharding-scheme: %w", err)
	}
	if f.tables.InputOffers == "" || f.tables.OutputState == "" {
		return errors.New("--input-offers and --output-state are required")
	}
	prevLimit := debug.SetMemoryLimit(goLimit)
	defer debug.SetMemoryLimit(prevLimit)
	opts := numerator.Options{StateType: f.stateType, Scheme: scheme, TTL: f.ttl, ForceRebuild: f.force,
		RebuildThreshold: f.threshold, RebuildMinDocs: f.minDocs, MemoryLimit: rowsBudget, TempDir: f.tempDir, Logger: logger,
		AllowDropFraction: f.dropFraction, AllowEmpty: f.allowEmpty}
	if f.threshold == 0 {
		opts.RebuildThreshold = 1e-12 // an explicit 0: any hole triggers a rebuild
	}
	if f.dropFraction == 0 {
		opts.AllowDropFraction = 1e-12 // an explicit 0: no doc may be dropped
	}
	if tty := isTerminal(stderr); tty || f.progress {
		opts.Progress, opts.ProgressEvery = progressPrinter(stderr, tty), 10*time.Second
		if tty {
			opts.ProgressEvery = time.Second
		}
	}

	coord, err := openCoordinator(ctx, &f.coord, logger)
	if err != nil {
		return err
	}
	start := time.Now()
	if coord == nil {
		res, err := numerator.Run(ctx, f.tables, opts)
		printCleaned(stderr, res.Cleaned)
		if err != nil {
			return err
		}
		printRunSummary(stdout, res, time.Since(start), f.quietSummary)
		return nil
	}
	defer coord.Close()
	mo := coordinator.MasterOptions{Holder: f.coord.master, TTL: f.coord.ttl, Retry: f.coord.retry, Wait: f.coord.wait, Logger: logger,
		Waiting: waitPrinter(stderr, f.coord.wait),
		Granted: func(l coordinator.Lease) {
			if !f.quietSummary {
				fmt.Fprintf(stdout, "lock granted to %s, ticket %d; last consistent state %q\n", l.Holder, l.Ticket, l.State.Location)
			}
		}}
	res, st, err := numerator.RunCoordinated(ctx, coord, f.tables, opts, mo)
	printCleaned(stderr, res.Cleaned)
	if err != nil {
		return err
	}
	printRunSummary(stdout, res, time.Since(start), f.quietSummary)
	if !f.quietSummary {
		fmt.Fprintf(stdout, "recorded state %s (version %s, ticket %d)\n", st.Location, st.Version, st.Ticket)
	}
	return nil
}

// waitPrinter tells, on stderr, who holds the lock a run waits for: at
// the first refusal, whenever the holder or ticket changes, and every
// waitReportEvery otherwise.
func waitPrinter(w io.Writer, limit time.Duration) func(coordinator.Waiting) {
	var last coordinator.Lease
	var printed time.Time
	return func(wt coordinator.Waiting) {
		changed := wt.Lock != nil && (wt.Lock.Holder != last.Holder || wt.Lock.Ticket != last.Ticket)
		if !printed.IsZero() && !changed && time.Since(printed) < waitReportEvery {
			return
		}
		printed = time.Now()
		waited := fmt.Sprintf("waited %v of --lock-wait %v", wt.Waited.Round(time.Second), limit)
		if wt.Lock == nil {
			fmt.Fprintf(w, "numerator: waiting for the write lock, held by another master (%s)\n", waited)
			return
		}
		last = *wt.Lock
		fmt.Fprintf(w, "numerator: waiting for the write lock: %s holds it (ticket %d) since %s, until %s unless it renews it (%s); "+
			"if %s is dead its lock expires then, or `shardkit numerator unlock --force` drops it\n",
			last.Holder, last.Ticket, last.Acquired.Format(time.RFC3339), last.Expires.Format(time.RFC3339), waited, last.Holder)
	}
}

// waitReportEvery is how often a waiting run repeats who holds the lock.
const waitReportEvery = 30 * time.Second

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressPrinter prints a run's progress: in a terminal on one line that
// it rewrites (a line per phase), else a line per report.
func progressPrinter(w io.Writer, tty bool) func(numerator.Progress) {
	return func(p numerator.Progress) {
		var line string
		if p.Done {
			line = fmt.Sprintf("numerator: %s done: %s rows in %v (%s rows/s)", p.Phase, humanCount(float64(p.Rows)),
				p.Elapsed.Round(100*time.Millisecond), humanCount(p.Rate()))
		} else {
			line = fmt.Sprintf("numerator: %s %s/%s rows", p.Phase, humanCount(float64(p.Rows)), humanCount(float64(p.Total)))
			if p.Total > 0 {
				line += fmt.Sprintf(" (%.0f%%)", 100*float64(p.Rows)/float64(p.Total))
			}
			line += fmt.Sprintf(", %s rows/s", humanCount(p.Rate()))
			if eta, ok := p.ETA(); ok {
				line += fmt.Sprintf(", ETA %v", eta.Round(time.Second))
			}
		}
		switch {
		case !tty:
			fmt.Fprintln(w, line)
		case p.Done:
			fmt.Fprintf(w, "\r\033[K%s\n", line)
		default:
			fmt.Fprintf(w, "\r\033[K%s", line)
		}
	}
}

// humanCount writes n with a k, M or G suffix.
func humanCount(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}

func printCleaned(w io.Writer, paths []string) {
	for _, p := range paths {
		fmt.Fprintf(w, "numerator: removed a dead run's leftovers: %s\n", p)
	}
}

func printRunSummary(w io.Writer, res numerator.Result, d time.Duration, quiet bool) {
	fmt.Fprintf(w, "version %s run %d\n", res.State.Version, res.State.Run)
	if quiet {
		return
	}
	fmt.Fprintf(w, "offers %d docs %d new %d reused %d expired %d rebuilt_shards %d spills %d in %.2fs (%.0f offers/s)\n",
		res.Offers, res.Docs, res.New, res.Reused, res.Expired, res.Rebuilt, res.Spills, d.Seconds(), float64(res.Offers)/max(d.Seconds(), 1e-9))
}

func newNumeratorInspectCmd() *cobra.Command {
	var schemes bool
	cmd := &cobra.Command{
		Use:   "inspect STATE",
		Short: "Print a state's version, run, TTL, scheme and per-shard sizes, holes and max ids",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if schemes {
				reg := sharding.DefaultRegistry()
				for _, id := range reg.IDs() {
					s, _ := reg.Lookup(id)
					fmt.Fprintf(out, "%d\t%s\t%s\n", s.ID, s.Name, count(s.Shards, "shard"))
				}
				return nil
			}
			if len(args) != 1 {
				return errors.New("inspect needs the state's location (or --schemes)")
			}
			in, err := numerator.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			m := in.Meta
			fmt.Fprintf(out, "version %s (type %d, scheme %d %s, rebuild %d, generation %d)\nrun %d ttl %d shards %d last_rebuild_run %d\n",
				m.Version, m.Version.Type, m.Version.Scheme, m.SchemeName, m.Version.Rebuild, m.Version.Generation, m.Run, m.TTL, m.Shards, m.LastRebuildRun)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "shard\tdocs\tmax_doc_id\tholes\thole_ratio\t")
			var docs, holes int64
			for _, s := range in.Shards {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.4f\t\n", s.Shard, s.Docs, s.MaxDocID, s.Holes, s.HoleRatio())
				docs += s.Docs
				holes += s.Holes
			}
			fmt.Fprintf(tw, "total\t%d\t\t%d\t\t\n", docs, holes)
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&schemes, "schemes", false, "list the known sharding schemes instead")
	return cmd
}

func newNumeratorStatusCmd() *cobra.Command {
	var c coordFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the coordinator's last consistent state and write-lock holder",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			coord, err := openCoordinator(cmd.Context(), &c, nil)
			if err != nil {
				return err
			}
			if coord == nil {
				return errors.New("status needs a coordinator")
			}
			defer coord.Close()
			st, err := coord.Status(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "state %q version %s by %s ticket %d at %s\n", st.State.Location, st.State.Version, st.State.Master, st.State.Ticket, st.State.Updated.Format(time.RFC3339))
			if st.Lock == nil {
				fmt.Fprintf(out, "lock free (last ticket %d)\n", st.LastTicket)
				return nil
			}
			state := "held"
			if !time.Now().Before(st.Lock.Expires) {
				state = "timed out"
			}
			fmt.Fprintf(out, "lock %s by %s ticket %d since %s until %s\n", state, st.Lock.Holder, st.Lock.Ticket,
				st.Lock.Acquired.Format(time.RFC3339), st.Lock.Expires.Format(time.RFC3339))
			return nil
		},
	}
	c.register(cmd)
	c.registerLock(cmd) // accepted as before; status does not take the lock
	return cmd
}

func newNumeratorUnlockCmd() *cobra.Command {
	var (
		c       coordFlags
		force   bool
		outputs []string
		tempDir string
	)
	cmd := &cobra.Command{
		Use:   "unlock --force",
		Short: "Drop the write lock of a master that died, and remove dead runs' leftovers",
		Long: `With --force, drops the coordinator's write lock whoever holds it: the
holder's ticket is stale from then on (its renewals and its report are
refused, so a master that was not dead after all cannot record its state),
and the next run gets a larger ticket. Without --force it only says who
holds the lock.

Either way it then removes the working directories of runs that died on this
machine: outputs under temporary names (*.tmp-*) in each --outputs-dir and
spill directories in --temp-dir. Directories of live runs are never removed
(each is held by its run with a file lock).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			coord, err := openCoordinator(cmd.Context(), &c, nil)
			if err != nil {
				return err
			}
			if coord != nil {
				defer coord.Close()
				if err := unlockCoordinator(cmd.Context(), out, coord, force); err != nil {
					return err
				}
			}
			if tempDir == "" {
				tempDir = os.TempDir()
			}
			removed, err := numerator.CleanLeftovers(append([]string{tempDir}, outputs...)...)
			printCleaned(errOut, removed)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "removed %d dead runs' leftovers in %s\n", len(removed), strings.Join(append([]string{tempDir}, outputs...), ", "))
			return nil
		},
	}
	c.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&force, "force", false, "drop the write lock even though its holder may be alive (it is fenced: its report will be refused)")
	fl.StringArrayVar(&outputs, "outputs-dir", nil, "a directory where the dead run wrote its outputs (repeatable): its *.tmp-* working directories are removed")
	fl.StringVar(&tempDir, "temp-dir", "", "the dead run's --temp-dir, where its spill directories are (default: the system's)")
	return cmd
}

// unlockCoordinator drops the lock with force, else refuses while a live
// holder has it.
func unlockCoordinator(ctx context.Context, out io.Writer, coord coordinator.Coordinator, force bool) error {
	if !force {
		st, err := coord.Status(ctx)
		if err != nil {
			return err
		}
		if st.Lock != nil && time.Now().Before(st.Lock.Expires) {
			return fmt.Errorf("%w: %s holds the write lock (ticket %d) since %s, until %s unless it renews it; "+
				"if that master is dead, pass --force to drop the lock now (its report will be refused), or wait until then",
				coordinator.ErrLocked, st.Lock.Holder, st.Lock.Ticket, st.Lock.Acquired.Format(time.RFC3339), st.Lock.Expires.Format(time.RFC3339))
		}
		fmt.Fprintln(out, "the write lock is free")
		return nil
	}
	dropped, err := coord.ForceUnlock(ctx)
	if err != nil {
		return err
	}
	if dropped == nil {
		fmt.Fprintln(out, "the write lock was free")
		return nil
	}
	fmt.Fprintf(out, "dropped the write lock of %s (ticket %d, since %s); its renewals and report will be refused\n",
		dropped.Holder, dropped.Ticket, dropped.Acquired.Format(time.RFC3339))
	return nil
}

func newNumeratorGenCmd() *cobra.Command {
	var (
		p          synth.Params
		generation int64
	)
	cmd := &cobra.Command{
		Use:   "gen --offers N OUT.parquet",
		Short: "Write a synthetic offers table (a generation of numerator/synth) to try the numerator on",
		Long: `Writes generation --generation of synthetic offers as one Parquet file with
the input columns business_id, offer_id, shop_id, warehouse_id. Generations of
the same --offers, --churn and --flap follow one another: each replaces a
--churn share of the offers with new ones, and odd generations miss a --flap
share that even ones have. OUT must not exist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Offers <= 0 || generation < 0 || p.Churn < 0 || p.Churn > 1 || p.Flap < 0 || p.Flap > 1 {
				return fmt.Errorf("%w: --offers must be positive, --generation non-negative, --churn and --flap shares in [0, 1]", numerator.ErrBadOptions)
			}
			n, err := synth.Write(cmd.Context(), args[0], p, generation)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d offers (generation %d) to %s\n", n, generation, args[0])
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&p.Offers, "offers", 1_000_000, "offers in a generation (odd generations miss a --flap share of them)")
	fl.Int64Var(&generation, "generation", 0, "which generation to write (0, 1, 2, ...)")
	fl.Float64Var(&p.Churn, "churn", 0.05, "share of offers replaced by new ones each generation")
	fl.Float64Var(&p.Flap, "flap", 0.02, "share of offers missing every other generation")
	return cmd
}

func newNumeratorDumpCmd() *cobra.Command {
	var o numerator.DumpOptions
	cmd := &cobra.Command{
		Use:   "dump TABLE",
		Short: "Print a table's rows (a Parquet file or a directory of part files) as JSON lines or a table",
		Long: `Prints the rows of any Parquet table, the numerator's (offers, state, new
docs, expired docs) or another, all columns in order: one JSON object per row
(--format jsonl, the default) or aligned columns under a header (--format
table). A directory's *.parquet part files are read in name order.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := numerator.Dump(cmd.Context(), args[0], cmd.OutOrStdout(), o)
			return err
		},
	}
	cmd.Flags().StringVar(&o.Format, "format", numerator.DumpJSONLines, "jsonl (a JSON object per row) or table")
	cmd.Flags().Int64Var(&o.Limit, "limit", 0, "print at most this many rows (0: all)")
	return cmd
}

type benchFlags struct {
	offers      int64
	generations int
	churn, flap float64
	dir         string
	memory      string
	scheme      uint32
	ttl         uint64
	keep        bool
	inProcess   bool
}

func newNumeratorBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate synthetic generations and time the numerator end to end (rows/s, peak RSS)",
		Long: `Writes --generations synthetic offer tables of --offers rows each (offers
appearing, disappearing and returning), then numbers them one after another,
each run a child 'shardkit numerator run' process so its wall time and peak RSS
(getrusage maxrss) are its own. Generated data is removed unless --keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchNumerator(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&f.offers, "offers", 1_000_000, "offers per generation")
	fl.IntVar(&f.generations, "generations", 2, "generations to number (the first builds the state)")
	fl.Float64Var(&f.churn, "churn", 0.05, "share of offers replaced each generation")
	fl.Float64Var(&f.flap, "flap", 0.02, "share of offers missing every other generation")
	fl.StringVar(&f.dir, "dir", "", "working directory (default: a new temporary directory)")
	fl.StringVar(&f.memory, "memory-limit", "1GiB", "--memory-limit of each run")
	fl.Uint32Var(&f.scheme, "scheme", 0, "sharding scheme id")
	fl.Uint64Var(&f.ttl, "ttl", 1, "TTL of the runs")
	fl.BoolVar(&f.keep, "keep", false, "keep the generated tables and states")
	fl.BoolVar(&f.inProcess, "in-process", false, "run in this process (peak RSS then includes generation; for tests)")
	return cmd
}

func benchNumerator(ctx context.Context, out io.Writer, f benchFlags) (err error) {
	if f.offers <= 0 || f.generations <= 0 {
		return errors.New("--offers and --generations must be positive")
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "shardkit-numerator-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !f.keep {
		defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	p := synth.Params{Offers: f.offers, Churn: f.churn, Flap: f.flap}
	fmt.Fprintf(out, "numerator bench: %d offers/generation, %d generations, churn %.2f, flap %.2f, memory-limit %s, dir %s\n",
		f.offers, f.generations, f.churn, f.flap, f.memory, dir)
	// Fixed widths, a line per generation as soon as it is done.
	const row = "%3v %10v %10v %8v %9v %12v %8v %6v  %v\n"
	fmt.Fprintf(out, row, "gen", "generate_s", "offers", "run_s", "offers/s", "peak_rss_MiB", "cpu_s", "spills", "version")
	prev := ""
	for g := range f.generations {
		offers := filepath.Join(dir, fmt.Sprintf("offers-%03d.parquet", g))
		t0 := time.Now()
		n, err := synth.Write(ctx, offers, p, int64(g))
		if err != nil {
			return err
		}
		genSecs := time.Since(t0).Seconds()
		state := filepath.Join(dir, fmt.Sprintf("state-%03d", g))
		args := []string{"numerator", "run", "--coordinator", "none",
			"--input-offers", offers, "--output-state", state,
			"--intermediate-new-docs", filepath.Join(dir, fmt.Sprintf("new-%03d", g)),
			"--intermediate-expired-docs", filepath.Join(dir, fmt.Sprintf("expired-%03d", g)),
			"--output-sharding-scheme", strconv.FormatUint(uint64(f.scheme), 10),
			"--ttl", strconv.FormatUint(f.ttl, 10), "--memory-limit", f.memory, "--temp-dir", dir}
		if prev != "" {
			args = append(args, "--input-state", prev)
		}
		var rss int64
		var cpu time.Duration
		var version strings.Builder
		t1 := time.Now()
		if f.inProcess {
			var stderr strings.Builder
			if code := Main(args, nil, &version, &stderr); code != 0 {
				err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(stderr.String()))
			}
			rss = vmHWM()
		} else {
			c := exec.CommandContext(ctx, exe, args...)
			c.Stdout, c.Stderr = &version, os.Stderr
			err = c.Run()
			if c.ProcessState != nil {
				if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
					rss = ru.Maxrss << 10
				}
				cpu = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
			}
		}
		runSecs := time.Since(t1).Seconds()
		if err != nil {
			return fmt.Errorf("generation %d: %w", g, err)
		}
		ver, spills := "?", "?"
		fields := strings.Fields(version.String())
		for i, fl := range fields[:max(len(fields)-1, 0)] {
			switch fl {
			case "version":
				ver = fields[i+1]
			case "spills":
				spills = fields[i+1]
			}
		}
		fmt.Fprintf(out, row, g, fmt.Sprintf("%.1f", genSecs), n, fmt.Sprintf("%.2f", runSecs), fmt.Sprintf("%.0f", float64(n)/runSecs),
			rss>>20, fmt.Sprintf("%.1f", cpu.Seconds()), spills, ver)
		if !f.keep {
			if err := os.Remove(offers); err != nil {
				return err
			}
			if prev != "" {
				if err := os.RemoveAll(prev); err != nil {
					return err
				}
			}
		}
		prev = state
	}
	return nil
}

// vmHWM is this process's peak resident set size in bytes (0 if unknown).
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
