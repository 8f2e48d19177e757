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
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
)

// expelMargin is added to --timeout for the RPC deadline, so that the
// server's own "not confirmed in time" answer normally arrives first.
const expelMargin = 10 * time.Second

type expelOptions struct {
	peer    string
	force   bool
	timeout time.Duration
	margin  time.Duration
}

func newExpelCmd() *cobra.Command {
	o := expelOptions{margin: expelMargin}
	cmd := &cobra.Command{
		Use:   "expel [--peer ADDR] [--force] [--timeout 60s] INSTANCE_ID",
		Short: "Expel an instance from the cluster for good",
		Long: `Expel an instance: set its target grade Expelled and wait until its current
grade is Expelled. Without --force only an Offline instance may be expelled;
the last instance never. Expelling an expelled instance succeeds (idempotent).
The expelled process exits, and restarting it fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExpel(cmd.Context(), o, args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.peer, "peer", defaultPeer, "address (host:port) of any cluster instance")
	f.BoolVar(&o.force, "force", false, "expel even an instance that is not Offline")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "how long to wait for the current grade Expelled")
	return cmd
}

func runExpel(ctx context.Context, o expelOptions, instanceID string, out io.Writer) error {
	if err := checkName(instanceID); err != nil {
		return fmt.Errorf("invalid instance id %q: %w", instanceID, err)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("invalid --timeout %v: must be positive", o.timeout)
	}
	client, closeConn, err := dialCluster(o.peer)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, o.timeout+o.margin)
	defer cancel()
	resp, err := client.Expel(ctx, &clusterv1.ExpelRequest{
		InstanceId: instanceID,
		Force:      o.force,
		TimeoutMs:  o.timeout.Milliseconds(),
	})
	if err != nil {
		return expelError(instanceID, o.peer, o.timeout, err)
	}
	in := resp.GetInstance()
	if in == nil {
		_, err = fmt.Fprintf(out, "instance %s expelled\n", instanceID)
		return err
	}
	_, err = fmt.Fprintf(out, "instance %s expelled (raft_id %d, uuid %s, current grade %s)\n",
		in.GetInstanceId(), in.GetRaftId(), in.GetUuid(), meta.FormatGrade(in.GetCurrentGrade()))
	return err
}

func expelError(instanceID, peer string, timeout time.Duration, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("expel of %s: %s", instanceID, oneLine(err.Error()))
	}
	msg := oneLine(st.Message())
	switch st.Code() {
	case codes.DeadlineExceeded:
		if strings.HasPrefix(msg, "expel of ") {
			return errors.New(msg) // the cluster's own account, with the grade reached
		}
		return fmt.Errorf("expel of %s not confirmed within %v: %s", instanceID, timeout, msg)
	case codes.Unavailable:
		return fmt.Errorf("expel of %s: peer %s unavailable: %s", instanceID, peer, msg)
	}
	return fmt.Errorf("expel of %s: %s", instanceID, msg)
}
