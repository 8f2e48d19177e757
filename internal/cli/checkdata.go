package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/server"
)

func newCheckDataCmd() *cobra.Command {
	var dataDir, format string
	cmd := &cobra.Command{
		Use:   "check-data --data-dir DIR [--format json]",
		Short: "Check a stopped instance's data, offline",
		Long: `Check the data of a stopped instance in DIR (its --data-dir), read only.
Group 0 (the cluster's own state: instances, replicasets, buckets' places,
spaces, users) is printed first, with its applied index, last command and
digest, to compare with the other instances'. For each replicaset it
holds: every bucket's counts against the tuples it
holds (but while its copy is under way), nothing left of a bucket given
away or never held (tuples, tombstones, counts, revision, history),
tombstones only in a bucket being received, and no change of the history
above its bucket's revision. It prints each replicaset's Raft group, the
index of the last entry the instance applied, the last of those that
reached the replicaset's state machine (those after it, a new leader's
empty entry or a configuration change, changed no data), and a digest of
the replicaset's every key and value: members stopped at the same applied
index must print the same digest, and so must members stopped at applied
indexes a <= b where the one at b has its last command at or below a
(another digest is a member whose data diverged). Each problem is printed
with its bucket; exits 1 on any. --format json prints {"data_dir",
"groups":[{"group","applied_index","last_command_index","digest",
"problems":[...]}]}.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usagef("check-data needs --data-dir, the data dir of a stopped instance")
			}
			if format != "table" && format != "json" {
				return usagef("invalid --format %q: want table or json", format)
			}
			groups, err := server.CheckDataDir(dataDir)
			if err != nil {
				return &ExitError{Code: 1, Err: fmt.Errorf("check-data: %w", err)}
			}
			problems := 0
			for _, g := range groups {
				problems += len(g.Problems)
			}
			w := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					DataDir string              `json:"data_dir"`
					Groups  []server.GroupCheck `json:"groups"`
				}{dataDir, groups}); err != nil {
					return err
				}
			} else {
				for _, g := range groups {
					verdict := "ok"
					if len(g.Problems) > 0 {
						verdict = fmt.Sprintf("%d problems", len(g.Problems))
					}
					fmt.Fprintf(w, "group %d: applied index %d (last command %d), digest %s: %s\n", g.Group, g.Applied, g.LastCommand, g.Digest, verdict)
					for _, p := range g.Problems {
						fmt.Fprintf(w, "  %s\n", p)
					}
				}
			}
			if problems > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("check-data: %s: %d problems", dataDir, problems)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the data dir of a stopped instance (its --data-dir)")
	cmd.Flags().StringVar(&format, "format", "table", "table or json")
	return asDataCommand(cmd)
}
