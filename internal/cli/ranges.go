package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// rangeFlags are select's flags for a range within one bucket (when no
// full KEY is given).
type rangeFlags struct {
	bucket                     uint32
	prefix, from, after, until string
	reverse                    bool
	limit                      int
}

func (r *rangeFlags) register(f *pflag.FlagSet) {
	f.Uint32Var(&r.bucket, "bucket", 0, "without KEY: read a range of this bucket (shardkit bucket show --space S --key K finds a key's)")
	f.StringVar(&r.prefix, "prefix", "", "a range: only keys that start with these leading key parts (a JSON array)")
	f.StringVar(&r.from, "from", "", "a range: only keys from the first that starts with these leading key parts (inclusive)")
	f.StringVar(&r.after, "after", "", "a range: only keys past every key that starts with these leading key parts (exclusive)")
	f.StringVar(&r.until, "until", "", "a range: only keys before every key that starts with these leading key parts (exclusive)")
	f.BoolVar(&r.reverse, "reverse", false, "a range: in descending key order")
	f.IntVar(&r.limit, "limit", 0, "a range: at most this many tuples (0: 1000; at most 10000)")
}

// rangeFlagNames are the flags that make a select a range.
var rangeFlagNames = []string{"bucket", "prefix", "from", "after", "until", "reverse", "limit"}

const selectRangeLong = `
Without KEY, select reads a range of one bucket (--bucket) in primary-key
order: --prefix, --from or --after, and --until each take the leading
parts of a primary key as a JSON array (one part up to all of them); they
combine. A range prints a JSON array of its tuples; when more follow, a
line on stderr says how to read on (--after the last key, or --until it
with --reverse).`

// selectRange makes select take --bucket and the range flags instead of
// KEY.
func selectRange(cmd *cobra.Command, o *dataOptions) {
	var r rangeFlags
	r.register(cmd.Flags())
	cmd.Use = "select [flags] SPACE [KEY]"
	cmd.Short = "Read the tuple with a full primary key, or a range of one bucket"
	cmd.Long = cmd.Short + ".\n" + dataLong + "\n" + selectRangeLong
	point := cmd.Args
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return nil
		}
		return point(cmd, args)
	}
	runPoint := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return runRange(cmd, o, &r, args[0])
		}
		for _, name := range rangeFlagNames {
			if cmd.Flags().Changed(name) {
				return usagef("%s: --%s is for a range (no KEY); a KEY selects one tuple", commandName(cmd), name)
			}
		}
		return runPoint(cmd, args)
	}
}

// runRange runs select SPACE --bucket B [...] (a range).
func runRange(cmd *cobra.Command, o *dataOptions, r *rangeFlags, space string) error {
	what := "range of " + space
	if !cmd.Flags().Changed("bucket") || r.bucket == 0 {
		return usagef("%s takes KEY (a point read) or --bucket B (a range); got neither", commandName(cmd))
	}
	if r.from != "" && r.after != "" {
		return usagef("%s: give --from (inclusive) or --after (exclusive), not both", what)
	}
	if r.limit < 0 {
		return usagef("%s: invalid --limit %d: give 0 (1000) or more", what, r.limit)
	}
	if o.readInfo {
		return usagef("%s: --read-info is for a point select (KEY)", what)
	}
	mode, err := parseMode(o.mode)
	if err != nil {
		return err
	}
	cl, ctx, done, err := o.dataClient(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	def, err := lookupSpace(ctx, cl, o.timeout, space)
	if err != nil {
		return prefixExit(what, err)
	}
	ro := client.RangeOptions{Bucket: r.bucket, Reverse: r.reverse, Limit: r.limit, Mode: mode}
	for _, b := range []struct {
		flag, arg string
		dst       *[]tuple.Value
	}{{"prefix", r.prefix, &ro.Prefix}, {"from", r.from, &ro.From}, {"after", r.after, &ro.After}, {"until", r.until, &ro.Until}} {
		if !cmd.Flags().Changed(b.flag) {
			continue
		}
		if *b.dst, err = parseBound(b.flag, b.arg, def); err != nil {
			return prefixExit(what, err)
		}
	}
	ts, more, err := cl.Space(def.Name).Range(ctx, ro)
	if err != nil {
		return dataError(what, o.timeout, err)
	}
	rs := make([]client.Result, len(ts))
	for i, v := range ts {
		rs[i] = client.Result{Found: true, Tuple: v.Tuple, Version: v.Version}
	}
	if err := writeTuples(cmd.OutOrStdout(), o.versions, rs...); err != nil {
		return err
	}
	if more && len(ts) > 0 {
		flag := "--after"
		if r.reverse {
			flag = "--until"
		}
		key := keyOf(ts[len(ts)-1].Tuple, def)
		_, err := fmt.Fprintf(cmd.ErrOrStderr(), "more tuples follow; read on with %s '%s'\n", flag, tuple.AppendJSON(nil, key))
		return err
	}
	return nil
}

// keyOf returns a tuple's primary key by the space's definition.
func keyOf(t tuple.Tuple, def client.SpaceDef) tuple.Tuple {
	key := make(tuple.Tuple, 0, len(def.PrimaryKey))
	for _, name := range def.PrimaryKey {
		if i, ok := def.Format.Index(name); ok && i < len(t) {
			key = append(key, t[i])
		}
	}
	return key
}

// parseBound reads a range bound: the leading parts of a primary key, a
// JSON array of one part up to all of them.
func parseBound(flag, arg string, def client.SpaceDef) ([]tuple.Value, error) {
	kf := keyFormat(def)
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(arg), &parts); err != nil {
		return nil, usagef("--%s %s: not a JSON array of leading key parts (%s): %v", flag, arg, formatString(kf), err)
	}
	if len(parts) == 0 || len(parts) > len(kf) {
		return nil, usagef("--%s %s: %d parts; give 1 to %d leading parts of the primary key (%s)", flag, arg, len(parts), len(kf), formatString(kf))
	}
	k, err := tuple.ParseJSONKey([]byte(arg), kf[:len(parts)])
	if err != nil {
		return nil, usageError(jsonError("--"+flag, err, "the primary key", kf))
	}
	return k, nil
}

// scanOptions are the flags of scan.
type scanOptions struct {
	clusterFlags
	cursor   string
	limit    int
	pageSize int
	format   string
	mode     string
	versions bool
	progress bool
}

func newScanCmd() *cobra.Command {
	var o scanOptions
	cmd := &cobra.Command{
		Use:   "scan [flags] SPACE",
		Short: "Read every tuple of a space, in bucket and key order, resumably",
		Long: `Read every tuple of a space, in bucket and key order, a page at a time.

Each page is read from the replicaset that holds its bucket when the page
is asked, after the last key read, so buckets that move during the scan
are followed: no tuple is missed or repeated. Tuples written during the
scan are read if the scan has not passed their bucket and key when the
write applies (docs/data.md, "Ranges and scans").

--format json prints one JSON array; jsonl prints one tuple a line (for
exports), with progress on stderr when it is a terminal. Stopped by
--limit, or failing midway, the scan prints on stderr the --cursor that
resumes it after the last tuple printed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runScan(cmd, &o, args[0])
		},
	}
	asDataCommand(cmd, "SPACE")
	f := cmd.Flags()
	o.register(f, dataTimeout, "how long one page's call may take (the scan as a whole has no deadline)")
	f.StringVar(&o.cursor, "cursor", "", "resume after the tuple this cursor names (printed by a scan that stopped)")
	f.IntVar(&o.limit, "limit", 0, "at most this many tuples (0: every one)")
	f.IntVar(&o.pageSize, "page-size", 1000, "tuples per call (at most 10000)")
	f.StringVar(&o.format, "format", "json", "json: one JSON array; jsonl: one tuple a line")
	f.StringVar(&o.mode, "mode", "rw", "rw: each bucket's leader (linearizable pages); ro: a replica (may be stale)")
	f.BoolVar(&o.versions, "versions", false, `print each tuple as {"tuple":[...],"version":N}`)
	f.BoolVar(&o.progress, "progress", false, "print progress on stderr even when it is not a terminal")
	return cmd
}

func runScan(cmd *cobra.Command, o *scanOptions, space string) error {
	what := "scan of " + space
	if o.format != "json" && o.format != "jsonl" {
		return usagef("%s: invalid --format %q: want json or jsonl", what, o.format)
	}
	if o.limit < 0 || o.pageSize <= 0 {
		return usagef("%s: --limit %d and --page-size %d: give a limit of 0 or more and a page size of 1 or more", what, o.limit, o.pageSize)
	}
	mode, err := parseMode(o.mode)
	if err != nil {
		return err
	}
	cl, err := o.client(cmd.Context())
	if err != nil {
		return usageError(err)
	}
	defer cl.Close()
	ctx := cmd.Context()
	lctx, cancel := context.WithTimeout(ctx, o.timeout)
	def, err := lookupSpace(lctx, cl, o.timeout, space)
	cancel()
	if err != nil {
		return prefixExit(what, err)
	}
	stderr := cmd.ErrOrStderr()
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 256<<10)
	jsonl := o.format == "jsonl"
	var prog *scanProgress
	if o.progress || isTerminal(stderr) {
		prog = &scanProgress{w: stderr, start: time.Now(), last: time.Now()}
	}
	n := 0
	var last client.ScanResult
	var buf []byte
	var scanErr error
	for r, err := range cl.Space(def.Name).Scan(ctx, client.ScanOptions{Cursor: o.cursor, Limit: o.limit, PageSize: o.pageSize, Mode: mode}) {
		if err != nil {
			scanErr = err
			break
		}
		if !jsonl {
			if n == 0 {
				buf = append(buf, '[')
			} else {
				buf = append(buf, ',')
			}
		}
		buf = appendScanned(buf, o.versions, r)
		if jsonl {
			buf = append(buf, '\n')
		}
		n++
		last = r
		if len(buf) >= 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		if prog != nil {
			prog.tick(n, r.Bucket)
		}
	}
	switch {
	case jsonl:
	case n > 0:
		buf = append(buf, ']', '\n') // also after a failure: the tuples printed are JSON
	case scanErr == nil:
		buf = append(buf, '[', ']', '\n')
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if prog != nil {
		prog.done(n)
	}
	resume := o.cursor
	if n > 0 {
		resume = last.Cursor()
	}
	if scanErr != nil {
		if resume != "" {
			scanErr = fmt.Errorf("%w; %d tuples printed; resume with --cursor %s", scanErr, n, resume)
		}
		return dataError(what, o.timeout, scanErr)
	}
	if o.limit > 0 && n == o.limit {
		_, err := fmt.Fprintf(stderr, "stopped at --limit %d; resume with --cursor %s\n", o.limit, resume)
		return err
	}
	return nil
}

// appendScanned appends a scanned tuple as select prints one.
func appendScanned(b []byte, versions bool, r client.ScanResult) []byte {
	if !versions {
		return tuple.AppendJSON(b, r.Tuple)
	}
	b = append(b, `{"tuple":`...)
	b = tuple.AppendJSON(b, r.Tuple)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, r.Version, 10)
	return append(b, '}')
}

// scanProgress writes a scan's progress on one terminal line.
type scanProgress struct {
	w           io.Writer
	start, last time.Time
}

func (p *scanProgress) tick(n int, bucket uint32) {
	if n%1000 != 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < 500*time.Millisecond {
		return
	}
	p.last = now
	fmt.Fprintf(p.w, "\rscan: %d tuples, %.0f/s, bucket %d ", n, float64(n)/now.Sub(p.start).Seconds(), bucket)
}

func (p *scanProgress) done(n int) {
	el := time.Since(p.start)
	fmt.Fprintf(p.w, "\rscan: %d tuples in %v, %.0f/s\n", n, el.Round(time.Millisecond), float64(n)/max(el.Seconds(), 1e-9))
}
