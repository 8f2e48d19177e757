package meta

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardkit/shardkit/internal/meta/metapb"

	"google.golang.org/protobuf/proto"
)

// State is an immutable view of group 0 at one applied index. Readers get
// it from SM.State and must not modify it.
type State struct {
	// Index is the log index of the last command this state reflects.
	Index uint64
	// Clock is the latest leader-stamped time seen (Unix ms).
	Clock int64
	// Props is nil until the cluster is booted.
	Props       *metapb.ClusterProperties
	Instances   map[string]*metapb.Instance
	Replicasets map[string]*metapb.Replicaset
	// Buckets[i] is the replicaset of bucket i+1 ("" while unassigned).
	Buckets []string
	Leases  map[string]*metapb.Lease
	// Spaces by name.
	Spaces map[string]*metapb.Space
	// Moves in progress, by bucket.
	Moves map[uint32]*metapb.Move
	// Generations of buckets that have moved (absent: 1).
	Generations map[uint32]uint64
	// Pinned buckets.
	Pinned map[uint32]bool
	// Users by name (root is implicit; see UserRole).
	Users map[string]*metapb.User

	// own says which copied-on-write fields this state (a clone being
	// applied to) has copied already: a batch of many moves copies each
	// once per Apply, not once per move.
	own struct{ moves, generations, buckets bool }
}

// Generation returns a bucket's generation (1 until it first moves).
func (s *State) Generation(b uint32) uint64 {
	if g, ok := s.Generations[b]; ok {
		return g
	}
	return 1
}

func emptyState() *State {
	return &State{
		Instances:   map[string]*metapb.Instance{},
		Replicasets: map[string]*metapb.Replicaset{},
		Leases:      map[string]*metapb.Lease{},
		Spaces:      map[string]*metapb.Space{},
		Moves:       map[uint32]*metapb.Move{},
		Generations: map[uint32]uint64{},
		Pinned:      map[uint32]bool{},
		Users:       map[string]*metapb.User{},
	}
}

// clone returns a copy whose maps and slices may be changed; the records in
// them are shared and must be cloned before they are changed.
func (s *State) clone() *State {
	return &State{
		Index:       s.Index,
		Clock:       s.Clock,
		Props:       s.Props,
		Instances:   maps.Clone(s.Instances),
		Replicasets: maps.Clone(s.Replicasets),
		Buckets:     s.Buckets, // copied on write by setBuckets
		Leases:      maps.Clone(s.Leases),
		Spaces:      s.Spaces, // copied on write by putSpace and dropSpace
		Moves:       s.Moves,  // the three below are copied on write (moves.go)
		Generations: s.Generations,
		Pinned:      s.Pinned,
		Users:       s.Users, // copied on write (users.go)
	}
}

// Booted reports whether the cluster has been bootstrapped.
func (s *State) Booted() bool { return s.Props != nil }

// Instance returns an instance by id.
func (s *State) Instance(id string) *metapb.Instance { return s.Instances[id] }

// InstanceByRaftID returns the instance with a raft id (nil if none).
func (s *State) InstanceByRaftID(raftID uint64) *metapb.Instance {
	for _, inst := range s.Instances {
		if inst.GetRaftId() == raftID {
			return inst
		}
	}
	return nil
}

// InstanceByUUID returns the instance with a uuid (nil if none).
func (s *State) InstanceByUUID(uuid string) *metapb.Instance {
	for _, inst := range s.Instances {
		if inst.GetUuid() == uuid {
			return inst
		}
	}
	return nil
}

// SortedInstances returns every instance, by raft id.
func (s *State) SortedInstances() []*metapb.Instance {
	out := slices.Collect(maps.Values(s.Instances))
	slices.SortFunc(out, func(a, b *metapb.Instance) int { return cmp.Compare(a.GetRaftId(), b.GetRaftId()) })
	return out
}

// SortedReplicasets returns every replicaset, by id.
func (s *State) SortedReplicasets() []*metapb.Replicaset {
	out := slices.Collect(maps.Values(s.Replicasets))
	slices.SortFunc(out, func(a, b *metapb.Replicaset) int { return cmp.Compare(a.GetReplicasetId(), b.GetReplicasetId()) })
	return out
}

// InService names the replicasets in service, for a refusal that names
// one that is not: "replicasets in service: r1, r2" (or "none").
func (s *State) InService() string {
	var ids []string
	for _, rs := range s.SortedReplicasets() {
		if !rs.GetExpelled() {
			ids = append(ids, rs.GetReplicasetId())
		}
	}
	if len(ids) == 0 {
		return "replicasets in service: none"
	}
	return "replicasets in service: " + strings.Join(ids, ", ")
}

// GroupMembers returns the instances of a replicaset that may still be in
// its raft group, and so lead it, by raft id: Members and those being
// expelled (target Expelled, current not yet). The leader of a replicaset
// whose instance is being expelled is often that instance: a call meant
// for the group's leader (a leadership transfer) asked only of Members
// never reaches it.
func (s *State) GroupMembers(replicasetID string) []*metapb.Instance {
	var out []*metapb.Instance
	for _, inst := range s.SortedInstances() {
		if inst.GetReplicasetId() == replicasetID && inst.GetCurrentGrade().GetVariant() != Expelled {
			out = append(out, inst)
		}
	}
	return out
}

// Members returns the non-expelled instances of a replicaset, by raft id.
func (s *State) Members(replicasetID string) []*metapb.Instance {
	var out []*metapb.Instance
	for _, inst := range s.SortedInstances() {
		if inst.GetReplicasetId() == replicasetID && !IsExpelled(inst) {
			out = append(out, inst)
		}
	}
	return out
}

// BucketCounts returns how many buckets each replicaset holds now.
func (s *State) BucketCounts() map[string]int {
	out := map[string]int{}
	for _, rs := range s.Buckets {
		if rs != "" {
			out[rs]++
		}
	}
	return out
}

// IsExpelled reports whether an instance's current or target grade is Expelled.
func IsExpelled(inst *metapb.Instance) bool {
	return inst.GetCurrentGrade().GetVariant() == Expelled || inst.GetTargetGrade().GetVariant() == Expelled
}

// CheckAddressFree refuses addr when it is the address of an instance
// that is not expelled, other than the one with uuid: two instances must
// never be reached at one address (the second would be a learner "at" the
// first). It returns nil when addr is free.
func (s *State) CheckAddressFree(addr, uuid string) *Refusal {
	for _, inst := range s.SortedInstances() {
		if inst.GetAddress() != addr || inst.GetUuid() == uuid || IsExpelled(inst) {
			continue
		}
		return refuse(CodeAlreadyExists,
			"advertise address %s belongs to instance %q (raft_id %d, %s), which is not expelled; "+
				"give this instance an address of its own (--listen, or --advertise), or expel %q first",
			addr, inst.GetInstanceId(), inst.GetRaftId(), FormatGrade(inst.GetCurrentGrade()), inst.GetInstanceId())
	}
	return nil
}

// BucketsLostByExpel is what expelling inst would give up: the buckets of
// its replicaset when it is the last instance of it not expelled (0 and ""
// when none).
func (s *State) BucketsLostByExpel(inst *metapb.Instance) (int, string) {
	rs := inst.GetReplicasetId()
	for _, m := range s.Members(rs) {
		if m.GetUuid() != inst.GetUuid() {
			return 0, ""
		}
	}
	if n := s.BucketCounts()[rs]; n > 0 {
		return n, rs
	}
	return 0, ""
}

// CheckExpelKeepsBuckets refuses the expel of the last instance of a
// replicaset that holds buckets: their data is only there, until a drain
// (weight 0) moves them elsewhere. When some of them are pinned, no drain
// can move those (the rebalancer never moves a pinned bucket): the
// refusal names them and the command that unpins them.
func (s *State) CheckExpelKeepsBuckets(inst *metapb.Instance) *Refusal {
	n, rs := s.BucketsLostByExpel(inst)
	if n == 0 {
		return nil
	}
	their, those := "their", "those "+Count(n, "bucket")
	if n == 1 {
		their, those = "its", "that bucket"
	}
	drain := func(first string) string {
		return fmt.Sprintf("drain %s%s while it runs (shardkit replicaset weight %s 0, then shardkit rebalance status --watch until it holds none; a stopped replicaset cannot be drained: start it again)", rs, first, rs)
	}
	how := drain(" first")
	if pinned := s.PinnedOn(rs); len(pinned) > 0 {
		are, them := "are", "them"
		if len(pinned) == 1 {
			are, them = "is", "it"
		}
		how = fmt.Sprintf("%s cannot be drained while %s on it %s pinned (the rebalancer never moves a pinned bucket): unpin %s first (%s), then %s",
			rs, Count(len(pinned), "bucket"), are, them, UnpinCommand(pinned), drain(""))
	}
	return refuse(CodeFailedPrecondition,
		"cannot expel %q: it is the last instance of replicaset %s, which holds %s, and %s data would be lost; "+
			"%s, "+
			"or add an instance to %s (shardkit run --replicaset-id %s ...) and expel %q once the new one is Online, "+
			"or rerun with --lose-buckets to give up the data of %s",
		inst.GetInstanceId(), rs, Count(n, "bucket"), their, how, rs, rs, inst.GetInstanceId(), those)
}

// CountNotExpelled counts the instances neither expelled nor being expelled.
func (s *State) CountNotExpelled() int {
	n := 0
	for _, inst := range s.Instances {
		if !IsExpelled(inst) {
			n++
		}
	}
	return n
}

func (s *State) putInstance(inst *metapb.Instance) { s.Instances[inst.GetInstanceId()] = inst }

func (s *State) putReplicaset(rs *metapb.Replicaset) { s.Replicasets[rs.GetReplicasetId()] = rs }

func (s *State) setProps(p *metapb.ClusterProperties) { s.Props = p }

func (s *State) editProps() *metapb.ClusterProperties {
	p := proto.CloneOf(s.Props)
	s.Props = p
	return p
}

func (s *State) setBuckets(first, last uint32, rs string) {
	if !s.own.buckets {
		s.Buckets = slices.Clone(s.Buckets)
		s.own.buckets = true
	}
	for i := first; i <= last; i++ {
		s.Buckets[i-1] = rs
	}
}
