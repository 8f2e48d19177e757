package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// fixture applies commands to a state machine over an in-memory Pebble,
// the way the engine does: one indexed batch per run, committed after.
type fixture struct {
	t     *testing.T
	db    *pebble.DB
	sm    *SM
	index uint64
	now   int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &fixture{t: t, db: db, sm: New(), index: 10, now: 1_000_000}
}

func (f *fixture) apply(c *metapb.Command) Result {
	f.t.Helper()
	f.index++
	if c.NowUnixMs == 0 {
		c.NowUnixMs = f.now
	}
	data, err := Encode(c)
	if err != nil {
		f.t.Fatal(err)
	}
	b := f.db.NewIndexedBatch()
	defer b.Close()
	out, err := f.sm.Apply(b, []multiraft.Entry{{Index: f.index, Term: 1, Cmd: data}})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		f.t.Fatal(err)
	}
	return out[0].(Result)
}

func (f *fixture) must(c *metapb.Command) Result {
	f.t.Helper()
	r := f.apply(c)
	if r.Err != nil {
		f.t.Fatalf("command %v refused: %v", c, r.Err)
	}
	return r
}

func (f *fixture) refused(c *metapb.Command, wantMsg string) {
	f.t.Helper()
	r := f.apply(c)
	var ref *Refusal
	if !errors.As(r.Err, &ref) {
		f.t.Fatalf("command %v: got %v, want a refusal containing %q", c, r.Err, wantMsg)
	}
	if !strings.Contains(ref.Msg, wantMsg) {
		f.t.Fatalf("refusal %q does not contain %q", ref.Msg, wantMsg)
	}
}

func joinReq(id, rs string, fd map[string]string) *metapb.JoinRequest {
	uuid := "uuid-" + id
	if id == "" {
		uuid = fmt.Sprintf("uuid-anon-%p", &fd)
	}
	return &metapb.JoinRequest{ClusterId: "c1", InstanceId: id, ReplicasetId: rs, AdvertiseAddress: uuid + ":3301", FailureDomain: fd, Uuid: uuid}
}

func bootCmd(rf uint32, first *metapb.JoinRequest) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_Boot{Boot: &metapb.Boot{
		Properties: &metapb.ClusterProperties{ClusterId: "c1", ClusterUuid: "cu", ReplicationFactor: rf},
		First:      first,
	}}}
}

func joinCmd(r *metapb.JoinRequest) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_Join{Join: &metapb.Join{Request: r}}}
}

func targetCmd(id string, v metapb.GradeVariant) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{InstanceId: id, Variant: v, Reason: "test"}}}
}

func currentCmd(inst *metapb.Instance, v metapb.GradeVariant) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_SetCurrentGrade{SetCurrentGrade: &metapb.SetCurrentGrade{
		InstanceId: inst.GetInstanceId(), Variant: v, ExpectedTarget: inst.GetTargetGrade()}}}
}

func TestBootAndJoinAssignFreshRaftIDs(t *testing.T) {
	f := newFixture(t)
	r := f.must(bootCmd(1, joinReq("", "", nil)))
	if r.Instance.GetRaftId() != 1 || r.Instance.GetInstanceId() != "i1" || r.Instance.GetReplicasetId() != "r1" {
		t.Fatalf("first instance %v, want raft_id 1, i1, r1", r.Instance)
	}
	st := f.sm.State()
	if len(st.Buckets) != DefaultBucketCount || st.Props.GetReplicationFactor() != 1 {
		t.Fatalf("props %v, %d buckets", st.Props, len(st.Buckets))
	}
	if rs := st.Replicasets["r1"]; rs.GetWeight() != 1 || rs.GetRaftGroupId() != 1 || rs.GetBootstrapInstanceId() != "i1" {
		t.Fatalf("first replicaset %v", rs)
	}
	r2 := f.must(joinCmd(joinReq("", "", nil)))
	if r2.Instance.GetRaftId() != 2 || r2.Instance.GetInstanceId() != "i2" || r2.Instance.GetReplicasetId() != "r2" {
		t.Fatalf("second instance %v, want raft_id 2, i2, r2 (RF 1)", r2.Instance)
	}
	if w := f.sm.State().Replicasets["r2"].GetWeight(); w != 0 {
		t.Fatalf("a later replicaset starts with weight %d, want 0", w)
	}
	if g := r2.Instance.GetCurrentGrade(); g.GetVariant() != Offline || r2.Instance.GetTargetGrade().GetVariant() != Offline {
		t.Fatalf("a joiner starts %v, want Offline/Offline", g)
	}
	if r2.Instance.GetCommitIndex() != f.index {
		t.Fatalf("record commit index %d, want the entry's %d", r2.Instance.GetCommitIndex(), f.index)
	}
	// raft ids are never reused, even after expel.
	f.must(targetCmd("i2", Expelled))
	inst := f.sm.State().Instance("i2")
	f.must(currentCmd(inst, Expelled))
	r3 := f.must(joinCmd(joinReq("i2", "", nil)))
	if r3.Instance.GetRaftId() != 3 {
		t.Fatalf("rejoin of an expelled name got raft_id %d, want 3", r3.Instance.GetRaftId())
	}
}

func TestJoinRefusals(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", map[string]string{"dc": "x"})))
	bad := joinReq("b", "", map[string]string{"dc": "y"})
	bad.ClusterId = "other"
	f.refused(joinCmd(bad), `cluster_id mismatch: instance has "other", cluster has "c1"`)
	dup := joinReq("a", "", map[string]string{"dc": "y"})
	dup.Uuid = "another-uuid"
	f.refused(joinCmd(dup), `instance "a" is already joined`)
	f.refused(joinCmd(joinReq("c", "", nil)), "missing failure domain names: dc")
	f.refused(joinCmd(joinReq("bad id!", "", map[string]string{"dc": "y"})), "invalid instance_id")
	noAddr := joinReq("d", "", map[string]string{"dc": "y"})
	noAddr.AdvertiseAddress = ""
	f.refused(joinCmd(noAddr), "advertise address")
	// Nothing was recorded by the refusals.
	if n := len(f.sm.State().Instances); n != 1 {
		t.Fatalf("%d instances after refused joins, want 1", n)
	}
}

func TestRejoinSameUUIDIsIdempotentWhileOffline(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	first := f.must(joinCmd(joinReq("b", "", nil))).Instance
	again := f.must(joinCmd(joinReq("b", "", nil))).Instance
	if again.GetRaftId() != first.GetRaftId() {
		t.Fatalf("rejoin got raft_id %d, first join %d", again.GetRaftId(), first.GetRaftId())
	}
	other := joinReq("b2", "", nil)
	other.Uuid = "uuid-b"
	f.refused(joinCmd(other), "different instance_id")
	f.must(targetCmd("b", Online))
	f.must(currentCmd(f.sm.State().Instance("b"), RaftSynced))
	f.refused(joinCmd(joinReq("b", "", nil)), "is not Offline")
}

func TestPlacementByReplicationFactorAndFailureDomain(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(2, joinReq("i1", "", map[string]string{"dc": "a"})))
	place := func(id, dc string) string {
		return f.must(joinCmd(joinReq(id, "", map[string]string{"dc": dc}))).Instance.GetReplicasetId()
	}
	// Same dc as i1: not with it.
	if rs := place("i2", "a"); rs != "r2" {
		t.Fatalf("i2 (dc a) placed in %s, want r2", rs)
	}
	// Another dc: fills r1.
	if rs := place("i3", "b"); rs != "r1" {
		t.Fatalf("i3 (dc b) placed in %s, want r1", rs)
	}
	if rs := place("i4", "b"); rs != "r2" {
		t.Fatalf("i4 (dc b) placed in %s, want r2", rs)
	}
	// Both full: a new one, named after i5.
	if rs := place("i5", "c"); rs != "r5" {
		t.Fatalf("i5 placed in %s, want r5", rs)
	}
	// An explicit replicaset wins, even when full.
	if rs := f.must(joinCmd(joinReq("i6", "r1", map[string]string{"dc": "a"}))).Instance.GetReplicasetId(); rs != "r1" {
		t.Fatalf("explicit r1 placed in %s", rs)
	}
	if n := len(f.sm.State().Members("r1")); n != 3 {
		t.Fatalf("r1 has %d members, want 3", n)
	}
}

func TestGradeIncarnations(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	inst := f.must(targetCmd("a", Online)).Instance
	if g := inst.GetTargetGrade(); g.GetVariant() != Online || g.GetIncarnation() != 1 {
		t.Fatalf("target after Online: %v, want Online(1)", g)
	}
	inst = f.must(currentCmd(inst, RaftSynced)).Instance
	if g := inst.GetCurrentGrade(); g.GetVariant() != RaftSynced || g.GetIncarnation() != 1 {
		t.Fatalf("current %v, want RaftSynced(1): copied from the target", g)
	}
	f.must(currentCmd(inst, Online))
	inst = f.must(targetCmd("a", Offline)).Instance
	if g := inst.GetTargetGrade(); g.GetVariant() != Offline || g.GetIncarnation() != 1 {
		t.Fatalf("target Offline: %v, want Offline(1): copied from the current", g)
	}
	f.must(currentCmd(inst, Offline))
	inst = f.must(targetCmd("a", Online)).Instance
	if g := inst.GetTargetGrade(); g.GetIncarnation() != 2 {
		t.Fatalf("restart: target %v, want Online(2)", g)
	}
	// A decision made on an older target is dropped.
	stale := &metapb.Command{Op: &metapb.Command_SetCurrentGrade{SetCurrentGrade: &metapb.SetCurrentGrade{
		InstanceId: "a", Variant: Online, ExpectedTarget: &metapb.Grade{Variant: Online, Incarnation: 1}}}}
	f.refused(stale, "target grade is Online(2), not Online(1)")
	// Expelled is terminal (another instance keeps the cluster alive).
	f.must(joinCmd(joinReq("b", "", nil)))
	f.must(targetCmd("a", Expelled))
	f.refused(targetCmd("a", Online), "is being expelled")
	f.must(currentCmd(f.sm.State().Instance("a"), Expelled))
	f.refused(targetCmd("a", Offline), "cannot update expelled instance")
	f.refused(targetCmd("a", RaftSynced), "cannot be requested")
}

func leaseCmd(op string, name, holder string, ticket uint64, ttl int64, now int64) *metapb.Command {
	c := &metapb.Command{NowUnixMs: now}
	switch op {
	case "acquire":
		c.Op = &metapb.Command_AcquireLease{AcquireLease: &metapb.AcquireLease{Name: name, Holder: holder, TtlMs: ttl}}
	case "renew":
		c.Op = &metapb.Command_RenewLease{RenewLease: &metapb.RenewLease{Name: name, Holder: holder, Ticket: ticket, TtlMs: ttl}}
	case "release":
		c.Op = &metapb.Command_ReleaseLease{ReleaseLease: &metapb.ReleaseLease{Name: name, Holder: holder, Ticket: ticket}}
	}
	return c
}

func TestLeasesFenceWithGrowingTickets(t *testing.T) {
	f := newFixture(t)
	f.now = 1
	f.must(bootCmd(1, joinReq("a", "", nil)))
	a := f.must(leaseCmd("acquire", "shard-1", "A", 0, 1000, 5000))
	b := f.must(leaseCmd("acquire", "shard-1", "B", 0, 1000, 5001))
	if !a.Granted || b.Granted || b.Lease.GetHolder() != "A" {
		t.Fatalf("race: A granted=%v, B granted=%v (holder %q): exactly A must win", a.Granted, b.Granted, b.Lease.GetHolder())
	}
	// Renew with the right ticket works; with a wrong one it does not.
	if r := f.must(leaseCmd("renew", "shard-1", "A", a.Lease.GetTicket(), 1000, 5500)); !r.Granted || r.Lease.GetExpiresUnixMs() != 6500 {
		t.Fatalf("renew: %+v", r)
	}
	if r := f.must(leaseCmd("renew", "shard-1", "A", a.Lease.GetTicket()+1, 1000, 5600)); r.Granted {
		t.Fatal("renew with a wrong ticket succeeded")
	}
	// A stamp from the past does not move the clock back: B still cannot take it.
	if r := f.must(leaseCmd("acquire", "shard-1", "B", 0, 1000, 100)); r.Granted {
		t.Fatal("a stale clock stamp let B take a held lease")
	}
	// After expiry B gets it with a larger ticket; A's late renewal fails.
	b2 := f.must(leaseCmd("acquire", "shard-1", "B", 0, 1000, 6501))
	if !b2.Granted || b2.Lease.GetTicket() <= a.Lease.GetTicket() {
		t.Fatalf("after expiry B: %+v, want granted with ticket > %d", b2, a.Lease.GetTicket())
	}
	if r := f.must(leaseCmd("renew", "shard-1", "A", a.Lease.GetTicket(), 1000, 6502)); r.Granted {
		t.Fatal("the old holder renewed after losing the lease")
	}
	// Release keeps the ticket growing.
	f.must(leaseCmd("release", "shard-1", "B", b2.Lease.GetTicket(), 0, 6600))
	a3 := f.must(leaseCmd("acquire", "shard-1", "A", 0, 1000, 6601))
	if !a3.Granted || a3.Lease.GetTicket() != b2.Lease.GetTicket()+1 {
		t.Fatalf("after release: %+v, want ticket %d", a3, b2.Lease.GetTicket()+1)
	}
	// A fenced write: the value changes only with a current, unexpired ticket.
	setValue := func(holder string, ticket uint64, v string, now int64) Result {
		return f.must(&metapb.Command{NowUnixMs: now, Op: &metapb.Command_ReleaseLease{ReleaseLease: &metapb.ReleaseLease{
			Name: "shard-1", Holder: holder, Ticket: ticket, SetValue: true, Value: []byte(v)}}})
	}
	if r := setValue("A", a3.Lease.GetTicket(), "state-1", 7700); r.Granted {
		t.Fatal("an expired holder wrote the lease's value")
	}
	a4 := f.must(leaseCmd("acquire", "shard-1", "A", 0, 1000, 7800))
	if r := setValue("A", a4.Lease.GetTicket()-1, "state-x", 7900); r.Granted {
		t.Fatal("a stale ticket wrote the lease's value")
	}
	if r := setValue("A", a4.Lease.GetTicket(), "state-2", 7900); !r.Granted || string(r.Lease.GetValue()) != "state-2" || r.Lease.GetHolder() != "" {
		t.Fatalf("a current holder's release with a value: %+v", r)
	}
	b4 := f.must(leaseCmd("acquire", "shard-1", "B", 0, 1000, 8000))
	if string(b4.Lease.GetValue()) != "state-2" {
		t.Fatalf("the value did not survive a new grant: %q", b4.Lease.GetValue())
	}
	f.refused(leaseCmd("acquire", "", "A", 0, 1000, 7000), "lease name is empty")
	f.refused(leaseCmd("acquire", "x", "A", 0, 0, 7000), "ttl")
}

func TestBucketsAndShardingVersion(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	v0 := f.sm.State().Props.GetShardingVersion()
	f.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}})
	st := f.sm.State()
	if st.BucketCounts()["r1"] != DefaultBucketCount || !st.Props.GetBucketsBootstrapped() || st.Props.GetShardingVersion() != v0+1 {
		t.Fatalf("after assign: counts %v, props %v", st.BucketCounts(), st.Props)
	}
	if st.Props.GetBucketBootstrapReplicaset() != "r1" {
		t.Fatalf("bootstrap replicaset %q, want r1", st.Props.GetBucketBootstrapReplicaset())
	}
	f.refused(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}}, "already bootstrapped")
}

func TestBucketBootstrapCoversEveryBucketOnce(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	f.refused(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 0, Last: 5, ReplicasetId: "r1"}}}}}, "assigns all of [1, 3000]")
	f.refused(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r9"}}}}}, "no replicaset")
	if f.sm.State().Props.GetBucketsBootstrapped() {
		t.Fatal("a refused bootstrap bootstrapped the buckets")
	}
}

func TestStateSurvivesReloadAndSnapshot(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(2, joinReq("a", "", map[string]string{"dc": "x"})))
	f.must(joinCmd(joinReq("b", "", map[string]string{"dc": "y"})))
	f.must(leaseCmd("acquire", "l", "A", 0, 1000, 9000))
	f.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}})
	f.must(&metapb.Command{Op: &metapb.Command_CreateSpace{CreateSpace: &metapb.CreateSpace{Space: testSpace("offers")}}})
	want := f.sm.State()

	check := func(what string, got *State) {
		t.Helper()
		if got.Index != want.Index || got.Clock != want.Clock || len(got.Instances) != 2 ||
			got.Instance("b").GetReplicasetId() != "r1" || got.Leases["l"].GetTicket() != 1 ||
			got.BucketCounts()["r1"] != DefaultBucketCount || got.Spaces["offers"].GetId() != 1 || got.Props.GetSchemaVersion() != 1 || got.Props.GetFailureDomainKeys()[0] != "dc" {
			t.Fatalf("%s: state differs: %+v", what, got)
		}
	}
	reloaded := New()
	if err := reloaded.Load(f.db); err != nil {
		t.Fatal(err)
	}
	check("reload", reloaded.State())

	var buf bytes.Buffer
	if err := f.sm.Snapshot(context.Background(), f.db, &buf); err != nil {
		t.Fatal(err)
	}
	other := newFixture(t)
	other.must(bootCmd(1, joinReq("zzz", "", nil))) // state to be replaced
	if err := other.sm.Restore(context.Background(), other.db, &buf); err != nil {
		t.Fatal(err)
	}
	check("restore", other.sm.State())
	if other.sm.State().Instance("zzz") != nil {
		t.Fatal("restore kept an instance of the replaced state")
	}
}

func FuzzApply(f *testing.F) {
	seed, _ := Encode(joinCmd(joinReq("x", "", nil)))
	f.Add(seed)
	f.Add([]byte{0x52, 0x03, 0x0a, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		db, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		sm := New()
		b := db.NewIndexedBatch()
		defer b.Close()
		bootData, _ := Encode(bootCmd(1, joinReq("a", "", nil)))
		out, err := sm.Apply(b, []multiraft.Entry{{Index: 1, Cmd: bootData}, {Index: 2, Cmd: data}})
		if err != nil {
			t.Fatalf("a command made apply fail: %v", err)
		}
		if len(out) != 2 {
			t.Fatalf("%d results", len(out))
		}
	})
}

// A join that reaches the bootstrap instance before the cluster's first
// entry is applied is "not yet", not "never": the joiner retries.
func TestJoinBeforeBootIsRetryable(t *testing.T) {
	f := newFixture(t)
	r := f.apply(joinCmd(joinReq("a", "", nil)))
	var ref *Refusal
	if !errors.As(r.Err, &ref) || ref.Code != CodeUnavailable {
		t.Fatalf("join before boot: %v, want a CodeUnavailable refusal", r.Err)
	}
}

// A Boot whose first instance is refused writes nothing: the cluster is not
// left booted without an instance, and a corrected Boot succeeds. A second
// Boot (a restart that re-proposes it) is refused and changes nothing.
func TestRefusedBootLeavesNothing(t *testing.T) {
	f := newFixture(t)
	bad := joinReq("i 1", "", nil)
	f.refused(bootCmd(1, bad), `invalid instance_id "i 1"`)
	if f.sm.State().Booted() {
		t.Fatal("a refused Boot left the cluster booted")
	}
	other := joinReq("x", "", nil)
	other.ClusterId = "c2"
	f.refused(bootCmd(1, other), `cluster_id mismatch`)
	if f.sm.State().Booted() {
		t.Fatal("a refused Boot left the cluster booted")
	}
	first := f.must(bootCmd(1, joinReq("i1", "", nil)))
	f.refused(bootCmd(1, joinReq("i9", "", nil)), "already bootstrapped")
	st := f.sm.State()
	if len(st.Instances) != 1 || st.Instance("i1").GetUuid() != first.Instance.GetUuid() {
		t.Fatalf("after a second Boot: instances %v", st.Instances)
	}
}

// The last instance is never expelled, even when two expels race: the
// state machine judges the second against the first.
func TestLastInstanceIsNeverExpelled(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	f.refused(targetCmd("a", Expelled), `cannot expel "a": it is the last instance of the cluster`)
	f.must(joinCmd(joinReq("b", "", nil)))
	f.must(targetCmd("a", Expelled))
	f.refused(targetCmd("b", Expelled), `cannot expel "b": it is the last instance of the cluster`)
	f.must(targetCmd("a", Expelled)) // idempotent
}

// A joiner whose advertise address is a live instance's is refused at
// apply time, naming that instance; so is a rejoin or an address change
// onto it. Once that instance is expelled, the address is free again.
func TestAdvertiseAddressOfALiveInstanceIsRefused(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("i1", "", nil)))
	taken := f.sm.State().Instance("i1").GetAddress()
	thief := joinReq("i2", "", nil)
	thief.AdvertiseAddress = taken
	f.refused(joinCmd(thief), `advertise address `+taken+` belongs to instance "i1" (raft_id 1`)
	if f.sm.State().Instance("i2") != nil || f.sm.State().Props.GetMaxRaftId() != 1 {
		t.Fatal("the refused join was recorded")
	}
	f.must(joinCmd(joinReq("i2", "", nil)))
	f.refused(&metapb.Command{Op: &metapb.Command_SetAddress{SetAddress: &metapb.SetAddress{InstanceId: "i2", Address: taken}}},
		`belongs to instance "i1"`)
	moved := joinReq("i2", "", nil)
	moved.AdvertiseAddress = taken
	f.refused(joinCmd(moved), `belongs to instance "i1"`)
	// Expelled, i1 no longer owns its address.
	f.must(targetCmd("i1", Expelled))
	thief.InstanceId, thief.Uuid = "i3", "uuid-i3"
	if got := f.must(joinCmd(thief)).Instance.GetAddress(); got != taken {
		t.Fatalf("joined at %s, want %s", got, taken)
	}
}

// The last instance of a replicaset that holds buckets is not expelled
// unless the command says to lose them; with another member, it is.
func TestExpelOfAReplicasetsLastInstanceKeepsItsBuckets(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("i1", "", nil)))
	f.must(joinCmd(joinReq("i2", "", nil)))
	f.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}})
	f.refused(targetCmd("i1", Expelled), `cannot expel "i1": it is the last instance of replicaset r1, which holds 3000 buckets`)
	if v := f.sm.State().Instance("i1").GetTargetGrade().GetVariant(); v == Expelled {
		t.Fatal("the refused expel was recorded")
	}
	// r2 holds none: its last instance may go.
	f.must(targetCmd("i2", Expelled))
	// With another member of r1, i1 may go too.
	f.must(joinCmd(joinReq("i3", "r1", nil)))
	f.must(targetCmd("i1", Expelled))
	// i3 is now r1's last: only with lose_buckets.
	f.must(joinCmd(joinReq("i4", "", nil)))
	f.refused(targetCmd("i3", Expelled), "--lose-buckets")
	lose := targetCmd("i3", Expelled)
	lose.GetSetTargetGrade().LoseBuckets = true
	f.must(lose)
	if n, _ := f.sm.State().BucketsLostByExpel(f.sm.State().Instance("i4")); n != 0 {
		t.Fatalf("i4's replicaset holds no buckets, yet its expel would lose %d", n)
	}
}

// The expel of a replicaset's last instance, refused while it holds
// buckets, says when pins keep a drain from ever emptying it, and names
// the command that unpins them; one bucket is "1 bucket".
func TestExpelRefusalNamesThePinsThatHoldADrain(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("i1", "", nil)))
	f.must(joinCmd(joinReq("i2", "", nil)))
	f.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: DefaultBucketCount, ReplicasetId: "r1"}}}}})
	f.must(moveCmd(5, "r2"))
	f.must(phaseCmd(5, 2, metapb.Move_PHASE_COPY))
	f.must(phaseCmd(5, 2, metapb.Move_PHASE_CLEANUP))
	f.must(finishCmd(5, 2))
	const unpinned = `cannot expel "i2": it is the last instance of replicaset r2, which holds 1 bucket, and its data would be lost; ` +
		"drain r2 first while it runs (shardkit replicaset weight r2 0, then shardkit rebalance status --watch until it holds none; a stopped replicaset cannot be drained: start it again), " +
		`or add an instance to r2 (shardkit run --replicaset-id r2 ...) and expel "i2" once the new one is Online, or rerun with --lose-buckets to give up the data of that bucket`
	f.refused(targetCmd("i2", Expelled), unpinned)
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 5, Pinned: true}}})
	f.refused(targetCmd("i2", Expelled), `which holds 1 bucket, and its data would be lost; `+
		"r2 cannot be drained while 1 bucket on it is pinned (the rebalancer never moves a pinned bucket): unpin it first (shardkit bucket unpin 5), then drain r2 while it runs (")
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 3, Pinned: true}}})
	f.must(&metapb.Command{Op: &metapb.Command_PinBucket{PinBucket: &metapb.PinBucket{Bucket: 1, Pinned: true}}})
	f.refused(targetCmd("i1", Expelled), "which holds 2999 buckets, and their data would be lost; "+
		"r1 cannot be drained while 2 buckets on it are pinned (the rebalancer never moves a pinned bucket): unpin them first (shardkit bucket unpin 1 3), then drain r1")
	f.refused(targetCmd("i1", Expelled), "give up the data of those 2999 buckets")
}

// A new replicaset is named after the instance i<N> it is made for (raft
// ids follow the join order, so --instance-id i2 used to get raft_id 3 and
// replicaset r3 when i3 joined first); other ids take the next number.
func TestNewReplicasetIsNamedAfterItsInstance(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("i1", "", nil)))
	for _, tc := range []struct{ id, want string }{
		{"i3", "r3"}, // joined before i2: raft_id 2
		{"i2", "r2"},
		{"alpha", "r4"},
		{"i4", "r5"}, // r4 is alpha's
		{"i07", "r6"},
	} {
		if got := f.must(joinCmd(joinReq(tc.id, "", nil))).Instance.GetReplicasetId(); got != tc.want {
			t.Errorf("%s placed in %s, want %s", tc.id, got, tc.want)
		}
	}
	// An expelled replicaset's name is not given to a new instance by its number.
	f.must(targetCmd("i2", Expelled))
	f.must(currentCmd(f.sm.State().Instance("i2"), Expelled))
	f.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: "r2", Expelled: new(true)}}})
	again := joinReq("i2", "", nil)
	again.Uuid, again.AdvertiseAddress = "uuid-i2-again", "uuid-i2-again:3301"
	if got := f.must(joinCmd(again)).Instance.GetReplicasetId(); got == "r2" {
		t.Errorf("a new i2 was placed in the expelled r2")
	}
}
