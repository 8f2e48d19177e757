package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

type watchOptions struct {
	clusterFlags
	from        string
	format      string
	limit       int
	initialScan bool
}

func newWatchCmd() *cobra.Command {
	var o watchOptions
	cmd := &cobra.Command{
		Use:   "watch [flags] SPACE[,SPACE...]",
		Short: "Print the changes of spaces as they are committed, resumably",
		Long: `Print the changes of one or more spaces as they are committed: one event
per batch applied to a bucket, with the bucket's revision and each changed
tuple after the change (docs/changes.md). Each bucket's events come in
revision order, across the buckets' moves.

--from resumes after a cursor; without it the watch starts now, and
--initial-scan prints every tuple first (kind "scan"). On Ctrl-C
(or after --limit events) it prints on stderr the cursor to resume from.
--format jsonl prints one event a line; json prints each indented.
A cursor older than the cluster keeps is refused as compacted (exit 1):
read the data again (shardkit scan) and watch from then on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWatch(cmd, &o, strings.Split(args[0], ","))
		},
	}
	f := cmd.Flags()
	o.register(f, dataTimeout, "how long one call to an instance may take")
	f.StringVar(&o.from, "from", "", "resume after this cursor (printed by a watch that stopped)")
	f.StringVar(&o.format, "format", "jsonl", "jsonl: one event a line; json: each event indented")
	f.IntVar(&o.limit, "limit", 0, "stop after this many events (0: until Ctrl-C)")
	f.BoolVar(&o.initialScan, "initial-scan", false, `first every tuple of the spaces, as read (kind "scan", revision 0), then the changes (not with --from)`)
	return cmd
}

func runWatch(cmd *cobra.Command, o *watchOptions, spaces []string) error {
	what := "watch of " + strings.Join(spaces, ",")
	if o.format != "json" && o.format != "jsonl" {
		return usagef("%s: invalid --format %q: want json or jsonl", what, o.format)
	}
	if o.limit < 0 {
		return usagef("%s: --limit %d: give 0 or more", what, o.limit)
	}
	opts := client.WatchOptions{Spaces: spaces, InitialScan: o.initialScan}
	if o.initialScan && o.from != "" {
		return usagef("%s: --initial-scan reads every tuple, --from resumes after a cursor: give one or the other", what)
	}
	if o.from != "" {
		cur, err := client.ParseCursor(o.from)
		if err != nil {
			return usagef("%s: --from: %v", what, err)
		}
		opts.From = &cur
	}
	ctx := cmd.Context()
	cl, err := o.client(ctx)
	if err != nil {
		return usageError(err)
	}
	defer cl.Close()
	// The watch runs until ctx ends (Ctrl-C).
	w, err := cl.Watch(ctx, opts)
	if err != nil {
		return prefixExit(what, err)
	}
	defer w.Close()
	out := bufio.NewWriter(cmd.OutOrStdout())
	n := 0
	var watchErr error
	for ev, err := range w.Events() {
		if err != nil {
			watchErr = err
			break
		}
		b := appendEventJSON(nil, ev, o.format == "json")
		if _, err := out.Write(append(b, '\n')); err != nil {
			return err
		}
		n++
		if err := out.Flush(); err != nil {
			return err
		}
		if o.limit > 0 && n >= o.limit {
			break
		}
	}
	_ = out.Flush()
	fmt.Fprintf(cmd.ErrOrStderr(), "%d events; resume with: --from %s\n", n, w.Cursor())
	if watchErr != nil && !errors.Is(watchErr, context.Canceled) {
		return prefixExit(what, watchErr)
	}
	return nil
}

// appendEventJSON writes an event as {"bucket":B,"revision":R,"time":T,
// "changes":[{"space":S,"kind":K,"key":[...],"tuple":[...],"version":V}]}
// (a delete's change has no tuple); indented, one key a line.
func appendEventJSON(b []byte, ev client.Event, indent bool) []byte {
	nl, in, in2 := "", "", ""
	if indent {
		nl, in, in2 = "\n", "  ", "    "
	}
	b = append(b, '{')
	b = append(b, nl+in+`"bucket":`...)
	b = strconv.AppendUint(b, uint64(ev.Bucket), 10)
	b = append(b, ","+nl+in+`"revision":`...)
	b = strconv.AppendUint(b, ev.Revision, 10)
	b = append(b, ","+nl+in+`"time":`...)
	b = strconv.AppendQuote(b, ev.Time.UTC().Format(time.RFC3339Nano))
	b = append(b, ","+nl+in+`"changes":[`...)
	for i, ch := range ev.Changes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, nl+in2+`{"space":`...)
		b = strconv.AppendQuote(b, ch.Space)
		b = append(b, `,"kind":`...)
		b = strconv.AppendQuote(b, string(ch.Kind))
		b = append(b, `,"key":`...)
		b = tuple.AppendJSON(b, ch.Key)
		if ch.Tuple != nil {
			b = append(b, `,"tuple":`...)
			b = tuple.AppendJSON(b, ch.Tuple)
		}
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, ch.Version, 10)
		b = append(b, '}')
	}
	if len(ev.Changes) > 0 {
		b = append(b, nl+in...)
	}
	return append(b, "]"+nl+"}"...)
}
