package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rsclient"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Cluster is what a backup and a restore need of a running cluster.
type Cluster interface {
	// Routing reads the cluster's routing table (data.v1 GetRouting).
	Routing(ctx context.Context) (*datav1.GetRoutingResponse, error)
	// Dial returns a connection to one instance.
	Dial(addr string) (grpc.ClientConnInterface, error)
	// Users lists the cluster's users with their roles.
	Users(ctx context.Context) ([]User, error)
}

// Progress is how far a backup or a restore is.
type Progress struct {
	Buckets, BucketCount uint32
	Rows                 uint64
	Bytes                int64
	// Refused counts the buckets a replicaset refused (moving) and that
	// were asked again.
	Refused int
}

// CreateOptions tune Create.
type CreateOptions struct {
	// Progress, if set, is called after each replicaset's batch.
	Progress func(Progress)
	// ChunkTuples bounds the rows of one record (0: the move's chunk,
	// replicaset.CopyChunkTuples).
	ChunkTuples int
	// Retry is how long to wait before asking again for buckets refused
	// (moving); 0: 200 ms. The context bounds the whole backup.
	Retry time.Duration
	// Base, if set, is the directory of an earlier backup of the cluster
	// (full or incremental): the backup is incremental, holding each
	// bucket's changes since its revision there.
	Base string
	// Unpaced makes each replicaset's leader stream as fast as it reads;
	// by default it yields to its clients' writes (BackupBucketsRequest's
	// unpaced).
	Unpaced bool
}

// Create backs the cluster up into dir, which must be empty or absent:
// each bucket from the replicaset holding it, captured there at one point
// after the call began (every write acknowledged before Create was called
// is in it); a bucket refused (moving) is asked again, from whichever
// replicaset holds it then, until every bucket is captured or ctx ends.
// The replicasets are read one at a time, each leader pacing itself to
// its clients' writes; with o.Unpaced, beside each other. The manifest is
// written last: on any failure dir has none, and is an incomplete backup,
// whose data files Create removes (a backup that failed on a full disk
// gives its space back). With o.Base, the backup is
// incremental: each bucket is asked its changes since its revision in the
// base (BackupBuckets' base_revisions), which its replicaset sends as
// unchanged, as changes, or whole.
func Create(ctx context.Context, cl Cluster, dir string, o CreateOptions) (_ *Manifest, err error) {
	started := time.Now().UTC()
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	var m *Manifest
	defer func() {
		if err == nil || m == nil {
			return
		}
		for _, f := range m.Files {
			if rerr := os.Remove(filepath.Join(dir, f.Name)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w (and removing its data file: %w)", err, rerr)
			}
		}
	}()
	rt, err := cl.Routing(ctx)
	if err != nil {
		return nil, fmt.Errorf("backup: reading the routing table: %w", err)
	}
	n := rt.GetBucketCount()
	if n == 0 {
		return nil, errors.New("backup: the cluster's routing table has no buckets (not bootstrapped?)")
	}
	m = &Manifest{Format: FormatVersion, Kind: KindFull, Created: started, BucketCount: n, SchemaVersion: rt.GetSchemaVersion()}
	var baseRevs map[uint32]uint64
	if o.Base != "" {
		if baseRevs, m.Base, err = readBase(dir, o.Base, rt); err != nil {
			return nil, err
		}
		m.Kind = KindIncremental
	}
	// The spaces as the routing has them at the start and at the end: a
	// space created during the backup may have rows in buckets captured
	// after it was.
	spaces := map[uint32]*datav1.Space{}
	addSpaces := func(rt *datav1.GetRoutingResponse) {
		for _, sp := range rt.GetSpaces() {
			if spaces[sp.GetId()] == nil {
				spaces[sp.GetId()] = sp
			}
		}
	}
	addSpaces(rt)
	for _, r := range rt.GetReplicasets() {
		m.Replicasets = append(m.Replicasets, ReplicasetWeight{ID: r.GetReplicasetId(), Weight: r.GetWeight()})
	}
	if m.Users, err = cl.Users(ctx); err != nil {
		return nil, fmt.Errorf("backup: listing the users: %w", err)
	}
	wait := o.Retry
	if wait <= 0 {
		wait = 200 * time.Millisecond
	}
	pending := map[uint32]bool{}
	for b := uint32(1); b <= n; b++ {
		pending[b] = true
	}
	prog := Progress{BucketCount: n}
	seq := 0
	var lastRefusal string
	// Each replicaset's batches are read one after the other, the
	// replicasets beside each other when unpaced; mu guards what they
	// share (pending, seq, prog, m.Files, lastRefusal) and calls Progress
	// one at a time.
	var mu sync.Mutex
	captureOn := func(ctx context.Context, r *datav1.ReplicasetRoute, asked []uint32) error {
		for len(asked) > 0 {
			batch := asked[:min(len(asked), replicaset.MaxBatchBuckets)]
			asked = asked[len(batch):]
			mu.Lock()
			seq++
			name := fmt.Sprintf("%s-%04d.data", safeName(r.GetReplicasetId()), seq)
			mu.Unlock()
			var bases []uint64
			if baseRevs != nil {
				for _, b := range batch {
					bases = append(bases, baseRevs[b])
				}
			}
			entry, refused, err := captureBatch(ctx, cl, dir, name, r, batch, bases, o)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, rf := range refused {
				lastRefusal = rf
			}
			prog.Refused += len(refused)
			if entry != nil {
				m.Files = append(m.Files, *entry)
				for _, b := range entry.Buckets {
					delete(pending, b)
				}
				prog.Buckets += uint32(len(entry.Buckets))
				prog.Bytes += entry.Size
				for _, c := range entry.Rows {
					prog.Rows += c
				}
			}
			if o.Progress != nil {
				o.Progress(prog)
			}
			mu.Unlock()
		}
		return nil
	}
	for round := 0; len(pending) > 0; round++ {
		if round > 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("backup: %d buckets not captured (the last refusal: %s): %w", len(pending), lastRefusal, ctx.Err())
			case <-time.After(wait):
			}
			if rt, err = cl.Routing(ctx); err != nil {
				return nil, fmt.Errorf("backup: reading the routing table: %w", err)
			}
		}
		g, gctx := errgroup.WithContext(ctx)
		if !o.Unpaced {
			// Each leader's pace sees its own clients' delay, not what
			// the others' reads cost cores they may share.
			g.SetLimit(1)
		}
		// Each replicaset's buckets, named before any capture runs (the
		// captures take theirs out of pending).
		asked := make([][]uint32, len(rt.GetReplicasets()))
		for i, r := range rt.GetReplicasets() {
			asked[i] = holdersOf(rt, r.GetReplicasetId(), pending)
		}
		for i, r := range rt.GetReplicasets() {
			if len(asked[i]) > 0 {
				g.Go(func() error { return captureOn(gctx, r, asked[i]) })
			}
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	// In the order of their names, whatever order the replicasets ended in.
	slices.SortFunc(m.Files, func(a, b FileEntry) int { return strings.Compare(a.Name, b.Name) })
	if rt, err = cl.Routing(ctx); err != nil {
		return nil, fmt.Errorf("backup: reading the routing table: %w", err)
	}
	addSpaces(rt)
	ids := slices.Sorted(maps.Keys(spaces))
	for _, id := range ids {
		b, err := protojson.Marshal(spaces[id])
		if err != nil {
			return nil, err
		}
		m.Spaces = append(m.Spaces, json.RawMessage(b))
	}
	if err := WriteManifest(dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// readBase reads the base of an incremental backup into dir of the
// cluster whose routing is rt: each bucket's revision in it, and its
// reference. It refuses a base that is not a complete backup, whose chain
// does not hold (Chain), of another bucket count, of format FormatFull1
// (which records no revisions), or that names a space the cluster has
// under another id: rows are composed by space id and key, so a space
// dropped and created again since the base, or a base of another cluster
// (a restore gives spaces new ids), would mix two spaces' rows.
func readBase(dir, base string, rt *datav1.GetRoutingResponse) (map[uint32]uint64, *BaseRef, error) {
	n := rt.GetBucketCount()
	bm, sum, err := readManifestSum(base)
	if err != nil {
		return nil, nil, fmt.Errorf("backup: the base %s: %w", base, err)
	}
	if _, err := Chain(base, bm); err != nil {
		return nil, nil, err
	}
	if bm.BucketCount != n {
		return nil, nil, fmt.Errorf("backup: the base %s has %d buckets, the cluster %d: a backup of another cluster", base, bm.BucketCount, n)
	}
	if bm.Format == FormatFull1 {
		return nil, nil, fmt.Errorf("backup: the base %s is of format %d, which records no revisions of its buckets: take a full backup to start a chain from", base, FormatFull1)
	}
	// The base's ids of each space name (two where it was dropped and
	// created again during the base's capture): the cluster's id must be
	// one of them.
	baseIDs := map[string][]uint32{}
	for i, raw := range bm.Spaces {
		sp := &datav1.Space{}
		if err := protojson.Unmarshal(raw, sp); err != nil {
			return nil, nil, fmt.Errorf("backup: the base %s: its manifest's space %d: %w", base, i, err)
		}
		baseIDs[sp.GetName()] = append(baseIDs[sp.GetName()], sp.GetId())
	}
	for _, sp := range rt.GetSpaces() {
		if had := baseIDs[sp.GetName()]; len(had) > 0 && !slices.Contains(had, sp.GetId()) {
			return nil, nil, fmt.Errorf("backup: the base %s has space %s with id %d, the cluster with id %d: the space was dropped and created again since, or the base is of another cluster (a restore gives spaces new ids): rows are matched by space id, so take a full backup", base, sp.GetName(), had[len(had)-1], sp.GetId())
		}
	}
	revs := map[uint32]uint64{}
	for _, f := range bm.Files {
		for i, b := range f.Buckets {
			revs[b] = f.Revisions[i]
		}
	}
	ref, err := baseRef(dir, base, sum)
	if err != nil {
		return nil, nil, fmt.Errorf("backup: naming the base %s: %w", base, err)
	}
	return revs, ref, nil
}

// holdersOf lists, in order, the pending buckets rt places on replicaset rs.
func holdersOf(rt *datav1.GetRoutingResponse, rs string, pending map[uint32]bool) []uint32 {
	var out []uint32
	for _, br := range rt.GetBuckets() {
		if br.GetReplicasetId() != rs {
			continue
		}
		for b := br.GetFirst(); b <= br.GetLast() && b != 0; b++ {
			if pending[b] {
				out = append(out, b)
			}
		}
	}
	slices.Sort(out)
	return out
}

// captureBatch asks replicaset r's leader for buckets into data file name
// (with bases, their revisions in the base backup, for their changes).
// It returns the file's entry (nil when no bucket came whole: the file is
// removed) and the refusals. A stream broken midway removes the file and
// asks again (rsclient.OnLeader), for all of the batch.
func captureBatch(ctx context.Context, cl Cluster, dir, name string, r *datav1.ReplicasetRoute, buckets []uint32, bases []uint64, o CreateOptions) (*FileEntry, []string, error) {
	addrs := []string{r.GetLeaderAddress()}
	for _, mb := range r.GetMembers() {
		addrs = append(addrs, mb.GetAddress())
	}
	var entry *FileEntry
	var refused []string
	err := rsclient.OnLeader(ctx, cl.Dial, r.GetReplicasetId(), addrs, func(ctx context.Context, c rspb.BucketServiceClient) error {
		entry, refused = nil, nil
		fw, err := CreateFile(dir, name)
		if err != nil {
			return err
		}
		stream, err := c.BackupBuckets(ctx, &rspb.BackupBucketsRequest{ReplicasetId: r.GetReplicasetId(), Buckets: buckets, ChunkTuples: uint32(o.ChunkTuples), BaseRevisions: bases, Unpaced: o.Unpaced})
		if err != nil {
			fw.Abort()
			return err
		}
		whole := 0
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fw.Abort()
				return err
			}
			for _, rf := range resp.GetRefused() {
				refused = append(refused, rf.GetReason())
			}
			for _, ch := range resp.GetChunks() {
				if err := fw.Write(ch); err != nil {
					fw.Abort()
					return err
				}
				if ch.GetLast() {
					whole++
				}
			}
		}
		e, err := fw.Close()
		if err != nil {
			fw.Abort()
			return err
		}
		if n := whole + len(refused); n != len(buckets) {
			_ = os.Remove(fw.f.Name())
			return fmt.Errorf("the leader answered %d of %d buckets asked (%d whole, %d refused)", n, len(buckets), whole, len(refused))
		}
		if whole == 0 {
			_ = os.Remove(fw.f.Name())
			return nil
		}
		entry = &e
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("backup: replicaset %s: %w", r.GetReplicasetId(), err)
	}
	return entry, refused, nil
}

// safeName makes a replicaset id a file name's part.
func safeName(id string) string {
	b := []byte(id)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			b[i] = '_'
		}
	}
	if len(b) == 0 || len(b) > 64 {
		return "rs"
	}
	return string(b)
}

// prepareDir creates dir, or checks that it is empty: a backup never
// writes beside another's files.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("backup: %s is not empty (%d entries, e.g. %s): a backup goes into an empty or new directory", dir, len(ents), ents[0].Name())
	}
	return nil
}
