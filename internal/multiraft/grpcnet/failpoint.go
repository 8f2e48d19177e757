package grpcnet

import "github.com/shardkit/shardkit/internal/multiraft"

// Failpoints that cut the raft links of this instance (a network
// partition for tests of the real binary; the instance's clients still
// reach it, as they do a leader cut off from its followers). The full name
// is the prefix followed by the peer's raft address, e.g.
// "raftDropTo/127.0.0.1:7001"; a hook that returns an error drops every
// message of that direction and link, one that returns nil lets it pass.
const (
	// FailpointDropTo drops what this instance sends to the peer
	// (messages and snapshots).
	FailpointDropTo = "raftDropTo/"
	// FailpointDropFrom drops what this instance receives from the peer
	// (messages and snapshots).
	FailpointDropFrom = "raftDropFrom/"
)

// cut reports whether the failpoint prefix+address of node drops traffic
// now. In builds without failpoints it is false at once.
func (t *Transport) cut(prefix string, node multiraft.NodeID) bool {
	fp := t.cfg.Failpoints
	if !fp.Enabled() {
		return false
	}
	addr, err := t.cfg.Resolver.RaftAddress(node)
	if err != nil {
		return false
	}
	return fp.Eval(prefix+addr) != nil
}
