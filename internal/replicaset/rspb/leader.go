package rspb

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// OnLeader runs call on the leader of replicaset rsID over its
// BucketService: at addrs in order (the leader group 0 recorded first,
// then the members), then at whatever a NOT_LEADER answer names, until
// one serves it, at most 2*len(addrs)+2 tries. An answer other than
// Unavailable (or a redirect) is returned as it is; when no member served
// the call, the error is Unavailable and names those tried. This file is
// written by hand; the rest of the package is generated.
func OnLeader(ctx context.Context, dial func(addr string) (grpc.ClientConnInterface, error), rsID string, addrs []string,
	call func(context.Context, BucketServiceClient) error,
) error {
	queue := slices.Clone(addrs)
	maxTries := 2*len(addrs) + 2
	var tried []string
	var last error
	for len(queue) > 0 && len(tried) < maxTries {
		addr := queue[0]
		queue = queue[1:]
		if addr == "" || slices.Contains(tried, addr) {
			continue
		}
		tried = append(tried, addr)
		conn, err := dial(addr)
		if err != nil {
			last = err
			continue
		}
		err = call(ctx, NewBucketServiceClient(conn))
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		if rd := datav1.RedirectOf(err); rd != nil {
			if l := rd.GetLeaderAddress(); l != "" && !slices.Contains(tried, l) {
				queue = append([]string{l}, queue...)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	if last == nil {
		last = errors.New("no member with an address")
	}
	return status.Errorf(codes.Unavailable, "no leader of replicaset %s answered (tried %v): %v", rsID, tried, last)
}
