package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Set at link time: go build -ldflags "-X github.com/shardkit/shardkit/internal/cli.version=v0.1.0 -X ...commit=abc".
var (
	version = "dev"
	commit  = "unknown"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "shardkit %s\ncommit %s\ngo %s %s/%s\n",
				version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
