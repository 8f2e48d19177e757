package cli

import (
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/server"
)

func newDemoCmd() *cobra.Command {
	var o server.RaftDemoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local demo: a 3-member raft group on loopback, printing its status until Ctrl+C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return server.RunRaftDemo(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&o.Members, "members", 3, "number of raft members")
	cmd.Flags().StringVar(&o.Dir, "data-dir", "", "where the members keep their data (default: a temp dir, removed at exit)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "stop after this long (default: until Ctrl+C)")
	return cmd
}
