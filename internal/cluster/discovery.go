package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// Discovery (K2): instances exchange the peers they know in rounds until
// every known peer has answered; then the instance owning the smallest
// address among the voting-eligible peers bootstraps the cluster, and every
// other one learns that leader from some answer. An instance that is in a
// running cluster (or has decided) answers with the leader's address, which
// is how a new instance finds a running cluster.
//
// An instance learns its own addresses from requests that carry its own
// random id (it may be reached under several names), and forgets which
// peers it visited whenever it hears of a new peer, so every decision is
// made over the full set.

// discoveryResult is the outcome of discovery.
type discoveryResult struct {
	bootstrap bool   // this instance bootstraps the cluster
	leader    string // otherwise: the address to join through
}

type discovery struct {
	mu      sync.Mutex
	tmpID   string
	canVote bool
	peers   map[string]bool
	votable map[string]bool
	visited map[string]bool
	myAddrs map[string]bool
	result  *discoveryResult
}

func newDiscovery(advertise string, peers []string) *discovery {
	var b [16]byte
	_, _ = rand.Read(b[:])
	d := &discovery{
		tmpID:   hex.EncodeToString(b[:]),
		canVote: true,
		peers:   map[string]bool{advertise: true},
		votable: map[string]bool{advertise: true},
		visited: map[string]bool{},
		myAddrs: map[string]bool{advertise: true},
	}
	for _, p := range peers {
		d.peers[p] = true
	}
	return d
}

// merge adds what a peer knows; it reports whether anything was new.
func (d *discovery) merge(peers, votable []string) bool {
	grew := false
	for _, p := range peers {
		if !d.peers[p] {
			d.peers[p], grew = true, true
		}
	}
	for _, p := range votable {
		if !d.votable[p] {
			d.votable[p], grew = true, true
		}
		if !d.peers[p] {
			d.peers[p], grew = true, true
		}
	}
	if grew {
		clear(d.visited)
	}
	return grew
}

func (d *discovery) state() *clusterv1.DiscoverState {
	return &clusterv1.DiscoverState{
		TmpId:        d.tmpID,
		CanVote:      d.canVote,
		Peers:        slices.Sorted(maps.Keys(d.peers)),
		VotablePeers: slices.Sorted(maps.Keys(d.votable)),
	}
}

// handle answers a peer's discovery request.
func (d *discovery) handle(req *clusterv1.DiscoverRequest) *clusterv1.DiscoverResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.result; r != nil {
		return &clusterv1.DiscoverResponse{Result: &clusterv1.DiscoverResponse_LeaderAddress{LeaderAddress: d.leaderAddressLocked()}}
	}
	if req.GetTmpId() == d.tmpID && req.GetRequestTo() != "" {
		d.myAddrs[req.GetRequestTo()] = true
	}
	d.merge(req.GetPeers(), req.GetVotablePeers())
	return &clusterv1.DiscoverResponse{Result: &clusterv1.DiscoverResponse_State{State: d.state()}}
}

// leaderAddressLocked is the address to announce once decided.
func (d *discovery) leaderAddressLocked() string {
	if d.result.bootstrap {
		return slices.Min(slices.Collect(maps.Keys(d.votableMine())))
	}
	return d.result.leader
}

func (d *discovery) votableMine() map[string]bool {
	out := map[string]bool{}
	for a := range d.votable {
		if d.myAddrs[a] {
			out[a] = true
		}
	}
	if len(out) == 0 {
		maps.Copy(out, d.myAddrs)
	}
	return out
}

// discoverCall sends one discovery request to addr.
type discoverCall func(ctx context.Context, addr string, req *clusterv1.DiscoverRequest) (*clusterv1.DiscoverResponse, error)

// run performs rounds until a result is known or ctx ends.
//
// Each call is bounded by probe; round is the pause between rounds.
func (d *discovery) run(ctx context.Context, call discoverCall, round, probe time.Duration) (discoveryResult, error) {
	for {
		d.mu.Lock()
		var todo []string
		for p := range d.peers {
			if !d.visited[p] {
				todo = append(todo, p)
			}
		}
		slices.Sort(todo)
		d.mu.Unlock()

		for _, addr := range todo {
			d.mu.Lock()
			req := &clusterv1.DiscoverRequest{TmpId: d.tmpID, CanVote: d.canVote, RequestTo: addr}
			st := d.state()
			req.Peers, req.VotablePeers = st.GetPeers(), st.GetVotablePeers()
			d.mu.Unlock()

			cctx, cancel := context.WithTimeout(ctx, probe)
			resp, err := call(cctx, addr, req)
			cancel()
			if err != nil {
				continue
			}
			if leader := resp.GetLeaderAddress(); leader != "" {
				return d.decide(discoveryResult{leader: leader}), nil
			}
			d.mu.Lock()
			if s := resp.GetState(); s != nil {
				d.merge(s.GetPeers(), s.GetVotablePeers())
			}
			d.visited[addr] = true
			d.mu.Unlock()
		}

		d.mu.Lock()
		if d.result != nil { // decided meanwhile (cannot happen today; kept for safety)
			r := *d.result
			d.mu.Unlock()
			return r, nil
		}
		all := true
		for p := range d.peers {
			if !d.visited[p] {
				all = false
				break
			}
		}
		if all {
			smallest := slices.Min(slices.Collect(maps.Keys(d.votable)))
			if d.myAddrs[smallest] {
				d.mu.Unlock()
				return d.decide(discoveryResult{bootstrap: true}), nil
			}
			clear(d.visited) // poll everyone again until the leader answers
		}
		d.mu.Unlock()

		select {
		case <-ctx.Done():
			return discoveryResult{}, ctx.Err()
		case <-time.After(round):
		}
	}
}

func (d *discovery) decide(r discoveryResult) discoveryResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.result = &r
	return r
}
