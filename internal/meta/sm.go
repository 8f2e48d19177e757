package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// Result is what applying one command returns to its proposer.
type Result struct {
	Instance *metapb.Instance
	Lease    *metapb.Lease
	Space    *metapb.Space
	Move     *metapb.Move
	User     *metapb.User
	Granted  bool
	// Steps are the results of a MoveSteps' steps, in order (each may
	// have its own Err).
	Steps []Result
	// Err is a *Refusal when the command was not allowed.
	Err error
}

// SM is group 0's state machine.
type SM struct {
	state atomic.Pointer[State]

	mu      sync.Mutex
	changed chan struct{}
}

var _ multiraft.StateMachine = (*SM)(nil)

// New returns a state machine with an empty state; call Load to read the
// persisted one.
func New() *SM {
	sm := &SM{changed: make(chan struct{})}
	sm.state.Store(emptyState())
	return sm
}

// State returns the current state. It never changes; a newer one replaces it.
func (sm *SM) State() *State { return sm.state.Load() }

// Changed returns a channel closed at the next change of state.
func (sm *SM) Changed() <-chan struct{} {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.changed
}

func (sm *SM) publish(s *State) {
	sm.state.Store(s)
	sm.mu.Lock()
	close(sm.changed)
	sm.changed = make(chan struct{})
	sm.mu.Unlock()
}

// Encode marshals a command for Group.Propose.
func Encode(c *metapb.Command) ([]byte, error) { return proto.Marshal(c) }

// Apply implements multiraft.StateMachine.
func (sm *SM) Apply(b *pebble.Batch, entries []multiraft.Entry) ([]any, error) {
	st := sm.State().clone()
	out := make([]any, len(entries))
	for i, e := range entries {
		cmd := &metapb.Command{}
		if err := proto.Unmarshal(e.Cmd, cmd); err != nil {
			out[i] = Result{Err: refuse(CodeInvalid, "undecodable group-0 command at %d: %v", e.Index, err)}
			continue
		}
		t := &txn{s: st, b: b, index: e.Index, now: max(cmd.GetNowUnixMs(), st.Clock)}
		res := t.apply(cmd)
		if t.err != nil {
			return nil, t.err
		}
		st.Index, st.Clock = e.Index, t.now
		out[i] = res
	}
	if err := b.Set(keyIndex, binary.BigEndian.AppendUint64(nil, st.Index), nil); err != nil {
		return nil, err
	}
	if err := b.Set(keyClock, binary.BigEndian.AppendUint64(nil, uint64(st.Clock)), nil); err != nil {
		return nil, err
	}
	sm.publish(st)
	return out, nil
}

// Snapshot implements multiraft.StateMachine.
func (sm *SM) Snapshot(ctx context.Context, r pebble.Reader, w io.Writer) error {
	return storage.WritePrefixSnapshot(ctx, r, []byte(prefix), w)
}

// Restore implements multiraft.StateMachine.
func (sm *SM) Restore(ctx context.Context, db *pebble.DB, r io.Reader) error {
	if err := storage.RestorePrefixSnapshot(ctx, db, []byte(prefix), r); err != nil {
		return err
	}
	return sm.Load(db)
}

// Load reads the persisted state.
func (sm *SM) Load(r pebble.Reader) error {
	st := emptyState()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: storage.PrefixEnd([]byte(prefix))})
	if err != nil {
		return err
	}
	defer it.Close()
	var buckets map[uint32]string
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		var err error
		switch {
		case bytes.Equal(k, keyProps):
			p := &metapb.ClusterProperties{}
			err = proto.Unmarshal(v, p)
			st.Props = p
		case bytes.Equal(k, keyClock) && len(v) == 8:
			st.Clock = int64(binary.BigEndian.Uint64(v))
		case bytes.Equal(k, keyIndex) && len(v) == 8:
			st.Index = binary.BigEndian.Uint64(v)
		case bytes.HasPrefix(k, []byte(prefixInstance)):
			inst := &metapb.Instance{}
			err = proto.Unmarshal(v, inst)
			st.Instances[inst.GetInstanceId()] = inst
		case bytes.HasPrefix(k, []byte(prefixReplicaset)):
			rs := &metapb.Replicaset{}
			err = proto.Unmarshal(v, rs)
			st.Replicasets[rs.GetReplicasetId()] = rs
		case bytes.HasPrefix(k, []byte(prefixMove)) && len(k) == len(prefixMove)+4:
			mv := &metapb.Move{}
			err = proto.Unmarshal(v, mv)
			st.Moves[mv.GetBucket()] = mv
		case bytes.HasPrefix(k, []byte(prefixGen)) && len(k) == len(prefixGen)+4 && len(v) == 8:
			st.Generations[binary.BigEndian.Uint32(k[len(prefixGen):])] = binary.BigEndian.Uint64(v)
		case bytes.HasPrefix(k, []byte(prefixPin)) && len(k) == len(prefixPin)+4:
			st.Pinned[binary.BigEndian.Uint32(k[len(prefixPin):])] = true
		case bytes.HasPrefix(k, []byte(prefixSpace)):
			sp := &metapb.Space{}
			err = proto.Unmarshal(v, sp)
			st.Spaces[sp.GetName()] = sp
		case bytes.HasPrefix(k, []byte(prefixUser)):
			u := &metapb.User{}
			err = proto.Unmarshal(v, u)
			st.Users[u.GetName()] = u
		case bytes.HasPrefix(k, []byte(prefixLease)):
			l := &metapb.Lease{}
			err = proto.Unmarshal(v, l)
			st.Leases[l.GetName()] = l
		case bytes.HasPrefix(k, []byte(prefixBucket)) && len(k) == len(prefixBucket)+4:
			if buckets == nil {
				buckets = map[uint32]string{}
			}
			buckets[binary.BigEndian.Uint32(k[len(prefixBucket):])] = string(v)
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return fmt.Errorf("meta: load %q: %w", k, err)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if st.Props != nil {
		st.Buckets = make([]string, st.Props.GetBucketCount())
		for b, rs := range buckets {
			if b >= 1 && int(b) <= len(st.Buckets) {
				st.Buckets[b-1] = rs
			}
		}
	}
	sm.publish(st)
	return nil
}

// txn applies one command to a state and writes what changed into a batch.
type txn struct {
	s     *State
	b     *pebble.Batch
	index uint64
	now   int64
	err   error // a storage failure: stops the group
}

func (t *txn) write(key []byte, m proto.Message) {
	if t.err != nil {
		return
	}
	v, err := proto.Marshal(m)
	if err == nil {
		err = t.b.Set(key, v, nil)
	}
	t.err = err
}

func (t *txn) putInstance(inst *metapb.Instance) {
	inst.CommitIndex = t.index
	t.s.putInstance(inst)
	t.write(keyInstance(inst.GetInstanceId()), inst)
}

func (t *txn) putReplicaset(rs *metapb.Replicaset) {
	t.s.putReplicaset(rs)
	t.write(keyReplicaset(rs.GetReplicasetId()), rs)
}

func (t *txn) putProps(p *metapb.ClusterProperties) {
	t.s.setProps(p)
	t.write(keyProps, p)
}

func (t *txn) putLease(l *metapb.Lease) {
	t.s.Leases[l.GetName()] = l
	t.write(keyLease(l.GetName()), l)
}

func (t *txn) putBuckets(first, last uint32, rs string) {
	t.s.setBuckets(first, last, rs)
	for i := first; i <= last && t.err == nil; i++ {
		t.err = t.b.Set(keyBucket(i), []byte(rs), nil)
	}
}

func (t *txn) apply(c *metapb.Command) Result {
	if c.GetBoot() == nil && !t.s.Booted() {
		return Result{Err: refuse(CodeUnavailable, "the cluster is not bootstrapped yet; retry")}
	}
	switch op := c.GetOp().(type) {
	case *metapb.Command_Boot:
		return t.boot(op.Boot)
	case *metapb.Command_Join:
		return t.join(op.Join.GetRequest())
	case *metapb.Command_SetTargetGrade:
		return t.setTargetGrade(op.SetTargetGrade)
	case *metapb.Command_SetCurrentGrade:
		return t.setCurrentGrade(op.SetCurrentGrade)
	case *metapb.Command_SetReplicaset:
		return t.setReplicaset(op.SetReplicaset)
	case *metapb.Command_AssignBuckets:
		return t.assignBuckets(op.AssignBuckets)
	case *metapb.Command_BumpSharding:
		p := t.s.editProps()
		p.ShardingVersion++
		t.putProps(p)
		return Result{}
	case *metapb.Command_AcquireLease:
		return t.acquireLease(op.AcquireLease)
	case *metapb.Command_RenewLease:
		return t.renewLease(op.RenewLease)
	case *metapb.Command_ReleaseLease:
		return t.releaseLease(op.ReleaseLease)
	case *metapb.Command_SetAddress:
		return t.setAddress(op.SetAddress)
	case *metapb.Command_CreateSpace:
		return t.createSpace(op.CreateSpace)
	case *metapb.Command_DropSpace:
		return t.dropSpace(op.DropSpace)
	case *metapb.Command_StartMove:
		return t.startMove(op.StartMove)
	case *metapb.Command_SetMovePhase:
		return t.setMovePhase(op.SetMovePhase)
	case *metapb.Command_FinishMove:
		return t.finishMove(op.FinishMove)
	case *metapb.Command_MoveSteps:
		return t.moveSteps(op.MoveSteps)
	case *metapb.Command_PinBucket:
		return t.pinBucket(op.PinBucket)
	case *metapb.Command_SetRebalancer:
		p := t.s.editProps()
		p.Rebalancer = MergeRebalancer(p.GetRebalancer(), op.SetRebalancer)
		t.putProps(p)
		return Result{}
	case *metapb.Command_CreateUser:
		return t.createUser(op.CreateUser)
	case *metapb.Command_DropUser:
		return t.dropUser(op.DropUser)
	case *metapb.Command_SetUserRole:
		return t.setUserRole(op.SetUserRole)
	case *metapb.Command_SetUserPassword:
		return t.setUserPassword(op.SetUserPassword)
	default:
		return Result{Err: refuse(CodeInvalid, "unknown group-0 command %T", op)}
	}
}
