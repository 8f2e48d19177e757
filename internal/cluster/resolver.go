package cluster

import (
	"fmt"
	"sync"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// resolver finds a node's address for the raft transport: in group 0's
// instance records, or in the peer list the join answer gave, whichever
// was written at the higher group-0 index (K8), so an older log entry can
// never overwrite a newer address.
type resolver struct {
	meta *meta.SM

	mu          sync.RWMutex
	boot        map[uint64]string
	bootIndex   uint64
	selfID      uint64
	selfAddress string
}

func newResolver(sm *meta.SM) *resolver { return &resolver{meta: sm, boot: map[uint64]string{}} }

func (r *resolver) setBoot(peers map[uint64]string, index uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range peers {
		r.boot[k] = v
	}
	r.bootIndex = index
}

func (r *resolver) setSelf(id uint64, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.selfID, r.selfAddress = id, addr
}

// RaftAddress implements grpcnet.AddressResolver.
func (r *resolver) RaftAddress(node multiraft.NodeID) (string, error) {
	id := uint64(node)
	r.mu.RLock()
	bootAddr, bootOK := r.boot[id]
	bootIndex := r.bootIndex
	self := r.selfID == id
	selfAddr := r.selfAddress
	r.mu.RUnlock()
	if self {
		return selfAddr, nil
	}
	inst := r.meta.State().InstanceByRaftID(id)
	switch {
	case inst != nil && (!bootOK || inst.GetCommitIndex() >= bootIndex):
		return inst.GetAddress(), nil
	case bootOK:
		return bootAddr, nil
	case inst != nil:
		return inst.GetAddress(), nil
	}
	return "", fmt.Errorf("cluster: no address known for raft_id %d", id)
}
