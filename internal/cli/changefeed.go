package cli

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/changefeed"
)

type changefeedOptions struct {
	clusterFlags
	spaces, brokers, topic string
	name, format           string
	keyField, valueField   string
	parts                  int
	holder                 string
	leaseTTL, saveEvery    time.Duration
	logLevel, logFormat    string
	initialScan            bool
}

func newChangefeedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "changefeed",
		Short: "Send the changes of spaces to Kafka",
	}
	var o changefeedOptions
	run := &cobra.Command{
		Use:   "run --space S[,S] --brokers B[,B] --topic T [flags]",
		Short: "Send every change of the spaces to a Kafka topic, resumably, until stopped",
		Long: `Send every change of the spaces to a Kafka topic: one record per changed
tuple, keyed by its sharding key (one entity's records stay in one
partition, in order), its bucket, revision and index in headers
(shardkit-bucket, shardkit-revision, shardkit-index, shardkit-changes),
its value JSON (default) or protobuf (api/changefeed/v1 Record).

The feed's cursors are saved in the cluster's space _changefeed only after
Kafka acknowledged every record before them; a feed run again under the
same --name goes on from there (a record may come again after a crash,
with the same bucket, revision and index). Several processes of one feed
split its --parts through the cluster's leases; when one dies, the others
take its parts over after --lease-ttl. With --initial-scan, a part with no
saved cursor first sends every row of its buckets (records of kind "scan",
at the revision its watch began), then the changes. Runs until Ctrl-C; exits 1 when a
part's cursor is older than the cluster keeps (docs/changes.md, "Changefeed
to Kafka").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runChangefeed(cmd, &o) },
	}
	f := run.Flags()
	o.register(f, dataTimeout, "how long one call to an instance may take")
	f.StringVar(&o.spaces, "space", "", "the spaces to send, comma-separated (required)")
	f.StringVar(&o.brokers, "brokers", "", "Kafka's seed brokers, host:port, comma-separated (required)")
	f.StringVar(&o.topic, "topic", "", "the topic (required; it must exist)")
	f.StringVar(&o.name, "name", "", "the feed's name, for its cursors and leases (default: the topic)")
	f.StringVar(&o.format, "format", "json", "the records' values: json or protobuf")
	f.StringVar(&o.keyField, "key-field", "", "key each record by this primary-key field of every space (a string's bytes as they are) instead of the sharding key")
	f.StringVar(&o.valueField, "value-field", "", "make each record's value this string or bytes field's contents as they are, instead of the change (--format unused)")
	f.IntVar(&o.parts, "parts", 8, "how many parts the buckets are split into between the feed's processes (fixed for a feed)")
	f.StringVar(&o.holder, "holder", "", "this process's name in the leases (default: host, pid and a random suffix)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "the parts' lease time: a dead process's parts are taken over after it")
	f.DurationVar(&o.saveEvery, "save-every", 200*time.Millisecond, "how often a part saves its cursor")
	f.BoolVar(&o.initialScan, "initial-scan", false, `first send every row the spaces hold (kind "scan"), where the feed has no saved cursor`)
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	cmd.AddCommand(run)
	return cmd
}

func runChangefeed(cmd *cobra.Command, o *changefeedOptions) error {
	what := "changefeed run"
	var missing []string
	for flag, v := range map[string]string{"--space": o.spaces, "--brokers": o.brokers, "--topic": o.topic} {
		if v == "" {
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return usagef("%s: give %s", what, strings.Join(missing, ", "))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, o.logLevel) {
		return usagef("%s: invalid --log-level %q: want debug, info, warn or error", what, o.logLevel)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return usagef("%s: invalid --log-format %q: want text or json", what, o.logFormat)
	}
	if o.format != "json" && o.format != "protobuf" {
		return usagef("%s: invalid --format %q: want json or protobuf", what, o.format)
	}
	if o.parts < 1 || o.parts > 1024 {
		return usagef("%s: --parts %d: want 1 to 1024", what, o.parts)
	}
	if o.leaseTTL < 300*time.Millisecond {
		return usagef("%s: --lease-ttl %v: want at least 300ms", what, o.leaseTTL)
	}
	if o.saveEvery <= 0 {
		return usagef("%s: --save-every %v: want more than 0", what, o.saveEvery)
	}
	ctx := cmd.Context()
	cl, err := o.client(ctx)
	if err != nil {
		return usageError(err)
	}
	defer cl.Close()
	err = changefeed.Run(ctx, changefeed.Config{
		Client: cl, Spaces: splitList([]string{o.spaces}), Brokers: splitList([]string{o.brokers}), Topic: o.topic,
		Name: o.name, Format: o.format, Parts: o.parts, Holder: o.holder, LeaseTTL: o.leaseTTL, SaveEvery: o.saveEvery,
		InitialScan: o.initialScan, KeyField: o.keyField, ValueField: o.valueField, Logger: newLogger(o.logLevel, o.logFormat, cmd.ErrOrStderr()),
	})
	if err != nil && !errors.Is(err, ctx.Err()) {
		return prefixExit(what, err)
	}
	return nil
}
