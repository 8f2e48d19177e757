package replicaset

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// fixture applies commands to one replicaset state machine over an
// in-memory database, as the engine would: one indexed batch per run,
// committed after Apply.
type fixture struct {
	t     *testing.T
	db    *pebble.DB
	sm    *SM
	index uint64
	now   int64
	// tables: the tuples of copy entries go as their tables
	// (CopyChunks.tables), as a leader builds them, but with every key;
	// fixtureCopyTables sets it for new fixtures.
	tables bool
}

// fixtureCopyTables makes new fixtures copy tables (fixture.tables).
var fixtureCopyTables bool

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOf(t, 7)
}

// newFixtureOf is a fixture of a replicaset of group g.
func newFixtureOf(t *testing.T, g multiraft.GroupID) *fixture {
	t.Helper()
	fs := vfs.NewMem()
	db, err := storage.Open("db", storage.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sm, err := New(db, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := sm.SetIngestDir(fs, "ingest"); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, sm: sm, now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixMilli(), tables: fixtureCopyTables}
}

// tabled returns c with the tuples of a copy entry in its table, when
// the fixture copies tables.
func (f *fixture) tabled(c *rspb.Command) *rspb.Command {
	cc := c.GetCopyChunks()
	if !f.tables || cc == nil || len(cc.GetTables()) > 0 {
		return c
	}
	c = proto.CloneOf(c)
	cc = c.GetCopyChunks()
	var err error
	if cc.Tables, cc.Summaries, err = f.sm.CopyTables(nil, cc.GetChunks()); err != nil {
		f.t.Fatal(err)
	}
	return c
}

// apply applies the commands as one run and returns their results.
func (f *fixture) apply(cmds ...*rspb.Command) []Result {
	f.t.Helper()
	b := f.db.NewIndexedBatch()
	var entries []multiraft.Entry
	for _, c := range cmds {
		if c.NowUnixMs == 0 {
			c.NowUnixMs = f.now
		}
		data, err := Encode(f.tabled(c))
		if err != nil {
			f.t.Fatal(err)
		}
		f.index++
		entries = append(entries, multiraft.Entry{Index: f.index, Term: 1, Cmd: data})
	}
	out, err := f.sm.Apply(b, entries)
	if err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		f.t.Fatal(err)
	}
	f.sm.ApplyDone(true)
	return results(f.t, out)
}

// results are Apply's results as the state machine's Result type.
func results(tb testing.TB, out []any) []Result {
	tb.Helper()
	rs := make([]Result, len(out))
	for i, v := range out {
		r, ok := v.(Result)
		if !ok {
			tb.Fatalf("Apply's result %d is a %T, not a Result", i, v)
		}
		rs[i] = r
	}
	return rs
}

func (f *fixture) batch(c *rspb.Batch) *BatchOutcome {
	f.t.Helper()
	out := f.apply(&rspb.Command{Op: &rspb.Command_Batch{Batch: c}})[0].Batch
	if out == nil {
		f.t.Fatal("a batch did not return a BatchOutcome")
	}
	return out
}

func (f *fixture) ok(c *rspb.Batch) *rspb.BatchResult {
	f.t.Helper()
	o := f.batch(c)
	if ref := o.Result.GetRefusal(); ref != nil {
		f.t.Fatalf("batch refused: %v", ref)
	}
	return o.Result
}

func (f *fixture) refused(c *rspb.Batch, code rspb.Refusal_Code, msg string) *rspb.Refusal {
	f.t.Helper()
	ref := f.batch(c).Result.GetRefusal()
	if ref.GetCode() != code || !strings.Contains(ref.GetMessage(), msg) {
		f.t.Fatalf("refusal %v, want code %v with %q", ref, code, msg)
	}
	return ref
}

// offers: shop unsigned, offer string, price double? ; key (shop, offer),
// sharded by shop.
func offersSpace(id uint32) *metapb.Space {
	return &metapb.Space{Id: id, Name: "offers", ShardingKey: []uint32{0}, PrimaryKey: []uint32{0, 1}, Format: []*metapb.Field{
		{Name: "shop", Type: "unsigned"},
		{Name: "offer", Type: "string"},
		{Name: "price", Type: "double", Nullable: true},
	}}
}

func (f *fixture) setup() {
	f.t.Helper()
	f.apply(
		&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}},
		&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 3000, Generation: 1}}},
	)
}

func offer(shop uint64, id string, price float64) tuple.Tuple {
	return tuple.Tuple{tuple.Uint(shop), tuple.String(id), tuple.Double(price)}
}

func enc(t tuple.Tuple) []byte { return tuple.AppendTuple(nil, t) }

func key(t *testing.T, parts ...tuple.Value) []byte {
	t.Helper()
	k, err := tuple.AppendKey(nil, parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func insertOp(t *testing.T, tp tuple.Tuple) *rspb.Op {
	t.Helper()
	return &rspb.Op{Kind: rspb.OpKind_OP_KIND_INSERT, SpaceId: 1, Key: key(t, tp[0], tp[1]), Tuple: enc(tp)}
}

func ops(t *testing.T, o ...tuple.Op) []byte {
	t.Helper()
	return tuple.AppendOps(nil, o)
}

func TestWritesReturnTheSeedsAnswersAndVersions(t *testing.T) {
	f := newFixture(t)
	f.setup()
	a := offer(5, "a", 1.5)
	r := f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{insertOp(t, a)}})
	ins := r.GetResults()[0]
	if ins.GetFound() || !bytes.Equal(ins.GetTuple(), enc(a)) || ins.GetVersion() != Version(7, r.GetIndex()) || r.GetIndex() != 3 {
		t.Fatalf("insert result %v at %d", ins, r.GetIndex())
	}
	f.refused(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{insertOp(t, a)}}, rspb.Refusal_CODE_DUPLICATE_KEY, `duplicate key [5,"a"] in space offers`)

	k := key(t, tuple.Uint(5), tuple.String("a"))
	up := f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: k,
		Ops: ops(t, tuple.Op{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(1)})}}}).GetResults()[0]
	if got, _ := tuple.DecodeTuple(up.GetTuple()); !up.GetFound() || !got.Equal(offer(5, "a", 2.5)) {
		t.Fatalf("update result %v (%v)", up, got)
	}
	// An update of a missing key finds nothing and writes nothing.
	missing := key(t, tuple.Uint(5), tuple.String("zz"))
	if r := f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: missing, Ops: ops(t)}}}); r.GetResults()[0].GetFound() {
		t.Fatal("an update of a missing key found a tuple")
	}
	// Upsert inserts when absent, updates when present.
	u := offer(5, "b", 7)
	f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPSERT, SpaceId: 1, Key: key(t, u[0], u[1]), Tuple: enc(u),
		Ops: ops(t, tuple.Op{Code: tuple.OpAssign, Field: tuple.FieldRef{Number: 3}, Arg: tuple.Double(0)})}}})
	r2 := f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPSERT, SpaceId: 1, Key: key(t, u[0], u[1]), Tuple: enc(u),
		Ops: ops(t, tuple.Op{Code: tuple.OpAssign, Field: tuple.FieldRef{Number: 3}, Arg: tuple.Double(0)})}}})
	if got, _ := tuple.DecodeTuple(r2.GetResults()[0].GetTuple()); !got.Equal(offer(5, "b", 0)) {
		t.Fatalf("second upsert gave %v", got)
	}
	// Delete returns what it deleted, with the version it had.
	before, _, _ := f.sm.Get(f.db, 9, f.sm.Schema().ByID(1).ID(), k)
	del := f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k}}}).GetResults()[0]
	if got, _ := tuple.DecodeTuple(del.GetTuple()); !del.GetFound() || !got.Equal(offer(5, "a", 2.5)) || del.GetVersion() != before.Version {
		t.Fatalf("delete result %v, want the tuple at version %d", del, before.Version)
	}
	if _, found, _ := f.sm.Get(f.db, 9, f.sm.Schema().ByID(1).ID(), k); found {
		t.Fatal("the deleted tuple is still there")
	}
	if n, err := f.sm.Count(f.db, 1); err != nil || n != 1 {
		t.Fatalf("count %d, %v: want 1 (b)", n, err)
	}
}

func TestABatchIsAllOrNothing(t *testing.T) {
	f := newFixture(t)
	f.setup()
	f.ok(&rspb.Batch{Bucket: 3, Ops: []*rspb.Op{insertOp(t, offer(1, "x", 1))}})
	// The second op's duplicate key refuses the batch: the first op's
	// insert must not be applied either.
	f.refused(&rspb.Batch{Bucket: 3, Ops: []*rspb.Op{insertOp(t, offer(1, "new", 1)), insertOp(t, offer(1, "x", 1))}},
		rspb.Refusal_CODE_DUPLICATE_KEY, "op 2")
	if _, found, _ := f.sm.Get(f.db, 3, f.sm.Schema().ByID(1).ID(), key(t, tuple.Uint(1), tuple.String("new"))); found {
		t.Fatal("a refused batch applied its first op")
	}
	// Later ops see earlier ones: insert then update in one batch.
	k := key(t, tuple.Uint(1), tuple.String("y"))
	r := f.ok(&rspb.Batch{Bucket: 3, Ops: []*rspb.Op{insertOp(t, offer(1, "y", 1)),
		{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: k, Ops: ops(t, tuple.Op{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(1)})}}})
	if got, _ := tuple.DecodeTuple(r.GetResults()[1].GetTuple()); !got.Equal(offer(1, "y", 2)) {
		t.Fatalf("insert+update in one batch gave %v", got)
	}
	if n, _ := f.sm.Count(f.db, 1); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
}

func TestConditionsCompareVersions(t *testing.T) {
	f := newFixture(t)
	f.setup()
	tp := offer(2, "c", 1)
	k := key(t, tp[0], tp[1])
	zero, one := uint64(0), uint64(1)
	// if_version 0: only when absent (insert-if-absent with replace).
	v1 := f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: k, Tuple: enc(tp), IfVersion: &zero}}}).GetResults()[0].GetVersion()
	ref := f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: k, Tuple: enc(tp), IfVersion: &zero}}},
		rspb.Refusal_CODE_CONDITION_FAILED, "if_version 0 does not hold")
	if ref.GetActualVersion() != v1 {
		t.Fatalf("actual version %d, want %d", ref.GetActualVersion(), v1)
	}
	f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k, IfVersion: &one}}},
		rspb.Refusal_CODE_CONDITION_FAILED, "if_version 1")
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k, IfVersion: &v1}}})
	f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_INSERT, SpaceId: 1, Key: k, Tuple: enc(tp), IfVersion: &zero}}},
		rspb.Refusal_CODE_INVALID, "insert takes no if_version")
}

func TestAWriteIsAppliedOnceWithinTheWindow(t *testing.T) {
	f := newFixture(t)
	f.setup()
	id := bytes.Repeat([]byte{7}, 16)
	b := &rspb.Batch{RequestId: id, Bucket: 5, Ops: []*rspb.Op{insertOp(t, offer(3, "d", 1))}}
	first := f.batch(b)
	again := f.batch(proto.CloneOf(b))
	if first.Duplicate || !again.Duplicate || again.Result.GetRefusal() != nil || again.Result.GetIndex() != first.Result.GetIndex() {
		t.Fatalf("first %+v, retry %+v: want the retry to repeat the first answer", first, again)
	}
	if n, _ := f.sm.Count(f.db, 1); n != 1 {
		t.Fatalf("count %d after a retried insert, want 1", n)
	}
	// After the window the id is forgotten: the same insert is now a
	// duplicate key, not a duplicate request.
	f.now += RequestIDWindow.Milliseconds() + 1
	f.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 1}}}) // any entry moves the clock
	late := f.batch(proto.CloneOf(b))
	if late.Duplicate || late.Result.GetRefusal().GetCode() != rspb.Refusal_CODE_DUPLICATE_KEY {
		t.Fatalf("a retry after the window: %+v", late)
	}
	// It is deleted from the database with its time slot, a slot after it
	// left the window.
	f.now += f.sm.requestSlot()
	f.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 1}}})
	if n := f.storedRequestIDs(); n != 0 {
		t.Fatalf("%d request ids stored, want none (the late retry was refused)", n)
	}
}

func TestWrongBucketAndSchemaBehindAreRefused(t *testing.T) {
	f := newFixture(t)
	f.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}},
		&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 10, Generation: 1}}})
	f.refused(&rspb.Batch{Bucket: 11, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}}, rspb.Refusal_CODE_WRONG_BUCKET, "bucket 11 is not held")
	f.refused(&rspb.Batch{SchemaVersion: 2, Bucket: 1, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}}, rspb.Refusal_CODE_SCHEMA_BEHIND, "applied schema version 1, the write names 2")
	f.refused(&rspb.Batch{Bucket: 1, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_INSERT, SpaceId: 9}}}, rspb.Refusal_CODE_NO_SUCH_SPACE, "no space with id 9")
	// CreateBuckets never overwrites a record.
	if out := f.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 5, Last: 12, Generation: 1}}})[0]; out.Buckets.Created != 2 {
		t.Fatalf("CreateBuckets over 5..12 created %+v, want 2 (11, 12)", out)
	}
}

func TestAnUpdateMayNotChangeThePrimaryKey(t *testing.T) {
	f := newFixture(t)
	f.setup()
	tp := offer(4, "e", 1)
	f.ok(&rspb.Batch{Bucket: 2, Ops: []*rspb.Op{insertOp(t, tp)}})
	f.refused(&rspb.Batch{Bucket: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: key(t, tp[0], tp[1]),
		Ops: ops(t, tuple.Op{Code: tuple.OpAssign, Field: tuple.FieldRef{Name: "offer"}, Arg: tuple.String("f")})}}},
		rspb.Refusal_CODE_INVALID, "changes field 2 (offer), part 2 of the primary key")
	f.refused(&rspb.Batch{Bucket: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: key(t, tp[0], tp[1]),
		Ops: ops(t, tuple.Op{Code: tuple.OpAssign, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.String("cheap")})}}},
		rspb.Refusal_CODE_INVALID, "field 3 (price)")
}

func TestDroppingASpaceDeletesItsTuplesEverywhere(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for i := range 20 {
		f.ok(&rspb.Batch{Bucket: uint32(1 + i%3), Ops: []*rspb.Op{insertOp(t, offer(uint64(i), "x", 1))}})
	}
	states := offersSpace(2)
	states.Name = "states"
	f.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 3, Spaces: []*metapb.Space{states}}}})
	if f.sm.Schema().ByName("offers") != nil || f.sm.Schema().ByName("states") == nil || f.sm.Schema().Version != 3 {
		t.Fatalf("schema after the drop: %+v", f.sm.Schema())
	}
	var left int
	_ = scan(f.db, f.sm.k.prefix, func(k, _ []byte) error {
		if bytes.HasPrefix(k, f.sm.k.sub(storage.DataTuple, 0)) || bytes.HasPrefix(k, f.sm.k.counts()) {
			left++
		}
		return nil
	})
	if left != 0 {
		t.Fatalf("%d tuple or count keys of the dropped space are left", left)
	}
	// An older schema is ignored.
	if out := f.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 2}}})[0]; out.Schema.Version != 3 {
		t.Fatalf("an older schema changed the version: %+v", out)
	}
}

func TestSnapshotRestoresDataAndSchema(t *testing.T) {
	f := newFixture(t)
	f.setup()
	f.ok(&rspb.Batch{Bucket: 1, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
	var buf bytes.Buffer
	if err := f.sm.Snapshot(t.Context(), f.db, &buf); err != nil {
		t.Fatal(err)
	}
	g := newFixture(t)
	if err := g.sm.Restore(t.Context(), g.db, &buf); err != nil {
		t.Fatal(err)
	}
	if g.sm.Schema().Version != 1 || g.sm.Schema().ByName("offers") == nil {
		t.Fatalf("restored schema %+v", g.sm.Schema())
	}
	if _, found, _ := g.sm.Get(g.db, 1, g.sm.Schema().ByID(1).ID(), key(t, tuple.Uint(1), tuple.String("a"))); !found {
		t.Fatal("restored replicaset lacks the tuple")
	}
	// A reopened state machine loads the same schema.
	h, err := New(g.db, 7)
	if err != nil || h.Schema().Version != 1 {
		t.Fatalf("reopened: %v %v", h.Schema(), err)
	}
}

func TestRangeReadsOneSpaceOfOneBucketInKeyOrder(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for _, id := range []string{"c", "a", "b", "d"} {
		f.ok(&rspb.Batch{Bucket: 8, Ops: []*rspb.Op{insertOp(t, offer(1, id, 1))}})
	}
	f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{insertOp(t, offer(1, "zz-other-bucket", 1))}})
	sp := f.sm.Schema().ByID(1)
	got, more, err := f.sm.Range(f.db, 8, sp.ID(), KeyRange{}, 3)
	if err != nil || !more || len(got) != 3 {
		t.Fatalf("first page: %d tuples, more %v, %v", len(got), more, err)
	}
	rest, more, err := f.sm.Range(f.db, 8, sp.ID(), KeyRange{Lower: afterKey(key(t, tuple.Uint(1), tuple.String("c")))}, 3)
	if err != nil || more || len(rest) != 1 {
		t.Fatalf("second page: %d tuples, more %v, %v", len(rest), more, err)
	}
	var ids []string
	for _, s := range append(got, rest...) {
		tp, _ := tuple.DecodeTuple(s.Tuple)
		id, _ := tp[1].AsString()
		ids = append(ids, id)
	}
	if strings.Join(ids, "") != "abcd" {
		t.Fatalf("range order %v", ids)
	}
}

func FuzzApplyNeverPanics(f *testing.F) {
	seed, _ := Encode(&rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: 1, Ops: []*rspb.Op{
		{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: []byte{5, 0, 0, 0, 0, 0, 0, 0, 1}, Ops: []byte{1, '+', 6}},
	}}}})
	f.Add(seed)
	check, _ := Encode(&rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: 1, Ops: []*rspb.Op{
		{Kind: rspb.OpKind_OP_KIND_CHECK, SpaceId: 1, Key: []byte{5, 0, 0, 0, 0, 0, 0, 0, 1}, Conditions: []*rspb.Condition{{Field: 2, Compare: rspb.Compare_COMPARE_LE, Value: []byte{1, 6}}}},
		{Kind: rspb.OpKind_OP_KIND_INSERT, SpaceId: 1, Key: []byte{5, 0, 0, 0, 0, 0, 0, 0, 1}, IfAbsent: true},
	}}}})
	f.Add(check)
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		fx := newFixture(t)
		fx.setup()
		fx.ok(&rspb.Batch{Bucket: 1, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
		b := fx.db.NewIndexedBatch()
		out, err := fx.sm.Apply(b, []multiraft.Entry{{Index: 100, Term: 1, Cmd: data}})
		if err != nil && !errors.Is(err, ErrBadCommand) {
			// Garbage is a refusal or a bad command; never a storage failure.
			t.Fatalf("Apply(%x) failed the state machine: %v", data, err)
		}
		_ = out
		_ = b.Close()
		fx.sm.ApplyDone(false)
	})
}

// A refusal of a write names its operation as before opWhat made the
// name lazily: "op N (kind in space S)".
func TestARefusalNamesTheOperation(t *testing.T) {
	what := opWhat{n: 2, kind: rspb.OpKind_OP_KIND_REPLACE, space: "offers"}
	if got, want := fmt.Sprintf("%s: the tuple: bad", what), "op 2 (replace in space offers): the tuple: bad"; got != want {
		t.Fatalf("refusal %q, want %q", got, want)
	}
}

// A batch longer than the overlay's scan (overlayScan) sees its own
// writes as a short one does: inserts, then updates and deletes of the
// same keys in the same batch, and the counts of what is left.
func TestALongBatchSeesItsOwnWrites(t *testing.T) {
	f := newFixture(t)
	f.setup()
	const n = 3 * overlayScan
	var batch []*rspb.Op
	for i := range n {
		batch = append(batch, insertOp(t, offer(1, fmt.Sprint("k", i), 1)))
	}
	add := func(i int) *rspb.Op {
		return &rspb.Op{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: key(t, tuple.Uint(1), tuple.String(fmt.Sprint("k", i))),
			Ops: ops(t, tuple.Op{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(float64(i))})}
	}
	del := func(i int) *rspb.Op {
		return &rspb.Op{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: key(t, tuple.Uint(1), tuple.String(fmt.Sprint("k", i)))}
	}
	for i := 0; i < n; i += 2 {
		batch = append(batch, add(i))
	}
	for i := 1; i < n; i += 4 {
		batch = append(batch, del(i))
	}
	// A key inserted again after its deletion, in the same batch.
	batch = append(batch, insertOp(t, offer(1, "k1", 7)))
	r := f.ok(&rspb.Batch{Bucket: 3, Ops: batch})
	if len(r.GetResults()) != len(batch) {
		t.Fatalf("%d results for %d ops", len(r.GetResults()), len(batch))
	}
	want := 0
	for i := range n {
		got, found, err := f.sm.Get(f.db, 3, f.sm.Schema().ByID(1).ID(), key(t, tuple.Uint(1), tuple.String(fmt.Sprint("k", i))))
		if err != nil {
			t.Fatal(err)
		}
		var exp tuple.Tuple
		switch {
		case i == 1:
			exp = offer(1, "k1", 7)
		case i%4 == 1:
			exp = nil
		case i%2 == 0:
			exp = offer(1, fmt.Sprint("k", i), float64(1+i))
		default:
			exp = offer(1, fmt.Sprint("k", i), 1)
		}
		if exp == nil {
			if found {
				t.Fatalf("k%d: deleted in the batch, found %v", i, got)
			}
			continue
		}
		want++
		dt, err := tuple.DecodeTuple(got.Tuple)
		if !found || err != nil || !dt.Equal(exp) {
			t.Fatalf("k%d: got %v (found %v, %v), want %v", i, dt, found, err, exp)
		}
	}
	if c, _ := f.sm.Count(f.db, 1); c != uint64(want) {
		t.Fatalf("count %d, want %d", c, want)
	}
}

// A request id of another length than 16 bytes (the data service takes
// only 16; a log may hold others) is remembered as well.
func TestARequestIDOfAnotherLengthIsRememberedToo(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for _, id := range [][]byte{[]byte("short"), bytes.Repeat([]byte{9}, 40)} {
		b := &rspb.Batch{RequestId: id, Bucket: 5, Ops: []*rspb.Op{insertOp(t, offer(uint64(len(id)), "d", 1))}}
		first := f.batch(b)
		again := f.batch(proto.CloneOf(b))
		if first.Duplicate || !again.Duplicate || again.Result.GetIndex() != first.Result.GetIndex() {
			t.Fatalf("id of %d bytes: first %+v, retry %+v", len(id), first, again)
		}
		f.reopen()
		if again := f.batch(proto.CloneOf(b)); !again.Duplicate {
			t.Fatalf("id of %d bytes: forgotten after a reopen: %+v", len(id), again)
		}
		// And forgotten once the window has passed: the same insert is
		// a duplicate key then, not a duplicate request.
		f.now += RequestIDWindow.Milliseconds() + 1
		f.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 1}}}) // any entry moves the clock
		if late := f.batch(proto.CloneOf(b)); late.Duplicate || late.Result.GetRefusal().GetCode() != rspb.Refusal_CODE_DUPLICATE_KEY {
			t.Fatalf("id of %d bytes: a retry after the window: %+v", len(id), late)
		}
		if n := len(f.sm.reqs.other); n != 0 {
			t.Fatalf("id of %d bytes: %d ids of another length still in memory after the window", len(id), n)
		}
	}
}
