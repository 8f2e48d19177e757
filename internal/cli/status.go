package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/statusview"
)

type statusOptions struct {
	clusterFlags
	format string
	all    bool
}

func newStatusCmd() *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the cluster's instances and replicasets as an instance sees them",
		Long: `Print the cluster's status: its instances (grades, Raft roles, addresses,
failure domains) and replicasets (leaders, weights, buckets), as the instance at
--peer sees them after catching up with the Raft leader. Expelled instances are
listed only with --all. --format json prints the stable form documented in
docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.register(f, 10*time.Second, "how long to wait for the answer")
	f.StringVar(&o.format, "format", "table", "table or json")
	f.BoolVar(&o.all, "all", false, "include expelled instances and replicasets")
	return cmd
}

func runStatus(ctx context.Context, o statusOptions, out io.Writer) error {
	if o.format != "table" && o.format != "json" {
		return fmt.Errorf("invalid --format %q: want table or json", o.format)
	}
	cl, err := o.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	resp, err := cl.Status(ctx, o.all)
	if err != nil {
		return fmt.Errorf("status: %w", callError(o.timeout, err))
	}
	st := statusview.FromProto(resp, o.all)
	if o.format == "json" {
		err = writeStatusJSON(out, st)
	} else {
		err = statusview.WriteTable(out, st)
	}
	if err == nil && st.NoQuorum() {
		return &ExitError{Code: exitNoQuorum, Err: fmt.Errorf("status: %s; the grades shown are the last known", st.QuorumSummary())}
	}
	return err
}

// exitNoQuorum is the exit code of a status that was printed but is not
// confirmed: group 0 has no quorum (or no leader was confirmed in time).
const exitNoQuorum = 3

// writeStatusJSON prints the status as --format json does (indented; the
// HTTP endpoint /api/v1/cluster writes the same View).
func writeStatusJSON(out io.Writer, st statusview.View) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(st)
}
