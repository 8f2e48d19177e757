package cli

import (
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a local cluster of real instances on loopback and print its status until Ctrl+C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&o.Instances, "instances", 3, "number of instances")
	cmd.Flags().StringVar(&o.Dir, "data-dir", "", "where the instances keep their data and logs (default: a temp dir, removed at exit)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "stop after this long (default: until Ctrl+C)")
	cmd.Flags().DurationVar(&o.Every, "every", 0, "how often to print the status (default 2s)")
	cmd.Flags().BoolVar(&o.Insecure, "insecure", false, "run in plaintext (default: certificates in <data-dir>/certs, mutual TLS)")
	return cmd
}
