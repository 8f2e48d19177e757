package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/shardkit/shardkit/client"
)

type expelOptions struct {
	clusterFlags
	force       bool
	loseBuckets bool
}

func newExpelCmd() *cobra.Command {
	var o expelOptions
	cmd := &cobra.Command{
		Use:   "expel [--peer ADDR] [--force] [--lose-buckets] [--timeout 60s] INSTANCE_ID",
		Short: "Expel an instance from the cluster for good",
		Long: `Expel an instance: set its target grade Expelled and wait until its current
grade is Expelled. Without --force only an Offline instance may be expelled;
the last instance never. The last instance of a replicaset that holds buckets
only with --lose-buckets: the data of those buckets is lost. Expelling an
expelled instance succeeds (idempotent). The expelled process exits, and
restarting it fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExpel(cmd.Context(), o, args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.register(f, 60*time.Second, "how long to wait for the current grade Expelled")
	f.BoolVar(&o.force, "force", false, "expel even an instance that is not Offline")
	f.BoolVar(&o.loseBuckets, "lose-buckets", false, "expel even the last instance of a replicaset that holds buckets, giving up their data")
	return cmd
}

func runExpel(ctx context.Context, o expelOptions, instanceID string, out io.Writer) error {
	if err := checkName(instanceID); err != nil {
		return fmt.Errorf("invalid instance id %q: %w", instanceID, err)
	}
	cl, err := o.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.ExpelResult(ctx, instanceID, client.ExpelOptions{Force: o.force, Wait: o.timeout, LoseBuckets: o.loseBuckets})
	if err != nil {
		return expelError(instanceID, o.timeout, err)
	}
	in := resp.GetInstance()
	if in == nil {
		_, err = fmt.Fprintf(out, "instance %s expelled\n", instanceID)
	} else {
		_, err = fmt.Fprintf(out, "instance %s expelled (raft_id %d, uuid %s, current grade %s)\n",
			in.GetInstanceId(), in.GetRaftId(), in.GetUuid(), client.FormatGrade(in.GetCurrentGrade()))
	}
	if err == nil && resp.GetLostBuckets() > 0 {
		n := resp.GetLostBuckets()
		_, err = fmt.Fprintf(out, "lost: the data of the %s of replicaset %s (--lose-buckets); %s %s assigned to %s, which is expelled\n",
			nBuckets(n), resp.GetLostReplicasetId(), agree(n, "it", "they"), agree(n, "stays", "stay"), resp.GetLostReplicasetId())
	}
	return err
}

func expelError(instanceID string, timeout time.Duration, err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("expel of %s: %s", instanceID, oneLine(err.Error()))
	}
	msg := oneLine(ce.Msg)
	switch ce.Code {
	case codes.DeadlineExceeded:
		if strings.HasPrefix(msg, "expel of ") {
			return errors.New(msg) // the cluster's own account, with the grade reached
		}
		return fmt.Errorf("expel of %s not confirmed within %v: %s", instanceID, timeout, msg)
	case codes.Unavailable:
		return fmt.Errorf("expel of %s: peer %s unavailable: %s", instanceID, ce.Peer, msg)
	}
	return fmt.Errorf("expel of %s: %s", instanceID, msg)
}
