package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/cache/lease"
)

// newCacheCmd is `shardkit cache`: tools for the cache template's shard
// lease table (SPEC C11).
func newCacheCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Shard lease tables of cache services built on the cache template",
	}
	cmd.AddCommand(newCacheInitLeasesCmd(), newCacheLeasesCmd())
	return cmd
}

type leaseDBFlags struct {
	driver, dsn, table string
	sec                securityFlags
}

func (f *leaseDBFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.driver, "driver", "sqlite", "lease store: sqlite, mysql, postgres, or shardkit (a cluster's leases)")
	cmd.Flags().StringVar(&f.dsn, "dsn", "", "sqlite: a file name; mysql: user:pass@tcp(host:3306)/db; postgres: a URL; shardkit: a cluster instance host:port")
	cmd.Flags().StringVar(&f.table, "table", lease.DefaultTable, "lease table name (shardkit: namespace of the lease names)")
	f.sec.register(cmd.Flags())
}

func (f *leaseDBFlags) open() (lease.Store, error) {
	if f.dsn == "" {
		return nil, &ExitError{Code: 2, Err: errors.New("--dsn is required: the database (or cluster instance) that holds the leases")}
	}
	var s lease.Store
	var err error
	if f.driver == "shardkit" {
		creds, cerr := f.sec.credentials()
		if cerr != nil {
			return nil, &ExitError{Code: 2, Err: cerr}
		}
		s, err = lease.OpenCluster(f.dsn, lease.ClusterOptions{Namespace: f.table, Credentials: creds})
	} else {
		s, err = lease.Open(f.driver, f.dsn, f.table)
	}
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	return s, nil
}

// storeTimeout bounds all the work of one `cache` command on the store.
const storeTimeout = time.Minute

// eachDC opens the store and runs fn for each datacenter in turn (at least
// one is required), all within storeTimeout.
func (f *leaseDBFlags) eachDC(ctx context.Context, dcs []string, fn func(context.Context, lease.Store, string) error) error {
	if len(dcs) == 0 {
		return &ExitError{Code: 2, Err: errors.New("--dc is required (repeat it or give a comma list for several datacenters)")}
	}
	s, err := f.open()
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	for _, dc := range dcs {
		if err := fn(ctx, s, dc); err != nil {
			return err
		}
	}
	return nil
}

func (f *leaseDBFlags) where() string {
	if f.driver == "shardkit" {
		return "cluster namespace"
	}
	return "table"
}

func newCacheInitLeasesCmd() *cobra.Command {
	var (
		db         leaseDBFlags
		dcs        []string
		shards     int
		rangesFile string
	)
	cmd := &cobra.Command{
		Use:   "init-leases --driver D --dsn DSN --dc DC [--dc DC2] (--shards N | --ranges FILE)",
		Short: "Create the shard lease table and the shard rows of each datacenter",
		Long: `Creates the lease table when missing and, for each --dc, one free row per
shard: N equal ranges of the uint64 sharding-key space (--shards N), or the
ranges of a file (--ranges FILE: one "BEGIN END" per line, END may be "max";
they must cover the space without gaps). Running it again with the same ranges
changes nothing; other ranges for an existing datacenter are refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ranges, err := initRanges(shards, rangesFile)
			if err != nil {
				return err
			}
			return db.eachDC(cmd.Context(), dcs, func(ctx context.Context, s lease.Store, dc string) error {
				if err := s.Init(ctx, dc, ranges); err != nil {
					return fmt.Errorf("init-leases of dc %q: %w", dc, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "dc %s: %s in %s %s\n", dc, count(len(ranges), "shard"), db.where(), db.table)
				return nil
			})
		},
	}
	db.register(cmd)
	cmd.Flags().StringSliceVar(&dcs, "dc", nil, "datacenter name (repeatable, or a comma list)")
	cmd.Flags().IntVar(&shards, "shards", 0, "number of equal shards per datacenter")
	cmd.Flags().StringVar(&rangesFile, "ranges", "", "file of explicit shard ranges instead of --shards")
	return cmd
}

func initRanges(shards int, rangesFile string) ([]lease.Range, error) {
	switch {
	case rangesFile != "" && shards != 0:
		return nil, &ExitError{Code: 2, Err: errors.New("give --shards or --ranges, not both")}
	case rangesFile != "":
		data, err := os.ReadFile(rangesFile)
		if err != nil {
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("--ranges: %w", err)}
		}
		rs, err := lease.ParseRanges(data)
		if err != nil {
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("--ranges %s: %w", rangesFile, err)}
		}
		return rs, nil
	case shards > 0:
		rs, err := lease.SplitEqual(shards)
		if err != nil {
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("--shards: %w", err)}
		}
		return rs, nil
	}
	return nil, &ExitError{Code: 2, Err: errors.New("--shards N (N >= 1) or --ranges FILE is required")}
}

func newCacheLeasesCmd() *cobra.Command {
	var (
		db  leaseDBFlags
		dcs []string
	)
	cmd := &cobra.Command{
		Use:   "leases --driver D --dsn DSN --dc DC",
		Short: "Print the shard lease rows of datacenters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var all []lease.Row
			err := db.eachDC(cmd.Context(), dcs, func(ctx context.Context, s lease.Store, dc string) error {
				rows, err := s.Rows(ctx, dc)
				all = append(all, rows...)
				return err
			})
			if err != nil {
				return err
			}
			return printLeaseRows(cmd.OutOrStdout(), all)
		},
	}
	db.register(cmd)
	cmd.Flags().StringSliceVar(&dcs, "dc", nil, "datacenter name (repeatable, or a comma list)")
	return cmd
}

func printLeaseRows(w io.Writer, rows []lease.Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DC\tSHARD\tRANGE\tHOST\tEPOCH\tTTL\tLAST PING (UTC)\tSTATE")
	for _, r := range rows {
		state, host, ping := "held", r.Host, r.LastPing.Format("2006-01-02 15:04:05.000000")
		if r.Host == "" {
			state, host, ping = "free", "-", "-"
		} else if r.Expired {
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%d\t%v\t%s\t%s\n", r.DC, r.Shard, r.Range, host, r.Epoch, r.TTL, ping, state)
	}
	return tw.Flush()
}
