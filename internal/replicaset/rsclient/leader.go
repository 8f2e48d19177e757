package rsclient

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/retry"
)

// OnLeader runs call on the leader of replicaset rsID over its
// BucketService: at addrs in order (the leader group 0 recorded first,
// then the members), then at whatever a NOT_LEADER answer names first,
// until one serves it, each address at most once and at most
// 2*len(addrs)+2 tries, at once one after the other (a member that is
// down or not the leader says so at once; the caller's context bounds
// the rest). An answer other than Unavailable (or a redirect) is returned
// as it is; when no member served the call, the error is Unavailable and
// names those tried.
func OnLeader(ctx context.Context, dial func(addr string) (grpc.ClientConnInterface, error), rsID string, addrs []string,
	call func(context.Context, rspb.BucketServiceClient) error,
) error {
	queue := slices.Clone(addrs)
	var tried []string
	var last error   // the last failure
	var answer error // an answer returned as it is
	served := false
	policy := retry.Policy{Attempts: 2*len(addrs) + 2}
	_, _ = policy.Run(ctx, func(int) (retry.Verdict, error) {
		addr := ""
		for addr == "" && len(queue) > 0 {
			if a := queue[0]; a != "" && !slices.Contains(tried, a) {
				addr = a
			}
			queue = queue[1:]
		}
		if addr == "" {
			return retry.Stop, nil
		}
		tried = append(tried, addr)
		conn, err := dial(addr)
		if err != nil {
			last = err
			return retry.Again, err
		}
		err = call(ctx, rspb.NewBucketServiceClient(conn))
		if err == nil {
			served = true
			return retry.Stop, nil
		}
		last = err
		if ctx.Err() != nil {
			return retry.Stop, err
		}
		if rd := datav1.RedirectOf(err); rd != nil {
			if l := rd.GetLeaderAddress(); l != "" && !slices.Contains(tried, l) {
				queue = append([]string{l}, queue...)
			}
			return retry.Follow, err
		}
		if status.Code(err) != codes.Unavailable {
			answer = err
			return retry.Stop, err
		}
		return retry.Again, err
	})
	switch {
	case served:
		return nil
	case answer != nil:
		return answer
	case last == nil:
		last = errors.New("no member with an address")
	}
	return status.Errorf(codes.Unavailable, "no leader of replicaset %s answered (tried %v): %v", rsID, tried, last)
}
