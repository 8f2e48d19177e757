package meta

import (
	"crypto/sha1"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/sharding"
)

// DefaultBucketCount is the number of buckets of a new cluster.
const DefaultBucketCount = 3000

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidID reports whether s may be an instance, replicaset or cluster id.
func ValidID(s string) bool { return idPattern.MatchString(s) }

func (t *txn) boot(b *metapb.Boot) Result {
	if t.s.Booted() {
		return Result{Err: refuse(CodeFailedPrecondition, "the cluster %q is already bootstrapped", t.s.Props.GetClusterId())}
	}
	p := proto.CloneOf(b.GetProperties())
	if !ValidID(p.GetClusterId()) {
		return Result{Err: refuse(CodeInvalid, "invalid cluster_id %q", p.GetClusterId())}
	}
	if p.GetReplicationFactor() == 0 {
		p.ReplicationFactor = 1
	}
	if p.GetBucketCount() == 0 {
		p.BucketCount = DefaultBucketCount
	}
	if p.GetBucketCount() > sharding.MaxBucketCount {
		return Result{Err: refuse(CodeInvalid, "bucket_count %d is above the limit %d", p.GetBucketCount(), sharding.MaxBucketCount)}
	}
	// Refuse before writing anything: a refused command must leave no
	// half-booted cluster behind.
	first := b.GetFirst()
	if first.GetClusterId() != p.GetClusterId() {
		return Result{Err: refuse(CodeFailedPrecondition, "cluster_id mismatch: instance has %q, cluster has %q", first.GetClusterId(), p.GetClusterId())}
	}
	if err := validateJoin(first); err != nil {
		return Result{Err: err}
	}
	p.MaxRaftId, p.MaxReplicasetNumber, p.MaxRaftGroupId = 0, 0, 0
	t.putProps(p)
	t.s.Buckets = make([]string, p.GetBucketCount())
	return t.join(first)
}

func (t *txn) join(req *metapb.JoinRequest) Result {
	p := t.s.Props
	if req.GetClusterId() != p.GetClusterId() {
		return Result{Err: refuse(CodeFailedPrecondition, "cluster_id mismatch: instance has %q, cluster has %q", req.GetClusterId(), p.GetClusterId())}
	}
	if err := validateJoin(req); err != nil {
		return Result{Err: err}
	}
	if existing := t.s.InstanceByUUID(req.GetUuid()); existing != nil {
		return t.rejoin(existing, req)
	}
	if id := req.GetInstanceId(); id != "" {
		if old := t.s.Instance(id); old != nil && !IsExpelled(old) {
			return Result{Err: refuse(CodeAlreadyExists, "instance %q is already joined (raft_id %d); choose another --instance-id or expel it first", id, old.GetRaftId())}
		}
		if old := t.s.Instance(id); old != nil && old.GetCurrentGrade().GetVariant() != Expelled {
			return Result{Err: refuse(CodeFailedPrecondition, "instance %q is being expelled; wait until it is Expelled", id)}
		}
	}
	if err := t.s.CheckAddressFree(req.GetAdvertiseAddress(), req.GetUuid()); err != nil {
		return Result{Err: err}
	}
	var missing []string
	for _, k := range p.GetFailureDomainKeys() {
		if _, ok := req.GetFailureDomain()[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Result{Err: refuse(CodeInvalid, "missing failure domain names: %s (the cluster uses them; pass them with --failure-domain)", strings.Join(missing, ", "))}
	}

	np := t.s.editProps()
	np.MaxRaftId++
	raftID := np.GetMaxRaftId()
	for k := range req.GetFailureDomain() {
		if !slices.Contains(np.FailureDomainKeys, k) {
			np.FailureDomainKeys = append(np.FailureDomainKeys, k)
		}
	}
	slices.Sort(np.FailureDomainKeys)

	id := req.GetInstanceId()
	if id == "" {
		id = fmt.Sprintf("i%d", raftID)
		for n := 2; t.s.Instance(id) != nil && !IsExpelled(t.s.Instance(id)); n++ {
			id = fmt.Sprintf("i%d-%d", raftID, n)
		}
	}
	rs := t.placeReplicaset(np, req, id)
	t.putProps(np)
	inst := &metapb.Instance{
		InstanceId:          id,
		RaftId:              raftID,
		Uuid:                req.GetUuid(),
		ReplicasetId:        rs.GetReplicasetId(),
		ReplicasetUuid:      rs.GetUuid(),
		Address:             req.GetAdvertiseAddress(),
		HttpAddress:         req.GetHttpAddress(),
		FailureDomain:       maps.Clone(req.GetFailureDomain()),
		CurrentGrade:        &metapb.Grade{Variant: Offline},
		TargetGrade:         &metapb.Grade{Variant: Offline},
		TargetReason:        "join",
		TargetChangedUnixMs: t.now,
	}
	t.putInstance(inst)
	return Result{Instance: inst}
}

// rejoin answers a join from an instance that is already recorded (its
// earlier join's answer was lost): the same record, if nothing differs.
func (t *txn) rejoin(existing *metapb.Instance, req *metapb.JoinRequest) Result {
	id := existing.GetInstanceId()
	switch {
	case IsExpelled(existing):
		return Result{Err: refuse(CodeExpelled, "instance %q (uuid %s) is expelled from the cluster", id, existing.GetUuid())}
	case existing.GetCurrentGrade().GetVariant() != Offline || existing.GetTargetGrade().GetVariant() != Offline:
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q (uuid %s) is already joined and is not Offline but %s", id, existing.GetUuid(), FormatGrade(existing.GetCurrentGrade()))}
	case req.GetInstanceId() != "" && req.GetInstanceId() != id:
		return Result{Err: refuse(CodeFailedPrecondition, "instance with uuid %s already exists with a different instance_id %q", existing.GetUuid(), id)}
	case req.GetReplicasetId() != "" && req.GetReplicasetId() != existing.GetReplicasetId():
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q already exists with a different replicaset_id %q", id, existing.GetReplicasetId())}
	case !maps.Equal(req.GetFailureDomain(), existing.GetFailureDomain()):
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q already exists with a different failure_domain", id)}
	}
	if req.GetAdvertiseAddress() != existing.GetAddress() || req.GetHttpAddress() != existing.GetHttpAddress() {
		if err := t.s.CheckAddressFree(req.GetAdvertiseAddress(), existing.GetUuid()); err != nil {
			return Result{Err: err}
		}
		inst := proto.CloneOf(existing)
		inst.Address, inst.HttpAddress = req.GetAdvertiseAddress(), req.GetHttpAddress()
		t.putInstance(inst)
		return Result{Instance: inst}
	}
	return Result{Instance: existing}
}

func validateJoin(req *metapb.JoinRequest) *Refusal {
	if id := req.GetInstanceId(); id != "" && !ValidID(id) {
		return refuse(CodeInvalid, "invalid instance_id %q: use 1-64 letters, digits, '_', '.' or '-'", id)
	}
	if id := req.GetReplicasetId(); id != "" && !ValidID(id) {
		return refuse(CodeInvalid, "invalid replicaset_id %q: use 1-64 letters, digits, '_', '.' or '-'", id)
	}
	if req.GetUuid() == "" {
		return refuse(CodeInvalid, "join request without an instance uuid")
	}
	if req.GetAdvertiseAddress() == "" {
		return refuse(CodeInvalid, "join request without an advertise address")
	}
	for k, v := range req.GetFailureDomain() {
		if k == "" || v == "" {
			return refuse(CodeInvalid, "failure domain %q=%q: names and values must not be empty", k, v)
		}
	}
	return nil
}

// placeReplicaset chooses (creating if needed) the replicaset of a joiner:
// an explicit replicaset_id wins; otherwise the first replicaset (by id)
// with fewer members than the replication factor and no failure-domain
// value in common with the joiner; otherwise a new one.
func (t *txn) placeReplicaset(p *metapb.ClusterProperties, req *metapb.JoinRequest, instanceID string) *metapb.Replicaset {
	if id := req.GetReplicasetId(); id != "" {
		if rs := t.s.Replicasets[id]; rs != nil && !rs.GetExpelled() {
			return rs
		}
		return t.newReplicaset(p, id, instanceID)
	}
	for _, rs := range t.s.SortedReplicasets() {
		if rs.GetExpelled() {
			continue
		}
		members := t.s.Members(rs.GetReplicasetId())
		if uint32(len(members)) >= p.GetReplicationFactor() {
			continue
		}
		if !sharesFailureDomain(members, req.GetFailureDomain()) {
			return rs
		}
	}
	// A new replicaset is named after the instance it is made for, when
	// that one is i<N>: i3 is in r3 whatever order the instances joined in
	// (raft ids follow the join order). A name some replicaset ever had is
	// not taken this way: buckets it was left with must not pass on.
	if n, ok := instanceNumber(instanceID); ok {
		if id := fmt.Sprintf("r%d", n); t.s.Replicasets[id] == nil {
			p.MaxReplicasetNumber = max(p.GetMaxReplicasetNumber(), n)
			return t.newReplicaset(p, id, instanceID)
		}
	}
	for {
		p.MaxReplicasetNumber++
		id := fmt.Sprintf("r%d", p.GetMaxReplicasetNumber())
		if rs := t.s.Replicasets[id]; rs == nil || rs.GetExpelled() {
			return t.newReplicaset(p, id, instanceID)
		}
	}
}

// instanceNumber is N of an instance id i<N> (N from 1, no leading zero).
func instanceNumber(id string) (uint64, bool) {
	digits, ok := strings.CutPrefix(id, "i")
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

func sharesFailureDomain(members []*metapb.Instance, fd map[string]string) bool {
	for _, m := range members {
		for k, v := range fd {
			if mv, ok := m.GetFailureDomain()[k]; ok && strings.EqualFold(mv, v) {
				return true
			}
		}
	}
	return false
}

func (t *txn) newReplicaset(p *metapb.ClusterProperties, id, instanceID string) *metapb.Replicaset {
	p.MaxRaftGroupId++
	var weight uint32
	if len(t.s.Replicasets) == 0 {
		weight = 1 // the first replicaset: it takes every bucket
	}
	rs := &metapb.Replicaset{
		ReplicasetId:        id,
		Uuid:                derivedUUID(p.GetClusterUuid(), "replicaset/"+id+fmt.Sprintf("/%d", p.GetMaxRaftGroupId())),
		RaftGroupId:         p.GetMaxRaftGroupId(),
		Weight:              weight,
		BootstrapInstanceId: instanceID,
	}
	t.putReplicaset(rs)
	return rs
}

// derivedUUID makes a name-based (version 5 style) UUID, so that every
// member derives the same one.
func derivedUUID(namespace, name string) string {
	h := sha1.Sum([]byte(namespace + "\x00" + name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func (t *txn) setTargetGrade(c *metapb.SetTargetGrade) Result {
	inst := t.s.Instance(c.GetInstanceId())
	if inst == nil {
		return Result{Err: refuse(CodeNotFound, "no instance %q in the cluster", c.GetInstanceId())}
	}
	if c.GetUuid() != "" && c.GetUuid() != inst.GetUuid() {
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q has uuid %s, not %s", inst.GetInstanceId(), inst.GetUuid(), c.GetUuid())}
	}
	v := c.GetVariant()
	switch v {
	case Online, Offline, Expelled:
	default:
		return Result{Err: refuse(CodeInvalid, "target grade %s cannot be requested (only Online, Offline or Expelled)", VariantName(v))}
	}
	if inst.GetCurrentGrade().GetVariant() == Expelled {
		return Result{Err: refuse(CodeExpelled, "cannot update expelled instance %q", inst.GetInstanceId())}
	}
	if inst.GetTargetGrade().GetVariant() == Expelled && v != Expelled {
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q is being expelled; its target cannot change", inst.GetInstanceId())}
	}
	if v == Expelled && inst.GetTargetGrade().GetVariant() == Expelled {
		return Result{Instance: inst} // expel is idempotent
	}
	if v == Expelled && t.s.CountNotExpelled() <= 1 {
		// Checked here, not only by the Expel handler: two expels
		// racing for the last two instances must not both pass.
		return Result{Err: refuse(CodeFailedPrecondition, "cannot expel %q: it is the last instance of the cluster", inst.GetInstanceId())}
	}
	if v == Expelled && !c.GetLoseBuckets() {
		// Also checked here: two expels racing for a replicaset's last two
		// instances must not strand its buckets.
		if err := t.s.CheckExpelKeepsBuckets(inst); err != nil {
			return Result{Err: err}
		}
	}
	n := proto.CloneOf(inst)
	n.TargetGrade = newTarget(inst, v)
	n.TargetReason = c.GetReason()
	n.TargetChangedUnixMs = t.now
	t.putInstance(n)
	return Result{Instance: n}
}

func (t *txn) setCurrentGrade(c *metapb.SetCurrentGrade) Result {
	inst := t.s.Instance(c.GetInstanceId())
	if inst == nil {
		return Result{Err: refuse(CodeNotFound, "no instance %q in the cluster", c.GetInstanceId())}
	}
	if !SameGrade(inst.GetTargetGrade(), c.GetExpectedTarget()) {
		return Result{Err: refuse(CodeFailedPrecondition, "instance %q: target grade is %s, not %s any more",
			inst.GetInstanceId(), FormatGrade(inst.GetTargetGrade()), FormatGrade(c.GetExpectedTarget()))}
	}
	if inst.GetCurrentGrade().GetVariant() == Expelled {
		return Result{Err: refuse(CodeFailedPrecondition, "cannot update expelled instance %q", inst.GetInstanceId())}
	}
	n := proto.CloneOf(inst)
	n.CurrentGrade = newCurrent(inst, c.GetVariant())
	t.putInstance(n)
	return Result{Instance: n}
}

func (t *txn) setReplicaset(c *metapb.SetReplicaset) Result {
	rs := t.s.Replicasets[c.GetReplicasetId()]
	if rs == nil {
		return Result{Err: refuse(CodeNotFound, "no replicaset %q in the cluster (%s)", c.GetReplicasetId(), t.s.InService())}
	}
	n := proto.CloneOf(rs)
	if c.Weight != nil {
		n.Weight = c.GetWeight()
	}
	if c.GetWeightByOperator() {
		if c.Weight == nil {
			return Result{Err: refuse(CodeInvalid, "replicaset %s: weight_by_operator without a weight", c.GetReplicasetId())}
		}
		n.WeightByOperator = true
	}
	if c.LeaderInstanceId != nil {
		n.LeaderInstanceId = c.GetLeaderInstanceId()
	}
	if c.Expelled != nil {
		n.Expelled = c.GetExpelled()
	}
	if c.Locked != nil {
		n.Locked = c.GetLocked()
	}
	t.putReplicaset(n)
	if c.Weight != nil && rs.GetWeight() != n.GetWeight() {
		p := t.s.editProps()
		p.ShardingVersion++
		t.putProps(p)
	}
	return Result{}
}

// assignBuckets is the bootstrap of buckets (K12 step 5): once per
// cluster, every bucket goes to one replicaset, which then creates their
// records in its own log. Later placement changes are bucket moves.
func (t *txn) assignBuckets(c *metapb.AssignBuckets) Result {
	n := t.s.Props.GetBucketCount()
	if t.s.Props.GetBucketsBootstrapped() {
		return Result{Err: refuse(CodeFailedPrecondition, "buckets are already bootstrapped (to %s); they change place only by bucket moves", t.s.Props.GetBucketBootstrapReplicaset())}
	}
	if rs := c.GetRanges(); len(rs) != 1 || rs[0].GetFirst() != 1 || rs[0].GetLast() != n {
		return Result{Err: refuse(CodeInvalid, "the bootstrap of buckets assigns all of [1, %d] to one replicaset", n)}
	}
	for _, r := range c.GetRanges() {
		if r.GetFirst() < 1 || r.GetLast() > n || r.GetFirst() > r.GetLast() {
			return Result{Err: refuse(CodeInvalid, "bucket range [%d, %d] is outside [1, %d]", r.GetFirst(), r.GetLast(), n)}
		}
		if rs := t.s.Replicasets[r.GetReplicasetId()]; rs == nil || rs.GetExpelled() {
			return Result{Err: refuse(CodeNotFound, "no replicaset %q to assign buckets to", r.GetReplicasetId())}
		}
	}
	for _, r := range c.GetRanges() {
		t.putBuckets(r.GetFirst(), r.GetLast(), r.GetReplicasetId())
	}
	p := t.s.editProps()
	p.ShardingVersion++
	p.BucketsBootstrapped = true
	p.BucketBootstrapReplicaset = c.GetRanges()[0].GetReplicasetId()
	t.putProps(p)
	return Result{}
}

func (t *txn) setAddress(c *metapb.SetAddress) Result {
	inst := t.s.Instance(c.GetInstanceId())
	if inst == nil {
		return Result{Err: refuse(CodeNotFound, "no instance %q in the cluster", c.GetInstanceId())}
	}
	if err := t.s.CheckAddressFree(c.GetAddress(), inst.GetUuid()); err != nil {
		return Result{Err: err}
	}
	n := proto.CloneOf(inst)
	n.Address, n.HttpAddress = c.GetAddress(), c.GetHttpAddress()
	t.putInstance(n)
	return Result{Instance: n}
}
