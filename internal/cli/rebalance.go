package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/mover"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// The operator's commands on bucket placement: rebalance, replicaset,
// bucket, reshard (seed 001's resharding at bucket granularity).

func newRebalanceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "rebalance", Short: "The rebalancer: its view of the buckets' balance, and its settings"}
	cmd.AddCommand(newRebalanceStatusCmd(), newRebalanceConfigCmd())
	return cmd
}

func newRebalanceStatusCmd() *cobra.Command {
	var f clusterFlags
	var format string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each replicaset's buckets against its target, and the moves in progress",
		Long: `Show, per replicaset, its weight, the buckets group 0 places on it, the count
its weight asks for (the target), its disbalance in percent, and the moves in
progress. The rebalancer acts when the largest disbalance exceeds its
threshold (default 1%) and then moves buckets until every replicaset has its
target. --watch redraws it every second until the buckets are balanced,
or until nothing moves them without an operator (the rebalancer off, the
disbalance within its threshold, or a drain that waits for pinned buckets,
which never move; the last line says which, and how to go on).

The answer comes from the asked instance's view of group 0, confirmed with
group 0's leader first. When no instance given by --peer can confirm its
view (group 0 has no leader, or they cannot reach it), the last known view
is shown, marked not confirmed, and the command exits with status 3.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return usagef("invalid --format %q: want table or json", format)
			}
			cl, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			var lastWhy string // the last poll's reason to stop, if any (it names the buckets to move)
			for {
				ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
				st, err := cl.Sharding().Status(ctx)
				cancel()
				if err != nil {
					return fmt.Errorf("rebalance status: %w", callError(f.timeout, err))
				}
				if format == "json" {
					if err := writeProtoJSONLine(cmd.OutOrStdout(), st); err != nil {
						return err
					}
				} else if err := writeBalance(cmd.OutOrStdout(), st); err != nil {
					return err
				}
				settled, why := settledBalance(st)
				if why != "" {
					// The rebalancer off, or within its threshold: taken
					// for done only when two polls a second apart agree, so
					// that the moment between two batches of a rebalance
					// that goes on (it keeps moving below the threshold
					// once started) does not end the watch.
					settled = why == lastWhy
					lastWhy = why
				} else {
					lastWhy = ""
				}
				if !watch || settled {
					if watch && why != "" {
						fmt.Fprintln(cmd.OutOrStdout(), why)
					}
					if watch { // settled, so not stale
						for _, line := range frozenReplicasets(st) {
							fmt.Fprintln(cmd.OutOrStdout(), line)
						}
					}
					if st.GetStale() {
						return &ExitError{Code: exitNoQuorum, Err: fmt.Errorf("rebalance status: not confirmed with group 0's leader (%s); shown is the last known view, which may be behind", st.GetStaleReason())}
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
		},
	}
	f.register(cmd.Flags(), 10*time.Second, "how long to wait for the answer")
	cmd.Flags().StringVar(&format, "format", "table", "table or json")
	cmd.Flags().BoolVar(&watch, "watch", false, "show it again every second until the buckets are balanced")
	return cmd
}

// settledBalance reports whether nothing will move without an operator:
// no move in progress and either nothing to move, the rebalancer off, or
// the disbalance within its threshold (the rebalancer leaves that alone);
// why says which of the last two, for --watch to end on.
func settledBalance(st *datav1.RebalanceStatusResponse) (settled bool, why string) {
	if st.GetStale() || len(st.GetMoves()) > 0 {
		return false, ""
	}
	s := st.GetSettings()
	switch {
	case st.GetBucketsToMove() == 0 && len(drainWaits(st)) > 0:
		// The targets count pinned buckets as staying: nothing is left
		// to move, yet a drain does not end.
		return true, "nothing moves the buckets left by itself: " + strings.Join(drainWaits(st), "; ")
	case st.GetBucketsToMove() == 0:
		return true, ""
	case s.GetDisabled():
		return true, fmt.Sprintf("the rebalancer is off: nothing moves the buckets left by itself (%s to move; shardkit rebalance config --enable)", nBuckets(st.GetBucketsToMove()))
	case st.GetMaxDisbalancePercent() <= s.GetThresholdPercent():
		return true, fmt.Sprintf("the max disbalance, %s, is within the rebalancer's threshold, %s: it leaves the buckets where they are (%s to move)",
			mover.FormatPercent(st.GetMaxDisbalancePercent()), mover.FormatPercent(s.GetThresholdPercent()), nBuckets(st.GetBucketsToMove()))
	}
	return false, ""
}

// frozenReplicasets says which replicasets the balance leaves out (locked,
// or without a quorum: their targets are what they hold), so that a watch
// that ends "balanced" does not hide a drain that cannot happen.
func frozenReplicasets(st *datav1.RebalanceStatusResponse) []string {
	var out []string
	for _, r := range st.GetReplicasets() {
		var why string
		switch {
		case r.GetLocked():
			why = "is locked (shardkit replicaset unlock " + r.GetReplicasetId() + ")"
		case !r.GetAvailable():
			why = "has no quorum (start its instances again)"
		default:
			continue
		}
		line := fmt.Sprintf("%s %s: the rebalancer leaves its %s where they are", r.GetReplicasetId(), why, nBuckets(r.GetBuckets()))
		if r.GetWeight() == 0 && r.GetBuckets() > 0 {
			line += ", so its weight 0 does not drain it"
		}
		out = append(out, line)
	}
	return out
}

// drainWaits says, for each replicaset of weight 0 that holds pinned
// buckets, that its drain waits for them and how to unpin them (the
// server's words; an older server's status has only the count).
func drainWaits(st *datav1.RebalanceStatusResponse) []string {
	var out []string
	for _, r := range st.GetReplicasets() {
		switch {
		case r.GetDrainWaits() != "":
			out = append(out, r.GetDrainWaits())
		case r.GetWeight() == 0 && r.GetPinned() > 0:
			out = append(out, fmt.Sprintf("the drain of %s (weight 0) waits for its %s, which the rebalancer never moves: unpin %s (shardkit bucket unpin BUCKET...)",
				r.GetReplicasetId(), count(r.GetPinned(), "pinned bucket"), agree(r.GetPinned(), "it", "them")))
		}
	}
	return out
}

// nBuckets is "1 bucket" or "N buckets".
func nBuckets(n uint32) string { return count(n, "bucket") }

// count is "1 bucket" or "N buckets": a count and its noun (one whose
// plural takes an s).
func count[N ~int | ~int64 | ~uint32 | ~uint64](n N, noun string) string {
	return fmt.Sprintf("%d %s", n, agree(n, noun, noun+"s"))
}

// agree is one for a count of 1, many for any other: the word that agrees
// with a count ("it" or "them").
func agree[N ~int | ~int64 | ~uint32 | ~uint64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func writeBalance(w io.Writer, st *datav1.RebalanceStatusResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICASET\tWEIGHT\tBUCKETS\tTARGET\tDISBALANCE\tSENDING\tRECEIVING\tPINNED\tNOTE")
	for _, r := range st.GetReplicasets() {
		note := ""
		switch {
		case r.GetLocked():
			note = "locked"
		case !r.GetAvailable():
			note = "no quorum: fewer than a majority of its members in service"
		case r.GetWeight() == 0 && r.GetBuckets() == 0:
			// Drained, or new and not given its weight yet.
			note = "weight 0, holds none"
		case r.GetWeight() == 0 && r.GetPinned() > 0:
			note = "drain waits for " + count(r.GetPinned(), "pinned bucket") + " (below)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", r.GetReplicasetId(), r.GetWeight(), r.GetBuckets(), r.GetTarget(),
			mover.FormatPercent(r.GetDisbalancePercent()), r.GetSending(), r.GetReceiving(), r.GetPinned(), note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := st.GetSettings()
	state := "on"
	switch {
	case s.GetPausedByReshard():
		state = "off for a reshard (reshard cleanup turns it on)"
	case s.GetDisabled():
		state = "off"
	}
	fmt.Fprintf(w, "rebalancer %s (threshold %s, %d sends and %d receives at once per replicaset, copy rate %s, copy pace %s); max disbalance %s\n",
		state, mover.FormatPercent(s.GetThresholdPercent()), s.GetMaxSending(), s.GetMaxReceiving(), copyRate(s.GetCopyBytesPerS()), copyPace(s.GetCopyPaceOff()), mover.FormatPercent(st.GetMaxDisbalancePercent()))
	done := st.GetBucketCount() - st.GetBucketsToMove()
	fmt.Fprintf(w, "moves in progress: %d; buckets still to move: %d (%d of %d in place)\n", len(st.GetMoves()), st.GetBucketsToMove(), done, st.GetBucketCount())
	for _, line := range drainWaits(st) {
		fmt.Fprintln(w, line)
	}
	if st.GetStale() {
		fmt.Fprintf(w, "NOT CONFIRMED: %s; this is the answering instance's last known view, which may be behind\n", st.GetStaleReason())
	}
	return nil
}

func newRebalanceConfigCmd() *cobra.Command {
	var f clusterFlags
	var enable, disable bool
	var threshold float64
	var maxSend, maxRecv uint32
	var rateFlag, paceFlag string
	cmd := &cobra.Command{
		Use:   "config [--enable|--disable] [--threshold PERCENT] [--max-sending N] [--max-receiving N] [--copy-rate BYTES] [--copy-pace auto|off]",
		Short: "Change the rebalancer's settings (unset flags keep theirs)",
		Long: `Change the rebalancer's settings; flags not given keep their values.

--max-sending and --max-receiving bound the buckets one replicaset sends
and receives at once (each replicaset enforces them on its own moves,
manual ones too; not on "reshard start", which switches its whole plan at
once, as the seed's procedure does). The copy paces itself from the
destination's clients' write delay (slower while they wait longer);
--copy-pace off turns that off, for a rebalance as fast as the machines
allow whatever it costs the clients (--copy-pace auto turns it on again).
--copy-rate bounds the bytes of tuples (key and tuple) one replicaset
copies in per second while it receives buckets, e.g. 4MiB; 0 sets no bound
(the default). A bucket's copy runs after its switch, so the rate never
lengthens the time writes to a bucket are refused; it trades the speed of
a rebalance for the latency of the clients' calls on the same machines
(docs/data.md, "Growing and shrinking").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if enable && disable {
				return usagef("give --enable or --disable, not both")
			}
			fl := cmd.Flags()
			// Group 0 keeps 0 for "the default" (1%, 100, 100): an explicit
			// 0 would be echoed back and then not be what is in force.
			if fl.Changed("threshold") && !(threshold >= 0.01 && threshold <= 100) {
				return usagef("invalid --threshold %v: want a percentage from 0.01 to 100 (the default is %v)", threshold, mover.DefaultThresholdPercent)
			}
			if fl.Changed("max-sending") && maxSend == 0 {
				return usagef("invalid --max-sending 0: want at least 1 (the default is %d; --disable stops the rebalancer)", mover.DefaultMaxSending)
			}
			if fl.Changed("max-receiving") && maxRecv == 0 {
				return usagef("invalid --max-receiving 0: want at least 1 (the default is %d; --disable stops the rebalancer)", mover.DefaultMaxReceiving)
			}
			paceOff, err := parsePace("copy-pace", paceFlag, "auto: the copy paces itself from the clients' write delay; off: only --copy-rate bounds it")
			if err != nil {
				return err
			}
			if !enable && !disable && !fl.Changed("threshold") && !fl.Changed("max-sending") && !fl.Changed("max-receiving") && !fl.Changed("copy-rate") && !fl.Changed("copy-pace") {
				return usagef("rebalance config changes nothing without a flag: give --enable, --disable, --threshold, --max-sending, --max-receiving, --copy-rate or --copy-pace (shardkit rebalance status shows the settings)")
			}
			var rateBytes int64
			if cmd.Flags().Changed("copy-rate") {
				var err error
				if rateBytes, err = parseSize(rateFlag); err != nil {
					return usagef("--copy-rate: %w", err)
				}
			}
			cl, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			// The settings given are sent by name: group 0 sets them in the
			// settings in force when it applies the change, so a change
			// made meanwhile to another setting stands. The others go as
			// read, when they can be, for an instance of a build before
			// the names, which takes them whole.
			s := &datav1.RebalancerSettings{}
			if st, err := cl.Sharding().Status(ctx); err == nil && st.GetSettings() != nil {
				s = st.GetSettings()
			}
			var fields, shown []string
			if enable || disable {
				// The operator's own choice: a reshard's pause no longer
				// holds, and its cleanup leaves the rebalancer as set here.
				s.Disabled, s.PausedByReshard = disable, false
				fields = append(fields, "disabled")
				shown = append(shown, fmt.Sprintf("disabled=%v", disable))
			}
			if fl.Changed("threshold") {
				s.ThresholdPercent = threshold
				fields = append(fields, "threshold_percent")
				shown = append(shown, "threshold="+mover.FormatPercent(threshold))
			}
			if fl.Changed("max-sending") {
				s.MaxSending = maxSend
				fields = append(fields, "max_sending")
				shown = append(shown, fmt.Sprintf("max-sending=%d", maxSend))
			}
			if fl.Changed("max-receiving") {
				s.MaxReceiving = maxRecv
				fields = append(fields, "max_receiving")
				shown = append(shown, fmt.Sprintf("max-receiving=%d", maxRecv))
			}
			if fl.Changed("copy-rate") {
				s.CopyBytesPerS = uint64(rateBytes)
				fields = append(fields, "copy_bytes_per_s")
				shown = append(shown, "copy-rate="+copyRate(s.CopyBytesPerS))
			}
			if fl.Changed("copy-pace") {
				s.CopyPaceOff = paceOff
				fields = append(fields, "copy_pace_off")
				shown = append(shown, "copy-pace="+copyPace(paceOff))
			}
			if err := cl.Sharding().SetRebalancer(ctx, s, fields...); err != nil {
				return fmt.Errorf("rebalance config: %w", callError(f.timeout, err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rebalancer: %s (the other settings unchanged)\n", strings.Join(shown, " "))
			return nil
		},
	}
	f.register(cmd.Flags(), 10*time.Second, "how long to wait for the answer")
	cmd.Flags().BoolVar(&enable, "enable", false, "let the rebalancer move buckets")
	cmd.Flags().BoolVar(&disable, "disable", false, "stop the rebalancer (moves in progress finish; manual moves still run)")
	cmd.Flags().Float64Var(&threshold, "threshold", 1, "act when a replicaset's disbalance exceeds this many percent")
	cmd.Flags().Uint32Var(&maxSend, "max-sending", mover.DefaultMaxSending, "buckets one replicaset sends at once")
	cmd.Flags().Uint32Var(&maxRecv, "max-receiving", mover.DefaultMaxReceiving, "buckets one replicaset receives at once")
	cmd.Flags().StringVar(&paceFlag, "copy-pace", "auto", "auto: the copy paces itself from the destination's clients' write delay; off: only --copy-rate bounds it")
	cmd.Flags().StringVar(&rateFlag, "copy-rate", "0", "bytes of tuples one replicaset copies in per second while it receives buckets (e.g. 4MiB; 0: no bound; the copy paces itself within it)")
	return cmd
}

// copyPace shows a pace setting (--copy-pace, backup create --pace) as
// the flag takes it.
func copyPace(off bool) string {
	if off {
		return "off"
	}
	return "auto"
}

// parsePace reads a pace flag: auto (the work yields to the clients'
// writes by itself) or off; what says what each does, for the refusal.
func parsePace(flag, value, what string) (off bool, err error) {
	switch value {
	case "auto":
		return false, nil
	case "off":
		return true, nil
	}
	return false, usagef("invalid --%s %q: want auto or off (%s)", flag, value, what)
}

// copyRate shows a copy rate setting.
func copyRate(bytesPerS uint64) string {
	if bytesPerS == 0 {
		return "unlimited"
	}
	return sizeString(bytesPerS) + "/s"
}

// sizeString shows a byte count the way parseSize reads it back: in the
// largest binary unit that divides it, or in bytes.
func sizeString(n uint64) string {
	for _, u := range []struct {
		name  string
		bytes uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d%s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

func newReplicasetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "replicaset", Short: "A replicaset's weight and lock"}
	weight := func() *cobra.Command {
		var f clusterFlags
		c := &cobra.Command{
			Use:   "weight RS WEIGHT",
			Short: "Set a replicaset's weight: its share of the buckets relative to the others (0 drains it)",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				w, err := strconv.ParseUint(args[1], 10, 32)
				if err != nil {
					return usagef("invalid weight %q: want a whole number from 0 to %d", args[1], uint32(math.MaxUint32))
				}
				return f.do(cmd, "replicaset weight", func(ctx context.Context, cl *client.Client) error {
					if err := cl.Sharding().SetWeight(ctx, args[0], uint32(w)); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "replicaset %s: weight %d (`shardkit rebalance status --watch` shows the buckets moving while the rebalancer is on)\n", args[0], w)
					return nil
				})
			},
		}
		f.register(c.Flags(), 10*time.Second, "how long to wait for the answer")
		return c
	}
	lock := func(use string, locked bool) *cobra.Command {
		var f clusterFlags
		c := &cobra.Command{
			Use:   use + " RS",
			Short: map[bool]string{true: "Lock a replicaset: it neither sends nor receives buckets", false: "Unlock a replicaset"}[locked],
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return f.do(cmd, "replicaset "+use, func(ctx context.Context, cl *client.Client) error {
					if err := cl.Sharding().SetLocked(ctx, args[0], locked); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "replicaset %s: %sed\n", args[0], use)
					return nil
				})
			},
		}
		f.register(c.Flags(), 10*time.Second, "how long to wait for the answer")
		return c
	}
	cmd.AddCommand(weight(), lock("lock", true), lock("unlock", false))
	return cmd
}

// do makes the client, runs fn within --timeout, and turns its error into
// one line. Each instance asked gets its share of --timeout (attempt), so
// that one that does not answer leaves time to ask the next --peer.
func (f *clusterFlags) do(cmd *cobra.Command, what string, fn func(context.Context, *client.Client) error) error {
	return f.doWith(cmd, what, f.attempt(), fn)
}

// doWith is do with each attempt on one instance bounded by attempt: all
// of --timeout for a call that one instance may spend it all on (a
// reshard step copies and deletes for minutes; cut short, it would be
// cancelled with its outcome unknown).
func (f *clusterFlags) doWith(cmd *cobra.Command, what string, attempt time.Duration, fn func(context.Context, *client.Client) error) error {
	cl, err := f.clientWith(cmd.Context(), attempt)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	if err := fn(ctx, cl); err != nil {
		var exit *ExitError
		if errors.As(err, &exit) { // refused before any call (a key that does not parse)
			return prefixExit(what, err)
		}
		// A request the cluster refuses as invalid (a bucket out of
		// range) exits 2, as a wrong command line (data.md, "Exit codes").
		return dataError(what, f.timeout, err)
	}
	return nil
}

func parseBucket(s string) (uint32, error) {
	b, err := strconv.ParseUint(s, 10, 32)
	if err != nil || b == 0 {
		return 0, usagef("invalid bucket %q: want a whole number from 1 to the cluster's bucket count (`shardkit rebalance status` shows it)", s)
	}
	return uint32(b), nil
}

func newBucketCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bucket", Short: "Show, move or pin one bucket"}
	move := func() *cobra.Command {
		var f clusterFlags
		var to string
		var wait bool
		c := &cobra.Command{
			Use:   "move BUCKET --to RS [--wait]",
			Short: "Move a bucket to a replicaset (like vshard's bucket_send)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				b, err := parseBucket(args[0])
				if err != nil {
					return err
				}
				if to == "" {
					return usagef("--to is required: the replicaset to move the bucket to")
				}
				var mv *datav1.MoveInfo
				if err := f.do(cmd, "bucket move", func(ctx context.Context, cl *client.Client) error {
					mv, err = cl.Sharding().MoveBucket(ctx, b, to)
					return err
				}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bucket %d: moving from %s to %s (generation %d)\n", b, mv.GetFrom(), mv.GetTo(), mv.GetGeneration())
				if !wait {
					return nil
				}
				return f.waitMove(cmd, b)
			},
		}
		f.register(c.Flags(), 60*time.Second, "how long to wait (with --wait: for the move to finish)")
		c.Flags().StringVar(&to, "to", "", "the replicaset to move the bucket to")
		c.Flags().BoolVar(&wait, "wait", false, "wait until the move is done, showing its phases")
		return c
	}
	pin := func(use string, pinned bool) *cobra.Command {
		var f clusterFlags
		c := &cobra.Command{
			Use: use + " BUCKET...",
			Short: map[bool]string{true: "Pin buckets to their replicasets: the rebalancer leaves them there, and a move of them is refused",
				false: "Unpin buckets"}[pinned],
			Args: cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				buckets := make([]uint32, len(args))
				for i, a := range args {
					var err error
					if buckets[i], err = parseBucket(a); err != nil {
						return err
					}
				}
				return f.do(cmd, "bucket "+use, func(ctx context.Context, cl *client.Client) error {
					// One at a time, each said when done: a refusal
					// names its bucket, and those before it stay done.
					for _, b := range buckets {
						if err := cl.Sharding().PinBucket(ctx, b, pinned); err != nil {
							return dataError(fmt.Sprintf("bucket %d", b), f.timeout, err)
						}
						fmt.Fprintf(cmd.OutOrStdout(), "bucket %d: %sned\n", b, use)
					}
					return nil
				})
			},
		}
		f.register(c.Flags(), 10*time.Second, "how long to wait for the answer")
		return c
	}
	show := func() *cobra.Command {
		var f clusterFlags
		var space, key string
		c := &cobra.Command{
			Use:   "show BUCKET | show --space SPACE --key KEY",
			Short: "Show where a bucket (or a key's bucket) is, its pin and its replicaset's lock, and its move if one is under way",
			Long: `Show the replicaset that serves a bucket now (as routers send it: a bucket
in a move counts on its destination once switched), whether the bucket is
pinned and its replicaset locked (either keeps it where it is), and, when
one is under way, its move: from, to, phase, how long, why. With --space
and --key, the bucket is the one that key's sharding key falls in: --key is
a JSON array of the sharding key's parts alone, or of the whole primary key
(as select takes it).`,
			Args: cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var b uint32
				switch byKey := space != "" || key != ""; {
				case len(args) == 1 && !byKey:
					var err error
					if b, err = parseBucket(args[0]); err != nil {
						return err
					}
				case len(args) == 1:
					return usagef("give a BUCKET, or --space and --key, not both")
				case space == "" && key == "":
					return usagef("give a BUCKET, or --space and --key: which bucket to show")
				case space == "":
					return usagef("--key needs --space: the space whose sharding key --key gives")
				case key == "":
					return usagef("--space needs --key: the key whose bucket to show, as a JSON array")
				}
				return f.do(cmd, "bucket show", func(ctx context.Context, cl *client.Client) error {
					var def client.SpaceDef
					var k []tuple.Value
					if b == 0 {
						var err error
						if def, err = lookupSpace(ctx, cl, f.timeout, space); err != nil {
							return err
						}
						if k, err = parseBucketKey([]byte(key), def); err != nil {
							return err
						}
					}
					st, err := cl.Sharding().Status(ctx)
					if err != nil {
						return err
					}
					if b == 0 {
						if b, err = sharding.BucketOf(k, st.GetBucketCount()); err != nil {
							return usageError(fmt.Errorf("space %s: %w", def.Name, err))
						}
					}
					rs, err := cl.Sharding().BucketReplicaset(ctx, b)
					if err != nil {
						return err
					}
					out := cmd.OutOrStdout()
					fmt.Fprintf(out, "bucket %d: on %s\n", b, rs)
					for _, r := range st.GetReplicasets() {
						id := r.GetReplicasetId()
						if slices.Contains(r.GetPinnedBuckets(), b) {
							line := fmt.Sprintf("pinned to %s: the rebalancer leaves it there and a move of it is refused (shardkit bucket unpin %d)", id, b)
							if r.GetWeight() == 0 {
								line += fmt.Sprintf("; %s has weight 0, and its drain waits for it", id)
							}
							fmt.Fprintln(out, line)
						}
						if id == rs && r.GetLocked() {
							fmt.Fprintf(out, "%s is locked: it neither sends nor receives buckets (shardkit replicaset unlock %s)\n", id, id)
						}
					}
					for _, mv := range st.GetMoves() {
						if mv.GetBucket() == b {
							fmt.Fprintf(out, "moving from %s to %s (generation %d): phase %s for %v, %s\n", mv.GetFrom(), mv.GetTo(),
								mv.GetGeneration(), mv.GetPhase(), (time.Duration(mv.GetAgeMs()) * time.Millisecond).Round(time.Millisecond), mv.GetReason())
						}
					}
					return nil
				})
			},
		}
		f.register(c.Flags(), 10*time.Second, "how long to wait for the answer")
		c.Flags().StringVar(&space, "space", "", "with --key: the space of the key")
		c.Flags().StringVar(&key, "key", "", `with --space: the sharding key's parts, or the whole primary key, as a JSON array (e.g. '[42]')`)
		return c
	}
	cmd.AddCommand(move(), pin("pin", true), pin("unpin", false), show())
	return cmd
}

// parseBucketKey reads bucket show's --key, the parts of a space's
// sharding key alone (in its own order) or its whole primary key, and
// returns the sharding key's values.
func parseBucketKey(data []byte, def client.SpaceDef) ([]tuple.Value, error) {
	kf := keyFormat(def)
	sk := def.ShardingFields()
	sf := make(tuple.Format, 0, len(sk))
	for _, name := range sk {
		if i, ok := def.Format.Index(name); ok {
			sf = append(sf, def.Format[i])
		}
	}
	var parts []json.RawMessage
	if len(sf) < len(kf) && json.Unmarshal(data, &parts) == nil && len(parts) == len(sf) {
		k, err := tuple.ParseJSONKey(data, sf)
		if err != nil {
			return nil, usageError(jsonError("the key", err, "the sharding key", sf))
		}
		return k, nil
	}
	k, err := tuple.ParseJSONKey(data, kf)
	if err != nil {
		fname := "the primary key"
		if len(sf) < len(kf) {
			fname = "the sharding key " + formatString(sf) + ", or the primary key"
		}
		return nil, usageError(jsonError("the key", err, fname, kf))
	}
	out := make([]tuple.Value, 0, len(sk))
	for _, name := range sk {
		out = append(out, k[slices.Index(def.PrimaryKey, name)])
	}
	return out, nil
}

// waitMove shows a bucket's move phase by phase until it is done.
func (f *clusterFlags) waitMove(cmd *cobra.Command, b uint32) error {
	return f.do(cmd, "bucket move", func(ctx context.Context, cl *client.Client) error {
		last := ""
		for {
			st, err := cl.Sharding().Status(ctx)
			if err != nil {
				return err
			}
			var mv *datav1.MoveInfo
			for _, m := range st.GetMoves() {
				if m.GetBucket() == b {
					mv = m
				}
			}
			if mv == nil && !st.GetStale() { // a stale view may not have the move yet, or still
				fmt.Fprintf(cmd.OutOrStdout(), "bucket %d: done\n", b)
				return nil
			}
			if mv != nil && mv.GetPhase() != last {
				fmt.Fprintf(cmd.OutOrStdout(), "bucket %d: %s\n", b, mv.GetPhase())
				last = mv.GetPhase()
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("bucket %d still moving (phase %s) after --timeout: %w", b, last, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// reshardTick is how often a reshard step still running says so.
const reshardTick = 5 * time.Second

// progressTicker writes "<what>: still running after 5s" to w every tick
// until stop is called, so that a step of minutes (a copy paced by
// --copy-rate) shows it is alive; stop waits for the ticker to end.
func progressTicker(w io.Writer, what string, tick time.Duration) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(ended)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s: still running after %v\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-ended }
}

func newReshardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reshard plan|start|copy|finish|cleanup",
		Short: "Change the buckets' placement step by step, as seed 001's operator did",
		Long: `The seed's resharding procedure at bucket granularity, for an operator who wants
control instead of the rebalancer:

  plan     the buckets the weights ask to move (changes nothing)
  start    turn the rebalancer off; switch those buckets to their new
           replicasets, all at once (the send and receive quotas do not
           apply; curr = new, prev = old): routers follow at once, reads
           fall back to prev, writes have the resharding semantics
  copy     copy the switched buckets' tuples from prev to curr, never
           overwriting; prints (space, count) copied
  finish   drop prev: the copied buckets are active on curr alone
  cleanup  delete the moved buckets' tuples on prev; prints (space, count)
           deleted; the rebalancer is on again if start turned it off

Turn the rebalancer off first (shardkit rebalance config --disable), or it
may move the planned buckets itself between plan and start. Each step
refuses, saying why, when no reshard is under way or an earlier step is
not done.`,
	}
	for _, s := range []struct {
		name, short string
		step        datav1.ReshardStep
	}{{"plan", "Show the buckets the weights ask to move (changes nothing)", datav1.ReshardStep_RESHARD_STEP_PLAN},
		{"start", "Switch the planned buckets to their new replicasets (curr = new, prev = old)", datav1.ReshardStep_RESHARD_STEP_START},
		{"copy", "Copy the switched buckets' tuples from prev to curr; prints (space, count)", datav1.ReshardStep_RESHARD_STEP_COPY},
		{"finish", "Drop prev: the copied buckets are active on curr alone", datav1.ReshardStep_RESHARD_STEP_FINISH},
		{"cleanup", "Delete the moved buckets' tuples on prev; prints (space, count)", datav1.ReshardStep_RESHARD_STEP_CLEANUP}} {
		var f clusterFlags
		var format string
		c := &cobra.Command{
			Use:   s.name,
			Short: s.short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if format != "text" && format != "json" {
					return usagef("invalid --format %q: want text or json", format)
				}
				return f.doWith(cmd, "reshard "+s.name, f.timeout, func(ctx context.Context, cl *client.Client) error {
					stop := progressTicker(cmd.ErrOrStderr(), "reshard "+s.name, reshardTick)
					resp, err := cl.Sharding().Reshard(ctx, s.step)
					stop()
					if err != nil {
						return err
					}
					out := cmd.OutOrStdout()
					if format == "json" {
						return writeProtoJSONLine(out, resp)
					}
					if s.step == datav1.ReshardStep_RESHARD_STEP_PLAN {
						for _, mv := range resp.GetMoves() {
							fmt.Fprintf(out, "bucket %d: %s -> %s\n", mv.GetBucket(), mv.GetFrom(), mv.GetTo())
						}
					}
					for _, c := range resp.GetCounts() {
						fmt.Fprintf(out, "%s\t%d\n", c.GetSpace(), c.GetCount())
					}
					fmt.Fprintln(out, resp.GetSummary())
					return nil
				})
			},
		}
		f.register(c.Flags(), 10*time.Minute, "how long to wait for the step")
		c.Flags().StringVar(&format, "format", "text", "text or json")
		cmd.AddCommand(c)
	}
	return cmd
}
