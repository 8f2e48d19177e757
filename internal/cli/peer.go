package cli

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// defaultPeer is the address status and expel ask when --peer is not given
// (the default --listen of `shardkit run`).
const defaultPeer = "127.0.0.1:3301"

// dialCluster opens a ClusterService client to addr (host:port). The
// connection is made lazily by the first call; the caller closes it.
func dialCluster(addr string) (clusterv1.ClusterServiceClient, func(), error) {
	if err := checkHostPort(addr, false); err != nil {
		return nil, nil, fmt.Errorf("--peer %q: %w", addr, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("--peer %q: %w", addr, err)
	}
	return clusterv1.NewClusterServiceClient(conn), func() { _ = conn.Close() }, nil
}

// callError turns a failed call to addr into one line: unreachable peers
// and deadlines are named as such, other gRPC errors by their message.
func callError(addr string, timeout time.Duration, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("peer %s: %s", addr, oneLine(err.Error()))
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("peer %s unavailable: %s", addr, oneLine(st.Message()))
	case codes.DeadlineExceeded:
		return fmt.Errorf("peer %s did not answer within %v: %s", addr, timeout, oneLine(st.Message()))
	}
	return fmt.Errorf("peer %s: %s", addr, oneLine(st.Message()))
}
