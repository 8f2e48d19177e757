package backup

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Link is one backup of a chain: its directory and its manifest.
type Link struct {
	Dir      string
	Manifest *Manifest
}

// readManifestSum reads dir's manifest and the SHA-256 of its bytes.
func readManifestSum(dir string) (*Manifest, string, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			return nil, "", fmt.Errorf("backup: %s is missing (no such directory)", dir)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", fmt.Errorf("backup: %s has no %s: an incomplete backup (its capture did not finish), or not a backup", dir, ManifestName)
		}
		return nil, "", err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, "", fmt.Errorf("%w (in %s)", err, dir)
	}
	sum := sha256.Sum256(data)
	return m, hex.EncodeToString(sum[:]), nil
}

// BaseDir is the directory of the base of the incremental backup in dir
// whose manifest names it as b.
func BaseDir(dir string, b *BaseRef) string {
	if filepath.IsAbs(b.Dir) {
		return b.Dir
	}
	return filepath.Join(dir, b.Dir)
}

// baseRef names the backup in base as the base of a backup written into
// dir, with its manifest's SHA-256 sum: base as given if absolute, else
// relative to dir.
func baseRef(dir, base, sum string) (*BaseRef, error) {
	if filepath.IsAbs(base) {
		return &BaseRef{Dir: filepath.Clean(base), ManifestSHA256: sum}, nil
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	absBase, err := filepath.Abs(base)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(absDir, absBase)
	if err != nil {
		return nil, err
	}
	return &BaseRef{Dir: rel, ManifestSHA256: sum}, nil
}

// Chain returns the backups a restore of the backup in dir (whose
// manifest is m) reads, its full backup first and dir last: dir alone for
// a full backup, else dir's base, that one's base, and so on. It refuses,
// naming the base and the backup that names it, a base missing or
// incomplete, one whose manifest's SHA-256 differs from the one recorded
// (another backup, or one retaken, in its place), one of another bucket
// count, and a chain that comes back to a backup of it (a cycle). It reads
// the manifests only: Verify checks the files.
func Chain(dir string, m *Manifest) ([]Link, error) {
	links := []Link{{Dir: dir, Manifest: m}}
	seen := map[string]string{}
	mark := func(d string) (string, bool) {
		a, err := filepath.Abs(d)
		if err != nil {
			a = filepath.Clean(d)
		}
		prev, dup := seen[a]
		seen[a] = d
		return prev, dup
	}
	mark(dir)
	for cur := links[0]; cur.Manifest.Incremental(); {
		bdir := BaseDir(cur.Dir, cur.Manifest.Base)
		if prev, dup := mark(bdir); dup {
			return nil, fmt.Errorf("backup: the chain of %s has a cycle: %s names as its base %s, which is %s, already in the chain", dir, cur.Dir, bdir, prev)
		}
		bm, sum, err := readManifestSum(bdir)
		if err != nil {
			return nil, fmt.Errorf("backup: the base %s of %s: %w", bdir, cur.Dir, err)
		}
		if sum != cur.Manifest.Base.ManifestSHA256 {
			return nil, fmt.Errorf("backup: the base %s of %s has a manifest of sha256 %s, %s recorded %s: another backup (or one retaken) is in its place", bdir, cur.Dir, sum, cur.Dir, cur.Manifest.Base.ManifestSHA256)
		}
		if bm.BucketCount != m.BucketCount {
			return nil, fmt.Errorf("backup: the base %s of %s has %d buckets, %s %d: a base of another cluster", bdir, cur.Dir, bm.BucketCount, cur.Dir, m.BucketCount)
		}
		cur = Link{Dir: bdir, Manifest: bm}
		links = append(links, cur)
	}
	slices.Reverse(links)
	return links, nil
}

// EachComposed calls fn with every bucket of the chain (Chain) as a full
// backup's chunks, composed in memory one bucket at a time: the chunks of
// the newest backup of the chain that holds the bucket whole, then each
// later backup's change set of it applied in order (composeBucket). The
// change sets, small by their nature, are read first and held; the whole
// buckets are read in their files' order. A chain of one (a full backup)
// is Each.
func EachComposed(chain []Link, fn func(c *rspb.CopyChunk) error) error {
	if len(chain) == 1 {
		return Each(chain[0].Dir, chain[0].Manifest, func(_ string, c *rspb.CopyChunk) error { return fn(c) })
	}
	// source is the index in chain of the backup holding each bucket whole
	// last.
	source := map[uint32]int{}
	for i, l := range chain {
		for _, f := range l.Manifest.Files {
			for _, b := range f.Buckets {
				if !f.changeSet(b) {
					source[b] = i
				}
			}
		}
	}
	sets := map[uint32][][]*rspb.CopyChunk{}
	for i := 1; i < len(chain); i++ {
		acc := map[uint32][]*rspb.CopyChunk{}
		err := Each(chain[i].Dir, chain[i].Manifest, func(_ string, c *rspb.CopyChunk) error {
			b := c.GetBucket()
			if !c.GetChanges() || i <= source[b] {
				return nil // whole, or changes before the bucket came whole
			}
			acc[b] = append(acc[b], c)
			if c.GetLast() {
				sets[b] = append(sets[b], acc[b])
				delete(acc, b)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for i, l := range chain {
		acc := map[uint32][]*rspb.CopyChunk{}
		err := Each(l.Dir, l.Manifest, func(_ string, c *rspb.CopyChunk) error {
			b := c.GetBucket()
			if c.GetChanges() || source[b] != i {
				return nil
			}
			acc[b] = append(acc[b], c)
			if !c.GetLast() {
				return nil
			}
			whole := acc[b]
			delete(acc, b)
			composed, err := composeBucket(whole, sets[b])
			if err != nil {
				return err
			}
			for _, out := range composed {
				if err := fn(out); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// composeBucket is a bucket whole (its chunks in order, the last with
// last set) with its change sets (each its chunks in order, oldest set
// first) applied: each set's tuples replace the tuples of their keys or
// add them, its deleted keys are dropped, its request ids replace those
// of the same id or are added, its events are added (by revision), and
// its revision is the bucket's. The result is the bucket's chunks as a
// full backup holds them: its tuples in key order (space id, then key),
// at most replicaset.CopyChunkTuples and about replicaset.MaxChunkBytes a
// chunk, then its request ids and its history by revision, and on the
// last chunk its revision. Without sets it is whole. An event that is no
// Event (its revision unknown) is an error.
func composeBucket(whole []*rspb.CopyChunk, sets [][]*rspb.CopyChunk) ([]*rspb.CopyChunk, error) {
	if len(sets) == 0 {
		return whole, nil
	}
	key := func(space uint32, k []byte) string {
		return string(binary.BigEndian.AppendUint32(nil, space)) + string(k)
	}
	tuples := map[string]*rspb.CopiedTuple{}
	requests := map[string]*rspb.CopiedRequest{}
	var requestOrder []string
	events := map[uint64][]byte{} // as stored, by revision
	var bad error
	var revision uint64
	apply := func(c *rspb.CopyChunk) {
		for _, t := range c.GetTuples() {
			tuples[key(t.GetSpaceId(), t.GetKey())] = t
		}
		for _, d := range c.GetDeleted() {
			delete(tuples, key(d.GetSpaceId(), d.GetKey()))
		}
		for _, r := range c.GetRequests() {
			id := string(r.GetId())
			if requests[id] == nil {
				requestOrder = append(requestOrder, id)
			}
			requests[id] = r
		}
		for _, v := range c.GetEvents() {
			ev := &rspb.Event{}
			if err := ev.UnmarshalVT(v); err != nil {
				bad = cmp.Or(bad, fmt.Errorf("backup: bucket %d: an event of its history is not an Event: %w", c.GetBucket(), err))
				continue
			}
			events[ev.GetRevision()] = v
		}
		if c.GetLast() {
			revision = c.GetRevision()
		}
	}
	for _, c := range whole {
		apply(c)
	}
	for _, set := range sets {
		for _, c := range set {
			apply(c)
		}
	}
	bucket, gen := whole[0].GetBucket(), whole[0].GetGeneration()
	chunk := &rspb.CopyChunk{Bucket: bucket, Generation: gen}
	out := []*rspb.CopyChunk{chunk}
	count, size := 0, 0
	added := func(n int, tuple bool) {
		size += n
		if tuple {
			count++
		}
		if count < replicaset.CopyChunkTuples && size < replicaset.MaxChunkBytes {
			return
		}
		chunk = &rspb.CopyChunk{Bucket: bucket, Generation: gen}
		out = append(out, chunk)
		count, size = 0, 0
	}
	for _, k := range slices.Sorted(maps.Keys(tuples)) {
		t := tuples[k]
		chunk.Tuples = append(chunk.Tuples, t)
		added(t.SizeVT(), true)
	}
	for _, id := range requestOrder {
		r := requests[id]
		chunk.Requests = append(chunk.Requests, r)
		added(r.SizeVT(), false)
	}
	if bad != nil {
		return nil, bad
	}
	for _, rev := range slices.Sorted(maps.Keys(events)) {
		v := events[rev]
		chunk.Events = append(chunk.Events, v)
		added(len(v), false)
	}
	chunk.Revision, chunk.Last = revision, true
	return out, nil
}
