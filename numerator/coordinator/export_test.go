package coordinator

import "google.golang.org/grpc"

// NewShardkitOnConns is NewShardkit on connections the test dialled (with
// its interceptors), addrs naming them; the coordinator closes them.
func NewShardkitOnConns(name string, addrs []string, conns []*grpc.ClientConn) *ShardkitCoordinator {
	return &ShardkitCoordinator{conns: conns, addrs: addrs, name: name, holders: map[uint64]string{}}
}
