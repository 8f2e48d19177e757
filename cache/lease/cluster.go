package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/client"
)

// DefaultClusterNamespace prefixes the cluster lease names of a ClusterStore
// unless ClusterOptions.Namespace says otherwise.
const DefaultClusterNamespace = "shardkit_cache_leases"

// ClusterOptions tune a ClusterStore.
type ClusterOptions struct {
	// Namespace prefixes every lease name (letters, digits, '_', '-', '.');
	// DefaultClusterNamespace when empty. It plays the part of the SQL
	// table name: services sharing a cluster use different namespaces.
	Namespace string
	// Credentials secure the connections to a cluster run with
	// --certs-dir (client.LoadCredentials); nil: plaintext. The user
	// needs the writer role. Only OpenCluster uses them.
	Credentials credentials.TransportCredentials
}

// ClusterStore keeps shard leases in a shardkit cluster, on the leases
// with fencing tickets of its group 0 (client.Leases). Any instance of the
// cluster may be asked: it forwards the calls to the group-0 leader, whose
// clock alone judges expiry.
//
// The cluster offers leases, not tables, so the store maps the SQL rows
// onto lease names:
//
//   - shard n of dc is the lease "<namespace>/<dc>/shard/<n>"; its ticket is
//     the epoch, its holder "<host>#ttl=<ms>" (so Rows can tell the TTL);
//   - the ranges of dc are recorded by Init as the holder of the lease
//     "<namespace>/<dc>/layout" ("BEGIN-END,..."), taken for an hour with
//     the cluster keeping its record after expiry; Init with other ranges is
//     refused while that record says otherwise.
//
// A claim of a shard the host already holds releases it and acquires it
// again, so that it gets a new ticket like a SQL claim gets a new epoch.
type ClusterStore struct {
	leases client.Leases
	ns     string
	owned  *client.Client // closed by Close when OpenCluster made it
}

var clusterNamespaceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// NewClusterStore returns a store on the cluster of c; the caller keeps
// owning c.
func NewClusterStore(c *client.Client, opts ClusterOptions) (*ClusterStore, error) {
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultClusterNamespace
	}
	if !clusterNamespaceRE.MatchString(ns) {
		return nil, fmt.Errorf("%w: cluster namespace %q: use 1..128 letters, digits, '_', '-' or '.'", ErrInvalid, ns)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: no cluster client", ErrInvalid)
	}
	return &ClusterStore{leases: c.Leases(), ns: ns}, nil
}

// OpenCluster makes a client of the cluster whose instances are addrs
// (host:port[,host:port...]; any instance forwards lease calls to the
// group-0 leader) and returns a store that closes it on Close.
func OpenCluster(addrs string, opts ClusterOptions) (*ClusterStore, error) {
	if addrs == "" {
		return nil, fmt.Errorf("%w: empty cluster address; give an instance's host:port", ErrInvalid)
	}
	peers, err := client.ParsePeers(addrs)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster address: %w", ErrInvalid, err)
	}
	c, err := client.New(context.Background(), client.Config{Peers: peers, Credentials: opts.Credentials})
	if err != nil {
		return nil, fmt.Errorf("%w: cluster address: %w", ErrInvalid, err)
	}
	s, err := NewClusterStore(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.owned = c
	return s, nil
}

// Close implements Store: it closes the client if OpenCluster made it; a
// client given to NewClusterStore stays the caller's.
func (s *ClusterStore) Close() error {
	if s.owned != nil {
		return s.owned.Close()
	}
	return nil
}

// layoutTTL is how long Init holds the layout lease: the longest the
// cluster grants. After it the record (and so the layout) stays.
const layoutTTL = time.Hour

func (s *ClusterStore) layoutName(dc string) string { return s.ns + "/" + dc + "/layout" }

func (s *ClusterStore) shardName(dc string, shard int) string {
	return s.ns + "/" + dc + "/shard/" + strconv.Itoa(shard)
}

func formatLayout(ranges []Range) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = strconv.FormatUint(r.Begin, 10) + "-" + formatEnd(r.End)
	}
	return strings.Join(parts, ",")
}

func parseLayout(s string) ([]Range, error) {
	var out []Range
	for part := range strings.SplitSeq(s, ",") {
		b, e, ok := strings.Cut(part, "-")
		if !ok {
			return nil, fmt.Errorf("%w: cluster layout entry %q", ErrInvalid, part)
		}
		begin, err := parseBegin(b)
		if err != nil {
			return nil, err
		}
		end, err := parseEnd(e)
		if err != nil {
			return nil, err
		}
		out = append(out, Range{Begin: begin, End: end})
	}
	if err := CheckPartition(out); err != nil {
		return nil, fmt.Errorf("cluster layout: %w", err)
	}
	return out, nil
}

// get returns the lease record of name and whether it is held now; a name
// never acquired is (nil, false).
func (s *ClusterStore) get(ctx context.Context, name string) (*client.Lease, bool, error) {
	l, held, err := s.leases.Get(ctx, name)
	if errors.Is(err, client.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lease: cluster get lease %q: %w", name, err)
	}
	return &l, held, nil
}

// layout returns the ranges of dc (nil when Init has not run for it).
func (s *ClusterStore) layout(ctx context.Context, dc string) ([]Range, error) {
	l, _, err := s.get(ctx, s.layoutName(dc))
	if err != nil || l == nil || l.Holder == "" {
		return nil, err
	}
	return parseLayout(l.Holder)
}

// Init implements Store.
func (s *ClusterStore) Init(ctx context.Context, dc string, ranges []Range) error {
	if err := validateDC(dc); err != nil {
		return err
	}
	if err := CheckPartition(ranges); err != nil {
		return err
	}
	want := formatLayout(ranges)
	have, err := s.layout(ctx, dc)
	if err != nil {
		return err
	}
	if have == nil {
		cur, granted, err := s.leases.Acquire(ctx, s.layoutName(dc), want, layoutTTL)
		if err != nil {
			return fmt.Errorf("lease: record the shards of dc %q in the cluster: %w", dc, err)
		}
		if granted {
			return nil
		}
		if have, err = parseLayout(cur.Holder); err != nil {
			return err
		}
	}
	if formatLayout(have) == want {
		return nil
	}
	return fmt.Errorf("%w: dc %q has %d shards (%v ...) in the cluster, asked for %d; use another namespace to change them",
		ErrAlreadyInitialized, dc, len(have), have[0], len(ranges))
}

func clusterHolder(host string, ttl time.Duration) string {
	return host + "#ttl=" + strconv.FormatInt(ttl.Milliseconds(), 10)
}

// parseHolder splits a shard lease holder into host and TTL.
func parseHolder(h string) (string, time.Duration) {
	host, ttl, ok := strings.Cut(h, "#ttl=")
	if !ok {
		return h, 0
	}
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if err != nil {
		return host, 0
	}
	return host, time.Duration(ms) * time.Millisecond
}

// shardState is one shard's lease as read for a claim.
type shardState struct {
	shard int
	rec   *client.Lease // nil: never acquired
	held  bool
}

func (s *ClusterStore) shards(ctx context.Context, dc string) ([]Range, []shardState, error) {
	ranges, err := s.layout(ctx, dc)
	if err != nil {
		return nil, nil, err
	}
	if ranges == nil {
		return nil, nil, fmt.Errorf("%w: dc %q in cluster namespace %q; run Init (shardkit cache init-leases) first", ErrNotInitialized, dc, s.ns)
	}
	states := make([]shardState, len(ranges))
	for i := range ranges {
		rec, held, err := s.get(ctx, s.shardName(dc, i))
		if err != nil {
			return nil, nil, err
		}
		states[i] = shardState{shard: i, rec: rec, held: held}
	}
	return ranges, states, nil
}

// Claim implements Store.
func (s *ClusterStore) Claim(ctx context.Context, req ClaimRequest) (Lease, error) {
	if err := validateClaim(req); err != nil {
		return Lease{}, err
	}
	if req.TTL.Milliseconds() > layoutTTL.Milliseconds() {
		return Lease{}, fmt.Errorf("%w: lease TTL %v is above the cluster's limit of %v", ErrInvalid, req.TTL, layoutTTL)
	}
	ranges, states, err := s.shards(ctx, req.DC)
	if err != nil {
		return Lease{}, err
	}
	mine := func(st shardState) bool {
		if st.rec == nil {
			return false
		}
		host, _ := parseHolder(st.rec.Holder)
		return st.rec != nil && host == req.Host
	}
	// The seed's order: the shard held before by this host, then free or
	// expired shards, the longest expired first, then by number.
	var cands []shardState
	for _, st := range states {
		if mine(st) || !st.held {
			cands = append(cands, st)
		}
	}
	slices.SortStableFunc(cands, func(a, b shardState) int {
		if ma, mb := mine(a), mine(b); ma != mb {
			if ma {
				return -1
			}
			return 1
		}
		return cmp.Compare(expiresMs(a.rec), expiresMs(b.rec))
	})
	holder := clusterHolder(req.Host, req.TTL)
	for _, st := range cands {
		name := s.shardName(req.DC, st.shard)
		if st.held && st.rec.Holder != "" {
			// Mine and live: give it up so that the claim gets a new ticket.
			if _, err := s.leases.Release(ctx, name, st.rec.Holder, st.rec.Ticket); err != nil {
				return Lease{}, fmt.Errorf("lease: cluster release lease %q: %w", name, err)
			}
		}
		got, granted, err := s.leases.Acquire(ctx, name, holder, req.TTL)
		if err != nil {
			return Lease{}, fmt.Errorf("lease: cluster acquire lease %q: %w", name, err)
		}
		if granted {
			return Lease{DC: req.DC, Shard: st.shard, Range: ranges[st.shard], Host: req.Host,
				Epoch: got.Ticket, TTL: req.TTL}, nil
		}
	}
	return Lease{}, fmt.Errorf("%w: all %d shards of dc %q are held by live cluster leases; wait for one to expire or add shards",
		ErrNoFreeShard, len(states), req.DC)
}

// Ping implements Store.
func (s *ClusterStore) Ping(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	name := s.shardName(l.DC, l.Shard)
	cur, renewed, err := s.leases.Renew(ctx, name, clusterHolder(l.Host, l.TTL), l.Epoch, l.TTL)
	if err != nil {
		return fmt.Errorf("lease: ping %v: cluster renew lease: %w", l, err)
	}
	if renewed {
		return nil
	}
	return clusterLost(l, &cur)
}

// Release implements Store.
func (s *ClusterStore) Release(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	name := s.shardName(l.DC, l.Shard)
	released, err := s.leases.Release(ctx, name, clusterHolder(l.Host, l.TTL), l.Epoch)
	if err != nil {
		return fmt.Errorf("lease: release %v: cluster release lease: %w", l, err)
	}
	if released {
		return nil
	}
	rec, _, err := s.get(ctx, name)
	if err != nil {
		return fmt.Errorf("%w: %v (and reading it failed: %w)", ErrLost, l, err)
	}
	return clusterLost(l, rec)
}

func clusterLost(l Lease, rec *client.Lease) error {
	if rec == nil || rec.Ticket == 0 {
		return fmt.Errorf("%w: %v: the cluster has no such lease", ErrLost, l)
	}
	if host, _ := parseHolder(rec.Holder); rec.Ticket != l.Epoch || host != l.Host {
		return fmt.Errorf("%w: %v: the shard is now held by %q at epoch %d", ErrLost, l, host, rec.Ticket)
	}
	return fmt.Errorf("%w: %v: expired in the cluster (at %v, leader time)", ErrLost, l, rec.Expires.Format(time.RFC3339Nano))
}

// expiresMs is a lease's expiry in Unix ms, 0 for one never acquired.
func expiresMs(l *client.Lease) int64 {
	if l == nil {
		return 0
	}
	return l.Expires.UnixMilli()
}

// Rows implements Store. LastPing is derived from the leader-stamped
// expiry and the holder's TTL; Expired is the leader's judgement.
func (s *ClusterStore) Rows(ctx context.Context, dc string) ([]Row, error) {
	if err := validateDC(dc); err != nil {
		return nil, err
	}
	ranges, states, err := s.shards(ctx, dc)
	if err != nil {
		return nil, err
	}
	out := make([]Row, len(states))
	for i, st := range states {
		r := Row{DC: dc, Shard: i, Range: ranges[i], Expired: !st.held}
		if st.rec != nil {
			r.Epoch = st.rec.Ticket
		}
		if st.rec != nil && st.rec.Holder != "" {
			r.Host, r.TTL = parseHolder(st.rec.Holder)
			r.LockedTime = st.rec.Granted
			r.LastPing = st.rec.Expires.Add(-r.TTL)
		}
		out[i] = r
	}
	return out, nil
}
