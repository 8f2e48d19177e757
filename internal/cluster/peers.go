package cluster

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// peerPool keeps one gRPC connection per address for cluster RPCs.
type peerPool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerPool() *peerPool { return &peerPool{conns: map[string]*grpc.ClientConn{}} }

func (p *peerPool) client(addr string) (clusterv1.ClusterServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[addr]
	if c == nil {
		var err error
		c, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		p.conns[addr] = c
	}
	return clusterv1.NewClusterServiceClient(c), nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		_ = c.Close()
		delete(p.conns, a)
	}
}
