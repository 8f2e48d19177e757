package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/backup"
	"github.com/shardkit/shardkit/internal/replicaset"
)

// backupTimeout bounds a backup or a restore by default: long, since it
// copies the whole cluster.
const backupTimeout = time.Hour

func newBackupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Create, verify, list and restore backups of a cluster",
		Long: `A backup is a directory: every bucket of the cluster, each captured at one
point on the replicaset holding it, with its rows, remembered request ids,
change history and revision, and the cluster's spaces; a manifest.json,
written last, names every file with its size and SHA-256. See
docs/operations.md, "Backups".`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q; want create, verify, list or restore", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newBackupCreateCmd(), newBackupVerifyCmd(), newBackupListCmd(), newBackupRestoreCmd())
	return cmd
}

// backupCluster is backup.Cluster over the command's client.
type backupCluster struct{ c *client.Client }

func (b backupCluster) Routing(ctx context.Context) (*datav1.GetRoutingResponse, error) {
	var resp *datav1.GetRoutingResponse
	err := b.c.Do(ctx, "get routing", true, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).GetRouting(ctx, &datav1.GetRoutingRequest{}, opts...)
		return err
	})
	return resp, err
}

func (b backupCluster) Dial(addr string) (grpc.ClientConnInterface, error) { return b.c.Conn(addr) }

func (b backupCluster) Users(ctx context.Context) ([]backup.User, error) {
	us, err := b.c.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]backup.User, 0, len(us))
	for _, u := range us {
		out = append(out, backup.User{Name: u.GetName(), Role: client.RoleName(u.GetRole()), HasPassword: u.GetHasPassword()})
	}
	return out, nil
}

// progressLine prints p on one redrawn line of a terminal.
func progressLine(w io.Writer, verb string, start time.Time, p backup.Progress) {
	fmt.Fprintf(w, "\r%s %d/%d buckets, %d rows, %s in %.1fs   ", verb, p.Buckets, p.BucketCount, p.Rows, byteSize(p.Bytes), time.Since(start).Seconds())
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

type backupCreateOptions struct {
	clusterFlags
	to        string
	base      string
	progress  bool
	chunkRows int
	pace      string
}

func newBackupCreateCmd() *cobra.Command {
	var o backupCreateOptions
	cmd := &cobra.Command{
		Use:   "create --to DIR [flags]",
		Short: "Back the cluster up into a new directory",
		Long: `Back the running cluster up into DIR (new, or empty). Every write
acknowledged before the command started is in the backup; writes go on
meanwhile. A bucket moving is captured once its move is over, from the
replicaset holding it then. The manifest is written last: a directory
without one (the command failed or was killed) is an incomplete backup,
which verify names and restore refuses. Needs the admin role when the
cluster's security is on.

With --incremental-from DIR2 (an earlier backup of the cluster, full or
incremental) the backup holds only what changed since DIR2: per bucket
its changed and deleted rows, or the bucket whole where its change
history no longer reaches back to DIR2. Restoring it reads its chain
(DIR2, DIR2's base, ..., down to a full backup), which must stay in place
(a relative DIR2 is recorded relative to DIR).

A backup is elastic work, as a move's copy is: the replicasets are read
one at a time, each leader at a pace it sets from its clients' write
delay (full speed while they write nothing, slower while they wait
longer). --pace off reads every replicaset at once as fast as the
leaders can, whatever it costs the clients.

  shardkit backup create --peer 127.0.0.1:3301 --to /backups/2026-11-28
  shardkit backup create --peer 127.0.0.1:3301 --to /backups/2026-11-29 --incremental-from /backups/2026-11-28`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.to == "" {
				return usagef("--to is required: the directory to write the backup into")
			}
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			stderr := cmd.ErrOrStderr()
			show := o.progress || isTerminal(stderr)
			start := time.Now()
			if o.chunkRows < 0 || o.chunkRows > replicaset.CopyChunkTuples {
				return usagef("invalid --chunk-rows %d: want 1 to %d (0: %d)", o.chunkRows, replicaset.CopyChunkTuples, replicaset.CopyChunkTuples)
			}
			unpaced, err := parsePace("pace", o.pace, "auto: each replicaset yields to its clients' writes; off: all at once, as fast as they read")
			if err != nil {
				return err
			}
			opts := backup.CreateOptions{ChunkTuples: o.chunkRows, Base: o.base, Unpaced: unpaced}
			if show {
				opts.Progress = func(p backup.Progress) { progressLine(stderr, "backed up", start, p) }
			}
			m, err := backup.Create(ctx, backupCluster{cl}, o.to, opts)
			if show {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return dataError("backup create", o.timeout, err)
			}
			s := summarize(m)
			secs := time.Since(start).Seconds()
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %d buckets, %d rows, %s in %d files to %s in %.1fs (%s/s)\n",
				m.BucketCount, s.rows, byteSize(s.bytes), len(m.Files), o.to, secs, byteSize(int64(float64(s.bytes)/max(secs, 1e-3))))
			if m.Incremental() {
				fmt.Fprintf(cmd.OutOrStdout(), "incremental since %s: %d buckets as their changes, %d whole (their history no longer reaches back)\n",
					o.base, s.changeSets, m.BucketCount-s.changeSets)
			}
			return nil
		},
	}
	asDataCommand(cmd)
	f := cmd.Flags()
	o.register(f, backupTimeout, "how long the whole backup may take")
	f.StringVar(&o.to, "to", "", "the directory to write the backup into (new, or empty)")
	f.StringVar(&o.base, "incremental-from", "", "an earlier backup of the cluster (full or incremental): back up only what changed since it")
	f.IntVar(&o.chunkRows, "chunk-rows", 0, "rows per record of the data files at most (0: 1000)")
	f.BoolVar(&o.progress, "progress", false, "print progress on stderr even when it is not a terminal")
	f.StringVar(&o.pace, "pace", "auto", "auto: each replicaset's leader reads at a pace its clients' write delay sets (as a move's copy); off: as fast as it can")
	return cmd
}

type backupSummary struct {
	rows    uint64
	bytes   int64
	bySpace map[uint32]uint64
	// changeSets counts the buckets held as their changes since the base
	// (an incremental's).
	changeSets uint32
}

func summarize(m *backup.Manifest) backupSummary {
	s := backupSummary{bySpace: map[uint32]uint64{}}
	for _, f := range m.Files {
		s.bytes += f.Size
		s.changeSets += uint32(len(f.Changes))
		for sp, n := range f.Rows {
			s.rows += n
			s.bySpace[sp] += n
		}
	}
	return s
}

func newBackupVerifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check a backup's manifest, files and checksums",
		Long: `Check the backup in DIR: its manifest, every file's size and SHA-256, every
record's CRC32C, and that every bucket is in it exactly once, whole (or,
in an incremental backup, as its changes). Of an incremental backup its
chain is checked too: each base present, with the manifest recorded, and
its files. Each missing or damaged file, and each missing or replaced
base, is named; a directory without a manifest is an incomplete backup.
Exits 1 on any problem.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := backup.Verify(args[0])
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			if len(rep.Problems) > 0 {
				for _, p := range rep.Problems {
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
				return &ExitError{Code: 1, Err: fmt.Errorf("backup verify: %s: %d problems", args[0], len(rep.Problems))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d buckets in %d files\n", args[0], rep.Manifest.BucketCount, len(rep.Manifest.Files))
			if rep.Manifest.Incremental() {
				chain, err := backup.Chain(args[0], rep.Manifest)
				if err != nil {
					return &ExitError{Code: 1, Err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "an incremental backup; its chain of %d backups verified: %s\n", len(chain), chainNames(chain))
			}
			return nil
		},
	}
	return asDataCommand(cmd, "DIR")
}

type backupListJSON struct {
	// Kind is full or incremental.
	Kind string `json:"kind"`
	// Chain is what a restore reads, the full backup first and this one
	// last (an incremental's; a full one's is itself).
	Chain       []backupChainJSON         `json:"chain"`
	Created     time.Time                 `json:"created"`
	BucketCount uint32                    `json:"bucket_count"`
	Files       int                       `json:"files"`
	Bytes       int64                     `json:"bytes"`
	Rows        uint64                    `json:"rows"`
	Spaces      []backupSpaceJSON         `json:"spaces"`
	Replicasets []backup.ReplicasetWeight `json:"replicasets"`
}

type backupChainJSON struct {
	Dir     string    `json:"dir"`
	Kind    string    `json:"kind"`
	Created time.Time `json:"created"`
	// ChangeSets counts the buckets the backup holds as their changes
	// since its base.
	ChangeSets uint32 `json:"change_sets"`
	Bytes      int64  `json:"bytes"`
}

// kindOf is a manifest's kind (full for format 1).
func kindOf(m *backup.Manifest) string {
	if m.Incremental() {
		return backup.KindIncremental
	}
	return backup.KindFull
}

// chainNames is a chain as text: its directories, oldest first.
func chainNames(chain []backup.Link) string {
	var names []string
	for _, l := range chain {
		names = append(names, fmt.Sprintf("%s (%s)", l.Dir, kindOf(l.Manifest)))
	}
	return strings.Join(names, " <- ")
}

type backupSpaceJSON struct {
	Name string `json:"name"`
	ID   uint32 `json:"id"`
	Rows uint64 `json:"rows"`
}

func newBackupListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list DIR",
		Short: "Show what a backup holds",
		Long: `Show what the backup in DIR holds: when it was taken, its buckets, its
spaces with their rows, its size, and the source cluster's replicasets;
of an incremental backup its chain (what a restore reads, the full backup
first) and the rows written since its base. It reads the manifests only
(verify checks the files). --format json prints {"kind","chain":[{"dir",
"kind","created","change_sets","bytes"}],"created","bucket_count","files",
"bytes","rows","spaces":[{"name","id","rows"}],"replicasets":[{"id",
"weight"}]}.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "table" && format != "json" {
				return usagef("invalid --format %q: want table or json", format)
			}
			m, err := backup.ReadManifest(args[0])
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			chain, err := backup.Chain(args[0], m)
			if err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			s := summarize(m)
			out := backupListJSON{Kind: kindOf(m), Created: m.Created, BucketCount: m.BucketCount, Files: len(m.Files), Bytes: s.bytes, Rows: s.rows,
				Spaces: []backupSpaceJSON{}, Replicasets: m.Replicasets}
			for _, l := range chain {
				ls := summarize(l.Manifest)
				out.Chain = append(out.Chain, backupChainJSON{Dir: l.Dir, Kind: kindOf(l.Manifest), Created: l.Manifest.Created, ChangeSets: ls.changeSets, Bytes: ls.bytes})
			}
			for i, raw := range m.Spaces {
				sp := &datav1.Space{}
				if err := protojson.Unmarshal(raw, sp); err != nil {
					return &ExitError{Code: 1, Err: fmt.Errorf("backup list: the manifest's space %d: %w", i, err)}
				}
				out.Spaces = append(out.Spaces, backupSpaceJSON{Name: sp.GetName(), ID: sp.GetId(), Rows: s.bySpace[sp.GetId()]})
			}
			slices.SortFunc(out.Spaces, func(a, b backupSpaceJSON) int { return strings.Compare(a.Name, b.Name) })
			w := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if m.Incremental() {
				fmt.Fprintf(w, "incremental, taken %s; %d buckets (%d as their changes since its base, %d whole), %d rows written since, %s in %d files\n",
					m.Created.Format(time.RFC3339), m.BucketCount, s.changeSets, m.BucketCount-s.changeSets, s.rows, byteSize(s.bytes), len(m.Files))
				fmt.Fprintln(w, "chain (a restore reads each, the full backup first):")
				for _, l := range out.Chain {
					fmt.Fprintf(w, "  %s  %s, taken %s, %s\n", l.Dir, l.Kind, l.Created.Format(time.RFC3339), byteSize(l.Bytes))
				}
			} else {
				fmt.Fprintf(w, "taken %s; %d buckets, %d rows, %s in %d files\n", m.Created.Format(time.RFC3339), m.BucketCount, s.rows, byteSize(s.bytes), len(m.Files))
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SPACE\tID\tROWS")
			for _, sp := range out.Spaces {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", sp.Name, sp.ID, sp.Rows)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			var rs []string
			for _, r := range m.Replicasets {
				rs = append(rs, fmt.Sprintf("%s (weight %d)", r.ID, r.Weight))
			}
			fmt.Fprintf(w, "source replicasets: %s\n", strings.Join(rs, ", "))
			return nil
		},
	}
	asDataCommand(cmd, "DIR")
	cmd.Flags().StringVar(&format, "format", "table", "table or json")
	return cmd
}

type backupRestoreOptions struct {
	clusterFlags
	from     string
	progress bool
}

func newBackupRestoreCmd() *cobra.Command {
	var o backupRestoreOptions
	cmd := &cobra.Command{
		Use:   "restore --from DIR [flags]",
		Short: "Restore a backup into a running cluster with no spaces",
		Long: `Restore the backup in DIR into the running cluster, which must have no
spaces (so no rows) and the backup's bucket count: the backup is verified,
its spaces are created, and each bucket's rows, remembered request ids,
change history and revision go to the replicaset the new cluster's
weights place it on (any number of replicasets). An incremental backup is
restored with its chain: each bucket is composed from the full backup
and the changes of each incremental after it, in order. Needs the admin
role when the cluster's security is on.

  shardkit backup restore --peer 127.0.0.1:4301 --from /backups/2026-11-28`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.from == "" {
				return usagef("--from is required: the backup's directory")
			}
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			stderr := cmd.ErrOrStderr()
			show := o.progress || isTerminal(stderr)
			start := time.Now()
			opts := backup.RestoreOptions{CreateSpace: func(ctx context.Context, sp *datav1.Space) (*datav1.Space, error) {
				var resp *datav1.CreateSpaceResponse
				err := cl.Do(ctx, "create space", false, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
					var err error
					resp, err = datav1.NewDataServiceClient(conn).CreateSpace(ctx, &datav1.CreateSpaceRequest{Space: sp}, opts...)
					return err
				})
				return resp.GetSpace(), err
			}, CreateUser: func(ctx context.Context, u backup.User) error {
				return cl.CreateUser(ctx, u.Name, u.Role)
			}}
			// The rows sent: of an incremental backup, its chain's composed.
			var sent backup.Progress
			opts.Progress = func(p backup.Progress) {
				sent = p
				if show {
					progressLine(stderr, "restored", start, p)
				}
			}
			m, err := backup.Restore(ctx, backupCluster{cl}, o.from, opts)
			if show {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return dataError("backup restore", o.timeout, err)
			}
			secs := time.Since(start).Seconds()
			fmt.Fprintf(cmd.OutOrStdout(), "restored %d buckets, %d rows, %d spaces from %s in %.1fs\n", m.BucketCount, sent.Rows, len(m.Spaces), o.from, secs)
			for _, u := range m.Users {
				if u.HasPassword {
					fmt.Fprintf(cmd.OutOrStdout(), "user %s had a console password, which a backup does not hold: set it again (shardkit user set-password %s --password-stdin)\n", u.Name, u.Name)
				}
			}
			return nil
		},
	}
	asDataCommand(cmd)
	f := cmd.Flags()
	o.register(f, backupTimeout, "how long the whole restore may take")
	f.StringVar(&o.from, "from", "", "the backup's directory")
	f.BoolVar(&o.progress, "progress", false, "print progress on stderr even when it is not a terminal")
	return cmd
}
