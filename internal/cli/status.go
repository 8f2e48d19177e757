package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/cluster/statusview"
)

type statusOptions struct {
	peer    string
	format  string
	all     bool
	timeout time.Duration
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
	f.StringVar(&o.peer, "peer", defaultPeer, "address (host:port) of any cluster instance")
	f.StringVar(&o.format, "format", "table", "table or json")
	f.BoolVar(&o.all, "all", false, "include expelled instances and replicasets")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	return cmd
}

func runStatus(ctx context.Context, o statusOptions, out io.Writer) error {
	if o.format != "table" && o.format != "json" {
		return fmt.Errorf("invalid --format %q: want table or json", o.format)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("invalid --timeout %v: must be positive", o.timeout)
	}
	client, closeConn, err := dialCluster(o.peer)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	resp, err := client.GetStatus(ctx, &clusterv1.GetStatusRequest{All: o.all})
	if err != nil {
		return fmt.Errorf("status: %w", callError(o.peer, o.timeout, err))
	}
	st := statusview.FromProto(resp, o.all)
	if o.format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(st)
	}
	return statusview.WriteTable(out, st)
}
