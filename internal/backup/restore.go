package backup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"google.golang.org/protobuf/encoding/protojson"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rsclient"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// CreateSpace creates a space of the definition (data.v1 CreateSpace)
	// and returns it as created, with the id the new cluster gave it.
	CreateSpace func(ctx context.Context, sp *datav1.Space) (*datav1.Space, error)
	// CreateUser creates a user with a role.
	CreateUser func(ctx context.Context, u User) error
	// Progress, if set, is called after each call that logged chunks.
	Progress func(Progress)
}

// Restore loads the backup in dir into a running cluster that has no
// spaces (so no rows) and the backup's bucket count; anything else is
// refused, saying what it found. The backup is verified first, with its
// chain if it is incremental (a damaged or incomplete one is refused,
// naming what is wrong); an incremental's buckets are composed from its
// chain (EachComposed), and the spaces and users are the last backup's.
// It creates the
// backup's spaces (the new cluster gives them ids; the rows follow their
// space by name) and its users that the cluster does not have, then logs each bucket's chunks into the replicaset the
// new cluster's routing places it on (RestoreBuckets): the rows, the
// request ids remembered, the change history, and the revision, which
// the bucket's next writes continue.
func Restore(ctx context.Context, cl Cluster, dir string, o RestoreOptions) (*Manifest, error) {
	rep, err := Verify(dir)
	if err != nil {
		return nil, err
	}
	if len(rep.Problems) > 0 {
		return nil, fmt.Errorf("backup: %s does not verify, nothing restored: %s", dir, strings.Join(rep.Problems, "; "))
	}
	m := rep.Manifest
	chain, err := Chain(dir, m)
	if err != nil {
		return nil, err
	}
	rt, err := cl.Routing(ctx)
	if err != nil {
		return nil, fmt.Errorf("backup: reading the routing table: %w", err)
	}
	if rt.GetBucketCount() != m.BucketCount {
		return nil, fmt.Errorf("backup: the cluster has %d buckets, the backup %d: a restore keeps every row in its bucket, so the counts must match", rt.GetBucketCount(), m.BucketCount)
	}
	if len(rt.GetSpaces()) > 0 {
		var names []string
		for _, sp := range rt.GetSpaces() {
			names = append(names, sp.GetName())
		}
		return nil, fmt.Errorf("backup: the cluster has spaces (%s): a backup is restored only into a cluster with none", strings.Join(names, ", "))
	}
	// The spaces, in the order of their old ids; ids maps old to new.
	var spaces []*datav1.Space
	for i, raw := range m.Spaces {
		sp := &datav1.Space{}
		if err := protojson.Unmarshal(raw, sp); err != nil {
			return nil, fmt.Errorf("backup: the manifest's space %d: %w", i, err)
		}
		spaces = append(spaces, sp)
	}
	slices.SortFunc(spaces, func(a, b *datav1.Space) int { return cmp.Compare(a.GetId(), b.GetId()) })
	// A name twice: the space was dropped and created again during the
	// backup; the later one (the higher id) is the space, the other's rows
	// are restored nowhere (ids maps their space to none).
	latest := map[string]uint32{}
	for _, sp := range spaces {
		latest[sp.GetName()] = sp.GetId()
	}
	ids := map[uint32]uint32{}
	for _, sp := range spaces {
		if latest[sp.GetName()] != sp.GetId() {
			continue
		}
		def := &datav1.Space{Name: sp.GetName(), Format: sp.GetFormat(), PrimaryKey: sp.GetPrimaryKey(), ShardingKey: sp.GetShardingKey()}
		got, err := o.CreateSpace(ctx, def)
		if err != nil {
			return nil, fmt.Errorf("backup: creating space %s: %w", sp.GetName(), err)
		}
		ids[sp.GetId()] = got.GetId()
	}
	have, err := cl.Users(ctx)
	if err != nil {
		return nil, fmt.Errorf("backup: listing the users: %w", err)
	}
	for _, u := range m.Users {
		if slices.ContainsFunc(have, func(h User) bool { return h.Name == u.Name }) {
			continue // root, or a user made for the restore
		}
		if err := o.CreateUser(ctx, u); err != nil {
			return nil, fmt.Errorf("backup: creating user %s: %w", u.Name, err)
		}
	}
	if rt, err = cl.Routing(ctx); err != nil {
		return nil, fmt.Errorf("backup: reading the routing table: %w", err)
	}
	holder := map[uint32]*datav1.ReplicasetRoute{}
	routes := map[string]*datav1.ReplicasetRoute{}
	for _, r := range rt.GetReplicasets() {
		routes[r.GetReplicasetId()] = r
	}
	for _, br := range rt.GetBuckets() {
		for b := br.GetFirst(); b <= br.GetLast() && b != 0; b++ {
			holder[b] = routes[br.GetReplicasetId()]
		}
	}
	r := newRestorer(ctx, cl, m.BucketCount, o.Progress)
	err = EachComposed(chain, func(c *rspb.CopyChunk) error {
		h := holder[c.GetBucket()]
		if h == nil {
			return fmt.Errorf("backup: the cluster's routing places bucket %d on no replicaset", c.GetBucket())
		}
		c.Restore = true
		c.Generation = 0
		if err := renameSpaces(c, ids); err != nil {
			return err
		}
		return r.add(h, c)
	})
	for _, h := range rt.GetReplicasets() {
		if err != nil {
			break
		}
		err = r.flush(h)
	}
	// A call's failure is the cause of anything that failed after it.
	if werr := r.wait(); werr != nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// restorer batches chunks per replicaset into RestoreBuckets calls of
// about replicaset.MaxChunkBytes, and logs each replicaset's calls in
// order (a bucket's chunks go to one replicaset, so in order too) while
// the replicasets' calls, and the reading of the next chunks, go on
// beside them: a restore's time is its slowest replicaset's log, not
// their sum.
type restorer struct {
	cl       Cluster
	g        *errgroup.Group
	ctx      context.Context // g's: done when a call failed
	pending  map[string][]*rspb.CopyChunk
	size     map[string]int
	queues   map[string]chan []*rspb.CopyChunk
	mu       sync.Mutex // guards prog, and calls progress one at a time
	prog     Progress
	progress func(Progress)
}

func newRestorer(ctx context.Context, cl Cluster, bucketCount uint32, progress func(Progress)) *restorer {
	g, gctx := errgroup.WithContext(ctx)
	return &restorer{
		cl: cl, g: g, ctx: gctx,
		pending: map[string][]*rspb.CopyChunk{}, size: map[string]int{}, queues: map[string]chan []*rspb.CopyChunk{},
		prog: Progress{BucketCount: bucketCount}, progress: progress,
	}
}

// add queues c for h, handing h's pending chunks to its calls first when
// c would make them more than one call's worth.
func (r *restorer) add(h *datav1.ReplicasetRoute, c *rspb.CopyChunk) error {
	id := h.GetReplicasetId()
	if r.size[id]+c.SizeVT() > replicaset.MaxChunkBytes {
		if err := r.flush(h); err != nil {
			return err
		}
	}
	r.pending[id] = append(r.pending[id], c)
	r.size[id] += c.SizeVT()
	return nil
}

// flush hands h's pending chunks to its calls, starting them on first use.
// It waits while h's previous batch waits for its call: the file is read
// no further ahead than one call a replicaset.
func (r *restorer) flush(h *datav1.ReplicasetRoute) error {
	id := h.GetReplicasetId()
	chunks := r.pending[id]
	if len(chunks) == 0 {
		return nil
	}
	r.pending[id], r.size[id] = nil, 0
	q := r.queues[id]
	if q == nil {
		q = make(chan []*rspb.CopyChunk, 1)
		r.queues[id] = q
		r.g.Go(func() error {
			for chunks := range q {
				if err := r.call(r.ctx, h, chunks); err != nil {
					return err
				}
			}
			return nil
		})
	}
	select {
	case q <- chunks:
		return nil
	case <-r.ctx.Done():
		return r.wait()
	}
}

// wait flushes nothing more: it ends every replicaset's calls and returns
// the first failure.
func (r *restorer) wait() error {
	for id, q := range r.queues {
		close(q)
		delete(r.queues, id)
	}
	return r.g.Wait()
}

// call logs chunks into h; a call repeated after an unknown outcome
// inserts nothing twice (the copy's apply skips keys it holds).
func (r *restorer) call(ctx context.Context, h *datav1.ReplicasetRoute, chunks []*rspb.CopyChunk) error {
	id := h.GetReplicasetId()
	addrs := []string{h.GetLeaderAddress()}
	for _, mb := range h.GetMembers() {
		addrs = append(addrs, mb.GetAddress())
	}
	var resp *rspb.RestoreBucketsResponse
	err := rsclient.OnLeader(ctx, r.cl.Dial, id, addrs, func(ctx context.Context, c rspb.BucketServiceClient) error {
		var err error
		resp, err = c.RestoreBuckets(ctx, &rspb.RestoreBucketsRequest{ReplicasetId: id, Chunks: chunks})
		return err
	})
	if err != nil {
		return fmt.Errorf("backup: restoring into replicaset %s: %w", id, err)
	}
	for i, why := range resp.GetRefused() {
		if why != "" {
			return fmt.Errorf("backup: replicaset %s refused a chunk of bucket %d: %s", id, chunks[i].GetBucket(), why)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range chunks {
		if c.GetLast() {
			r.prog.Buckets++
		}
		r.prog.Rows += uint64(len(c.GetTuples()))
		r.prog.Bytes += int64(c.SizeVT())
	}
	if r.progress != nil {
		r.progress(r.prog)
	}
	return nil
}

// renameSpaces gives the spaces c names (its tuples' and its history's)
// the ids they have in the cluster restored into: ids maps the backup's
// space ids to those. The history's events are stored bytes, so each is
// decoded and encoded again.
func renameSpaces(c *rspb.CopyChunk, ids map[uint32]uint32) error {
	for _, t := range c.GetTuples() {
		t.SpaceId = ids[t.GetSpaceId()]
	}
	for i, v := range c.GetEvents() {
		ev := &rspb.Event{}
		if err := ev.UnmarshalVT(v); err != nil {
			return fmt.Errorf("backup: bucket %d: event %d of its history is not an Event: %w", c.GetBucket(), i, err)
		}
		for _, op := range ev.GetOps() {
			op.SpaceId = ids[op.GetSpaceId()]
		}
		var err error
		if c.Events[i], err = ev.MarshalVT(); err != nil {
			return err
		}
	}
	return nil
}
