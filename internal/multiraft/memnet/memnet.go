package memnet

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// ErrUnreachable is returned for a snapshot that cannot reach its target.
var ErrUnreachable = errors.New("memnet: node unreachable")

type envelope struct {
	from, to multiraft.NodeID
	group    multiraft.GroupID
	data     []byte // marshalled raftpb.Message
	due      uint64
	seq      uint64
}

type link struct{ from, to multiraft.NodeID }

type groupLink struct {
	group multiraft.GroupID
	node  multiraft.NodeID
}

// Stats counts what the network did.
type Stats struct {
	Sent, Delivered, Dropped, Snapshots, SnapshotsFailed int
}

// Network is the in-memory network.
type Network struct {
	mu       sync.Mutex
	rng      *rand.Rand
	nodes    map[multiraft.NodeID]multiraft.Handler
	pending  []envelope
	now      uint64
	seq      uint64
	dropRate float64
	minDelay uint64
	maxDelay uint64
	cut      map[link]bool
	groupCut map[groupLink]bool
	stats    Stats
}

// New returns an empty network whose faults are drawn from seed.
func New(seed uint64) *Network {
	return &Network{
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:    make(map[multiraft.NodeID]multiraft.Handler),
		cut:      make(map[link]bool),
		groupCut: make(map[groupLink]bool),
	}
}

// Register attaches a node; messages to it are delivered to h.
func (n *Network) Register(id multiraft.NodeID, h multiraft.Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[id] = h
}

// Unregister detaches a node (a crash): messages to it are dropped.
func (n *Network) Unregister(id multiraft.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nodes, id)
}

// SetDropRate drops each message with probability p.
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate = p
}

// SetDelay delays each message by a random number of Deliver steps in
// [minSteps, maxSteps]; unequal delays reorder messages.
func (n *Network) SetDelay(minSteps, maxSteps uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.minDelay, n.maxDelay = minSteps, max(minSteps, maxSteps)
}

// Cut drops every message from one node to another (one direction).
func (n *Network) Cut(from, to multiraft.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[link{from, to}] = true
}

// Isolate cuts every link to and from node.
func (n *Network) Isolate(node multiraft.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for other := range n.nodes {
		if other != node {
			n.cut[link{node, other}] = true
			n.cut[link{other, node}] = true
		}
	}
}

// Partition cuts every link between nodes of different sides. Nodes in no
// side keep their links.
func (n *Network) Partition(sides ...[]multiraft.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					n.cut[link{x, y}] = true
				}
			}
		}
	}
}

// IsolateInGroup drops every message of group to and from node, leaving
// the node's other groups alone.
func (n *Network) IsolateInGroup(group multiraft.GroupID, node multiraft.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.groupCut[groupLink{group, node}] = true
}

// Heal removes every cut, partition and group isolation (not drop rate or delay).
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.groupCut)
}

// Stats returns the counters so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// blocked reports whether a message of group from -> to cannot pass now.
// Called with mu held.
func (n *Network) blocked(from, to multiraft.NodeID, group multiraft.GroupID) bool {
	return n.cut[link{from, to}] || n.groupCut[groupLink{group, from}] || n.groupCut[groupLink{group, to}]
}

// Deliver advances the network by one step and delivers every message that
// is due and may pass, in (due step, send order). It returns how many it
// delivered.
func (n *Network) Deliver() int {
	n.mu.Lock()
	n.now++
	var due, keep []envelope
	for _, e := range n.pending {
		if e.due <= n.now {
			due = append(due, e)
		} else {
			keep = append(keep, e)
		}
	}
	n.pending = keep
	slices.SortFunc(due, func(a, b envelope) int {
		return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.seq, b.seq))
	})
	type delivery struct {
		h     multiraft.Handler
		group multiraft.GroupID
		msg   *raftpb.Message
	}
	var out []delivery
	for _, e := range due {
		h := n.nodes[e.to]
		if h == nil || n.blocked(e.from, e.to, e.group) {
			n.stats.Dropped++
			continue
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(e.data, m); err != nil {
			panic(fmt.Sprintf("memnet: unmarshal: %v", err))
		}
		out = append(out, delivery{h, e.group, m})
	}
	n.stats.Delivered += len(out)
	n.mu.Unlock()
	for _, d := range out {
		d.h.HandleRaftMessage(d.group, d.msg)
	}
	return len(out)
}

// Pending returns the number of messages in flight.
func (n *Network) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending)
}

// Endpoint returns node's transport.
func (n *Network) Endpoint(node multiraft.NodeID) multiraft.Transport {
	return &endpoint{net: n, node: node}
}

type endpoint struct {
	net  *Network
	node multiraft.NodeID
}

func (e *endpoint) Send(msgs []multiraft.OutboundMessage) {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range msgs {
		n.stats.Sent++
		to := multiraft.NodeID(m.Msg.GetTo())
		if n.dropRate > 0 && n.rng.Float64() < n.dropRate {
			n.stats.Dropped++
			continue
		}
		data, err := proto.Marshal(m.Msg)
		if err != nil {
			panic(fmt.Sprintf("memnet: marshal: %v", err))
		}
		delay := n.minDelay
		if n.maxDelay > n.minDelay {
			delay += n.rng.Uint64N(n.maxDelay - n.minDelay + 1)
		}
		n.seq++
		n.pending = append(n.pending, envelope{from: e.node, to: to, group: m.Group, data: data, due: n.now + 1 + delay, seq: n.seq})
	}
}

func (e *endpoint) SendSnapshot(ctx context.Context, to multiraft.NodeID, group multiraft.GroupID, msg *raftpb.Message, write func(io.Writer) error) error {
	n := e.net
	n.mu.Lock()
	h := n.nodes[to]
	blocked := h == nil || n.blocked(e.node, to, group) || (n.dropRate > 0 && n.rng.Float64() < n.dropRate)
	n.stats.Snapshots++
	if blocked {
		n.stats.SnapshotsFailed++
	}
	n.mu.Unlock()
	if blocked {
		return fmt.Errorf("%w: snapshot of group %d to node %d", ErrUnreachable, group, to)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	data, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(data, m); err != nil {
		return err
	}
	return h.HandleRaftSnapshot(ctx, group, m, &buf)
}
