package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var o demo.Options
	var plain bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a local cluster of real instances on loopback and print its status until Ctrl+C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Redraw = !plain && isTerminal(cmd.OutOrStdout())
			if f, ok := cmd.OutOrStdout().(*os.File); ok && o.Redraw {
				o.TermSize = demo.TerminalSize(f)
			}
			return demo.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&o.Instances, "instances", 6, "number of instances")
	cmd.Flags().IntVar(&o.ReplicationFactor, "replication-factor", 3, "instances per replicaset")
	cmd.Flags().IntVar(&o.Rows, "rows", 1000, "rows of the sample space offers (0: none)")
	cmd.Flags().BoolVar(&plain, "no-redraw", false, "print each status table after the last, even on a terminal")
	cmd.Flags().StringVar(&o.Dir, "data-dir", "", "where the instances keep their data and logs (default: a temp dir, removed at exit)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "stop after this long (default: until Ctrl+C)")
	cmd.Flags().DurationVar(&o.Every, "every", 0, "how often to print the status (default 2s)")
	cmd.Flags().BoolVar(&o.Insecure, "insecure", false, "run in plaintext (default: certificates in <data-dir>/certs, mutual TLS)")
	return cmd
}
