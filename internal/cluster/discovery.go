package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/retry"
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

	// Peers whose last call failed: since when, and why. run warns about
	// them every warnEvery; waitingFor lists them.
	silent    map[string]*silence
	clock     Clock
	log       *slog.Logger
	warnEvery time.Duration
	warned    time.Time
}

// silence is a peer that has not answered since a time.
type silence struct {
	since time.Time
	why   string
}

// SilentPeer is a discovery peer that does not answer.
type SilentPeer struct {
	Address string
	For     time.Duration // since its first unanswered call in a row
	Why     string        // the last call's failure, shortly
}

func (p SilentPeer) String() string {
	return fmt.Sprintf("%s for %v (%s)", p.Address, p.For.Round(time.Second), p.Why)
}

// discoveryWarnEvery is how often discovery warns about silent peers.
const discoveryWarnEvery = 10 * time.Second

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
		silent:  map[string]*silence{},
		clock:   realClock{},
		log:     slog.New(slog.DiscardHandler),

		warnEvery: discoveryWarnEvery,
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
			d.heard(addr, err)
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

		d.maybeWarn()

		if err := retry.Sleep(ctx, round); err != nil {
			return discoveryResult{}, err
		}
	}
}

// heard records the outcome of a call to a peer.
func (d *discovery) heard(addr string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.silent, addr)
		return
	}
	s := d.silent[addr]
	if s == nil {
		s = &silence{since: d.clock.Now()}
		d.silent[addr] = s
	}
	s.why = callFailure(err)
}

// waitingFor lists the peers that do not answer, by address.
func (d *discovery) waitingFor() []SilentPeer {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	out := make([]SilentPeer, 0, len(d.silent))
	for addr, s := range d.silent {
		out = append(out, SilentPeer{Address: addr, For: now.Sub(s.since), Why: s.why})
	}
	slices.SortFunc(out, func(a, b SilentPeer) int { return strings.Compare(a.Address, b.Address) })
	return out
}

// maybeWarn logs, at most every warnEvery, the peers that have not
// answered for warnEvery or longer.
func (d *discovery) maybeWarn() {
	now := d.clock.Now()
	d.mu.Lock()
	due := now.Sub(d.warned) >= d.warnEvery
	d.mu.Unlock()
	if !due {
		return
	}
	var long []SilentPeer
	for _, p := range d.waitingFor() {
		if p.For >= d.warnEvery {
			long = append(long, p)
		}
	}
	if len(long) == 0 {
		return
	}
	d.mu.Lock()
	d.warned = now
	d.mu.Unlock()
	d.log.Warn("discovery: still waiting for peers that do not answer; every --peer must answer before the cluster forms",
		"silent", formatSilent(long))
}

func formatSilent(ps []SilentPeer) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ", ")
}

// callFailure says shortly why a call failed: "connection refused", "no
// answer within the probe timeout", ...
func callFailure(err error) string {
	st := status.Convert(err)
	if st.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	msg := strings.TrimSuffix(st.Message(), `"`)
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

func (d *discovery) decide(r discoveryResult) discoveryResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.result = &r
	return r
}
