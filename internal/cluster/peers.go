package cluster

import (
	"sync"

	"google.golang.org/grpc"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// peerPool keeps one gRPC connection per address for cluster RPCs between
// instances, made with the dial options the server gives (Config.DialOptions,
// from client.DialOptions).
type peerPool struct {
	dial  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerPool(dial []grpc.DialOption) *peerPool {
	return &peerPool{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

func (p *peerPool) client(addr string) (clusterv1.ClusterServiceClient, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return clusterv1.NewClusterServiceClient(c), nil
}

func (p *peerPool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[addr]
	if c == nil {
		var err error
		c, err = grpc.NewClient(addr, p.dial...)
		if err != nil {
			return nil, err
		}
		p.conns[addr] = c
	}
	return c, nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		_ = c.Close()
		delete(p.conns, a)
	}
}
