package proc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// Mode says where a procedure runs and whether it may write.
type Mode int

const (
	// RO procedures only read; any member of the replicaset may run them.
	RO Mode = 1
	// RW procedures may write; the replicaset's leader runs them.
	RW Mode = 2
)

func (m Mode) String() string {
	switch m {
	case RO:
		return "ro"
	case RW:
		return "rw"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Func is a procedure's body. args are the call's arguments; the returned
// tuple is the call's result. An error is returned to the caller as the
// call's failure (its message as it is).
type Func func(ctx context.Context, c Context, args tuple.Tuple) (tuple.Tuple, error)

// Procedure is a named, registered procedure.
type Procedure struct {
	Name string
	Mode Mode
	Func Func
	// Doc is one line for `shardkit call --list`.
	Doc string
}

// OpKind is what a write operation does.
type OpKind int

// The kinds of write operations (the seed's insert, replace, update,
// delete, and upsert).
const (
	Insert OpKind = iota + 1
	Replace
	Update
	Upsert
	Delete
)

// Op is one operation of an atomic write.
type Op struct {
	Kind  OpKind
	Space string
	// Tuple for Insert, Replace and Upsert.
	Tuple tuple.Tuple
	// Key (the full primary key) for Update and Delete.
	Key []tuple.Value
	// Ops for Update and Upsert.
	Ops []tuple.Op
	// IfVersion makes the op conditional on the tuple's version (0: on
	// there being no tuple).
	IfVersion *uint64
}

// Result is one op's outcome.
type Result struct {
	// Found: a tuple with the key existed before the op.
	Found bool
	// Tuple after the op, or the deleted one.
	Tuple tuple.Tuple
	// Version of the tuple after the op (for Delete: the one it had).
	Version uint64
}

// Versioned is a stored tuple with its version.
type Versioned struct {
	Tuple   tuple.Tuple
	Version uint64
}

// Context is a procedure's view of its replicaset. Reads see what the
// member running the procedure has applied (on the leader of an rw call,
// everything committed before the call started).
type Context interface {
	// Replicaset names the replicaset the procedure runs on.
	Replicaset() string
	// Get reads a tuple by its full primary key; found is false when
	// there is none. The key's bucket must be held by this replicaset.
	Get(space string, key ...tuple.Value) (t tuple.Tuple, version uint64, found bool, err error)
	// Range reads up to limit tuples of a space in one bucket, in
	// primary-key order, after the key after (from the first when nil).
	Range(space string, bucket uint32, after []tuple.Value, limit int) (ts []Versioned, more bool, err error)
	// Count counts the tuples of a space in the buckets active here.
	Count(space string) (uint64, error)
	// CountHeld counts the tuples of a space in the buckets held here
	// (active, or receiving: R5's curr), and which buckets those are,
	// all read at one instant.
	CountHeld(ctx context.Context, space string) (HeldCount, error)
	// Buckets lists the buckets active here.
	Buckets() ([]uint32, error)
	// Write applies ops, all on keys of one bucket held here, atomically:
	// all or none. Only rw procedures may write.
	Write(ctx context.Context, ops ...Op) ([]Result, error)
}

// HeldCount is a count of a space's tuples in the buckets a replicaset
// holds (active, or receiving from the source that froze them), with
// those buckets' number and digest (sharding.BucketDigest summed), all
// read at one instant: summed over the replicasets, the buckets and the
// digest say whether every bucket was counted exactly once
// (SumHeldCounts).
type HeldCount struct {
	Tuples  uint64
	Buckets uint64
	Digest  uint64
}

// ErrReadOnly: an ro procedure tried to write.
var ErrReadOnly = errors.New("proc: an ro procedure cannot write")

var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,63}$`)

// Registry maps names to procedures; safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	procs map[string]Procedure
}

// NewRegistry returns a registry holding procs.
func NewRegistry(procs ...Procedure) (*Registry, error) {
	r := &Registry{procs: map[string]Procedure{}}
	for _, p := range procs {
		if err := r.Register(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds a procedure; a taken name is refused.
func (r *Registry) Register(p Procedure) error {
	if !namePattern.MatchString(p.Name) {
		return fmt.Errorf("proc: invalid procedure name %q: a letter or '_', then letters, digits, '_' or '.', at most 64 bytes", p.Name)
	}
	if p.Mode != RO && p.Mode != RW {
		return fmt.Errorf("proc: procedure %s: mode must be RO or RW", p.Name)
	}
	if p.Func == nil {
		return fmt.Errorf("proc: procedure %s has no Func", p.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs == nil {
		r.procs = map[string]Procedure{}
	}
	if _, ok := r.procs[p.Name]; ok {
		return fmt.Errorf("proc: procedure %s is already registered", p.Name)
	}
	r.procs[p.Name] = p
	return nil
}

// Lookup returns a procedure by name.
func (r *Registry) Lookup(name string) (Procedure, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.procs[name]
	return p, ok
}

// List returns every procedure, by name.
func (r *Registry) List() []Procedure {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Procedure, 0, len(r.procs))
	for _, p := range r.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Builtins are shardkit's own procedures:
//
//   - count(space) ro: the number of tuples of a space in the replicaset's
//     active buckets ([count]); map-call sums to the cluster's count, each
//     bucket counted once;
//   - count_buckets(space) ro: [tuples, buckets, digest], the
//     replicaset's HeldCount; what a cluster-wide count sums
//     (CountCluster), since a plain sum of count is off by a moving
//     bucket's tuples;
//   - echo(args...) ro: its arguments, unchanged;
//   - buckets() ro: the number of buckets active on the replicaset.
func Builtins() []Procedure {
	return []Procedure{
		{Name: "count", Mode: RO, Doc: "count(space): tuples of a space in this replicaset's active buckets", Func: func(_ context.Context, c Context, args tuple.Tuple) (tuple.Tuple, error) {
			name, err := spaceArg("count", args)
			if err != nil {
				return nil, err
			}
			n, err := c.Count(name)
			if err != nil {
				return nil, err
			}
			return tuple.Tuple{tuple.Uint(n)}, nil
		}},
		{Name: "count_buckets", Mode: RO, Doc: "count_buckets(space): [tuples, buckets, digest] of the buckets this replicaset holds, read at one instant", Func: func(ctx context.Context, c Context, args tuple.Tuple) (tuple.Tuple, error) {
			name, err := spaceArg("count_buckets", args)
			if err != nil {
				return nil, err
			}
			ac, err := c.CountHeld(ctx, name)
			if err != nil {
				return nil, err
			}
			return tuple.Tuple{tuple.Uint(ac.Tuples), tuple.Uint(ac.Buckets), tuple.Uint(ac.Digest)}, nil
		}},
		{Name: "echo", Mode: RO, Doc: "echo(args...): its arguments", Func: func(_ context.Context, _ Context, args tuple.Tuple) (tuple.Tuple, error) {
			return slices.Clone(args), nil
		}},
		{Name: "buckets", Mode: RO, Doc: "buckets(): how many buckets are active on this replicaset", Func: func(_ context.Context, c Context, _ tuple.Tuple) (tuple.Tuple, error) {
			bs, err := c.Buckets()
			if err != nil {
				return nil, err
			}
			return tuple.Tuple{tuple.Uint(uint64(len(bs)))}, nil
		}},
	}
}

// spaceArg is the one argument of count and count_buckets: a space name.
func spaceArg(proc string, args tuple.Tuple) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("%s takes one argument, the space name; got %d", proc, len(args))
	}
	name, ok := args[0].AsString()
	if !ok {
		return "", fmt.Errorf("%s: the space name must be a string, got %s", proc, args[0])
	}
	return name, nil
}

// ErrCountInFlux: the counts of a cluster-wide count did not cover every
// bucket exactly once (a bucket moved while they were read: it was
// counted by neither replicaset or by both). Counting again after the
// move gives the right number.
var ErrCountInFlux = errors.New("proc: a bucket moved while the replicasets were counted")

// ErrBadCount: a replicaset's count_buckets result is not three unsigned
// integers.
var ErrBadCount = errors.New("proc: a bad count_buckets result")

// SumHeldCounts sums the count_buckets results of every replicaset of a
// cluster of bucketCount buckets. It returns ErrCountInFlux (with the sum
// so far) unless the results cover every bucket exactly once.
func SumHeldCounts(results []tuple.Tuple, bucketCount uint32) (uint64, error) {
	var tuples, buckets, digest uint64
	for i, r := range results {
		if len(r) != 3 {
			return 0, fmt.Errorf("%w: result %d has %d values, want 3 (tuples, buckets, digest)", ErrBadCount, i+1, len(r))
		}
		var v [3]uint64
		for j := range v {
			var ok bool
			if v[j], ok = r[j].AsUint(); !ok {
				return 0, fmt.Errorf("%w: result %d: value %d is %s, want an unsigned integer", ErrBadCount, i+1, j+1, r[j])
			}
		}
		tuples += v[0]
		buckets += v[1]
		digest += v[2]
	}
	if buckets != uint64(bucketCount) || digest != sharding.AllBucketsDigest(bucketCount) {
		return tuples, fmt.Errorf("%w: %d buckets counted, of %d (each once when no bucket moves); count again", ErrCountInFlux, buckets, bucketCount)
	}
	return tuples, nil
}

// The pauses of CountCluster between counts that a moving bucket spoiled:
// the first, doubled up to the last.
const (
	CountRetryWait    = 20 * time.Millisecond
	CountRetryMaxWait = 500 * time.Millisecond
)

// CountCluster counts a space's tuples in a cluster of bucketCount
// buckets, each bucket once: countAll runs count_buckets on every
// replicaset (a map-call) and CountCluster sums the results
// (SumHeldCounts), counting again while a bucket moved between two
// replicasets' counts, after a pause from CountRetryWait doubling to
// CountRetryMaxWait, until ctx ends. Its errors: countAll's as they are,
// ErrBadCount, and ErrCountInFlux when ctx ended with buckets still moving.
func CountCluster(ctx context.Context, bucketCount uint32, countAll func(context.Context) ([]tuple.Tuple, error)) (uint64, error) {
	wait := retry.Backoff{Initial: CountRetryWait, Max: CountRetryMaxWait}
	for {
		results, err := countAll(ctx)
		if err != nil {
			return 0, err
		}
		n, err := SumHeldCounts(results, bucketCount)
		if !errors.Is(err, ErrCountInFlux) {
			return n, err
		}
		if serr := retry.Sleep(ctx, wait.Next()); serr != nil {
			return 0, fmt.Errorf("%w (buckets kept moving until the deadline: %w)", err, serr)
		}
	}
}
