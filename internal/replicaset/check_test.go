package replicaset

import (
	"bytes"
	"strings"
	"testing"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

func cond(field uint32, c rspb.Compare, v tuple.Value) *rspb.Condition {
	return &rspb.Condition{Field: field, Compare: c, Value: enc(tuple.Tuple{v})}
}

func checkOp(t *testing.T, k []byte, conds ...*rspb.Condition) *rspb.Op {
	t.Helper()
	return &rspb.Op{Kind: rspb.OpKind_OP_KIND_CHECK, SpaceId: 1, Key: k, Conditions: conds}
}

// Each comparison holds or not on the tuple's field, by tuple.Compare;
// when it does not, nothing of the batch is applied and the refusal names
// the op, the condition and the field's value.
func TestACheckOpComparesAFieldOfTheTuple(t *testing.T) {
	f := newFixture(t)
	f.setup()
	tp := offer(2, "c", 1.5)
	k := key(t, tp[0], tp[1])
	v := f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, tp)}}).GetResults()[0].GetVersion()
	const (
		eq = rspb.Compare_COMPARE_EQ
		ne = rspb.Compare_COMPARE_NE
		lt = rspb.Compare_COMPARE_LT
		le = rspb.Compare_COMPARE_LE
		gt = rspb.Compare_COMPARE_GT
		ge = rspb.Compare_COMPARE_GE
	)
	d := tuple.Double
	for n, c := range []struct {
		c     *rspb.Condition
		holds bool
		text  string // the condition as the refusal writes it
	}{
		{cond(2, eq, d(1.5)), true, ""}, {cond(2, eq, d(2)), false, "price = 2"},
		{cond(2, ne, d(2)), true, ""}, {cond(2, ne, d(1.5)), false, "price != 1.5"},
		{cond(2, lt, d(2)), true, ""}, {cond(2, lt, d(1.5)), false, "price < 1.5"},
		{cond(2, le, d(1.5)), true, ""}, {cond(2, le, d(1)), false, "price <= 1"},
		{cond(2, gt, d(1)), true, ""}, {cond(2, gt, d(1.5)), false, "price > 1.5"},
		{cond(2, ge, d(1.5)), true, ""}, {cond(2, ge, d(2)), false, "price >= 2"},
		{cond(1, gt, tuple.String("b")), true, ""}, {cond(1, lt, tuple.String("b")), false, `offer < "b"`},
		{cond(0, eq, tuple.Uint(2)), true, ""}, {cond(0, ne, tuple.Uint(2)), false, "shop != 2"},
	} {
		other := offer(2, "side", float64(n))
		batch := &rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, other), checkOp(t, k, c.c)}}
		otherKey := key(t, other[0], other[1])
		if c.holds {
			r := f.ok(batch).GetResults()
			if ch := r[1]; !ch.GetFound() || len(ch.GetTuple()) != 0 || ch.GetVersion() != v {
				t.Fatalf("condition %d: the check's result %v, want found at version %d, no tuple", n, ch, v)
			}
			f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: otherKey}}})
			continue
		}
		ref := f.refused(batch, rspb.Refusal_CODE_CONDITION_FAILED,
			"op 2 (check in space offers): condition 1 ("+c.text+") does not hold: the field is ")
		got, err := decodeOne(ref.GetActualValue())
		if ref.GetOp() != 1 || ref.GetCondition() != 1 || err != nil || got != tp[c.c.GetField()] || ref.GetActualVersion() != v {
			t.Fatalf("condition %d: refusal %v (actual value %v, %v)", n, ref, got, err)
		}
		if _, found, _ := f.sm.Get(f.db, 4, 1, otherKey); found {
			t.Fatalf("condition %d: a refused batch applied its insert", n)
		}
	}
}

func TestACheckOpComparesTheVersion(t *testing.T) {
	f := newFixture(t)
	f.setup()
	tp := offer(2, "c", 1)
	k := key(t, tp[0], tp[1])
	zero := uint64(0)
	absent := checkOp(t, k)
	absent.IfVersion = &zero
	// Absent: version 0 holds, and the check returns no tuple.
	if r := f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{absent, insertOp(t, tp)}}).GetResults(); r[0].GetFound() || len(r[0].GetTuple()) > 0 {
		t.Fatalf("a check of an absent key returned %v", r[0])
	}
	v, _, _ := f.sm.Get(f.db, 4, 1, k)
	ref := f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{absent, {Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k}}},
		rspb.Refusal_CODE_CONDITION_FAILED, "op 1 (check in space offers): if_version 0 does not hold")
	if ref.GetActualVersion() != v.Version || ref.GetCondition() != 0 {
		t.Fatalf("refusal %v, want actual version %d", ref, v.Version)
	}
	if _, found, _ := f.sm.Get(f.db, 4, 1, k); !found {
		t.Fatal("a refused batch applied its delete")
	}
	same := checkOp(t, k, cond(2, rspb.Compare_COMPARE_EQ, tuple.Double(1)))
	same.IfVersion = &v.Version
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{same}})
	// The second condition fails: the refusal names it.
	two := checkOp(t, k, cond(2, rspb.Compare_COMPARE_EQ, tuple.Double(1)), cond(1, rspb.Compare_COMPARE_EQ, tuple.String("d")))
	if ref := f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{two}}, rspb.Refusal_CODE_CONDITION_FAILED, `condition 2 (offer = "d") does not hold: the field is "c"`); ref.GetCondition() != 2 {
		t.Fatalf("refusal names condition %d, want 2", ref.GetCondition())
	}
	// A field condition on an absent key fails.
	missing := key(t, tuple.Uint(2), tuple.String("none"))
	ref = f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{checkOp(t, missing, cond(2, rspb.Compare_COMPARE_NE, tuple.Double(1)))}},
		rspb.Refusal_CODE_CONDITION_FAILED, `condition 1 (price != 1) does not hold: there is no tuple with key [2,"none"]`)
	if len(ref.GetActualValue()) != 0 || ref.GetActualVersion() != 0 {
		t.Fatalf("refusal %v for an absent key", ref)
	}
	f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{checkOp(t, k)}}, rspb.Refusal_CODE_INVALID, "op 1 (check in space offers): no condition")
}

// A null field compares as tuple.Compare orders null: below every value.
func TestACheckOpComparesANullField(t *testing.T) {
	f := newFixture(t)
	f.setup()
	tp := tuple.Tuple{tuple.Uint(2), tuple.String("n"), tuple.Null()}
	k := key(t, tp[0], tp[1])
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, tp)}})
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{checkOp(t, k, cond(2, rspb.Compare_COMPARE_EQ, tuple.Null()), cond(2, rspb.Compare_COMPARE_LT, tuple.Double(-1)))}})
	f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{checkOp(t, k, cond(2, rspb.Compare_COMPARE_GE, tuple.Double(0)))}},
		rspb.Refusal_CODE_CONDITION_FAILED, "condition 1 (price >= 0) does not hold: the field is null")
}

// An insert with if_absent skips a key that exists (its result is found,
// with that tuple) and the batch goes on; without it the batch is refused.
func TestAnInsertIfAbsentSkipsAnExistingKey(t *testing.T) {
	f := newFixture(t)
	f.setup()
	first := offer(3, "q", 1)
	v := f.ok(&rspb.Batch{Bucket: 5, Ops: []*rspb.Op{insertOp(t, first)}}).GetResults()[0].GetVersion()
	again := insertOp(t, offer(3, "q", 2))
	again.IfAbsent = true
	fresh := insertOp(t, offer(3, "r", 3))
	fresh.IfAbsent = true
	r := f.ok(&rspb.Batch{Bucket: 5, Ops: []*rspb.Op{again, fresh}}).GetResults()
	if !r[0].GetFound() || !bytes.Equal(r[0].GetTuple(), enc(first)) || r[0].GetVersion() != v {
		t.Fatalf("the skipped insert's result %v, want the existing tuple at version %d", r[0], v)
	}
	if r[1].GetFound() || !bytes.Equal(r[1].GetTuple(), enc(offer(3, "r", 3))) {
		t.Fatalf("the insert of an absent key: %v", r[1])
	}
	if got, _, _ := f.sm.Get(f.db, 5, 1, key(t, first[0], first[1])); got.Version != v {
		t.Fatalf("the skipped insert wrote: version %d, want %d", got.Version, v)
	}
	if n, _ := f.sm.Count(f.db, 1); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
	again.IfAbsent = false
	f.refused(&rspb.Batch{Bucket: 5, Ops: []*rspb.Op{again}}, rspb.Refusal_CODE_DUPLICATE_KEY, "duplicate key")
}

// The fence pattern: a check that the stored ticket is at most ours and a
// max that raises it, in one batch.
func TestACheckAndAMaxFenceAWrite(t *testing.T) {
	f := newFixture(t)
	f.setup()
	fence := offer(4, "fence", 5)
	k := key(t, fence[0], fence[1])
	f.ok(&rspb.Batch{Bucket: 6, Ops: []*rspb.Op{insertOp(t, fence)}})
	write := func(ticket float64) *rspb.Batch {
		return &rspb.Batch{Bucket: 6, Ops: []*rspb.Op{
			checkOp(t, k, cond(2, rspb.Compare_COMPARE_LE, tuple.Double(ticket))),
			{Kind: rspb.OpKind_OP_KIND_UPDATE, SpaceId: 1, Key: k, Ops: ops(t, tuple.Op{Code: tuple.OpMax, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(ticket)})},
		}}
	}
	if got, _ := tuple.DecodeTuple(f.ok(write(7)).GetResults()[1].GetTuple()); !got.Equal(offer(4, "fence", 7)) {
		t.Fatalf("the fenced write left %v", got)
	}
	f.ok(write(7))
	f.refused(write(6), rspb.Refusal_CODE_CONDITION_FAILED, "condition 1 (price <= 6) does not hold: the field is 7")
}

func TestPrepareConditionsNamesWhatIsWrong(t *testing.T) {
	sp, err := meta.CompileSpace(offersSpace(1))
	if err != nil {
		t.Fatal(err)
	}
	what := opWhat{n: 2, kind: rspb.OpKind_OP_KIND_CHECK, space: "offers"}
	val := func(v tuple.Value) []byte { return enc(tuple.Tuple{v}) }
	for _, c := range []struct {
		c    *datav1.Condition
		want string
	}{
		{&datav1.Condition{Field: "nope", Compare: datav1.Compare_COMPARE_EQ, Value: val(tuple.Uint(1))},
			`op 2 (check in space offers): condition 1: no field "nope" in space offers (its fields: shop, offer, price)`},
		{&datav1.Condition{FieldNumber: 4, Compare: datav1.Compare_COMPARE_EQ, Value: val(tuple.Uint(1))}, "condition 1: field 4: space offers has 3 fields"},
		{&datav1.Condition{Field: "shop", FieldNumber: 1, Compare: datav1.Compare_COMPARE_EQ, Value: val(tuple.Uint(1))}, "both by name"},
		{&datav1.Condition{Compare: datav1.Compare_COMPARE_EQ, Value: val(tuple.Uint(1))}, "condition 1: no field given"},
		{&datav1.Condition{Field: "shop", Value: val(tuple.Uint(1))}, "condition 1 (field shop): no comparison given"},
		{&datav1.Condition{Field: "shop", Compare: 99, Value: val(tuple.Uint(1))}, "no comparison given"},
		{&datav1.Condition{Field: "shop", Compare: datav1.Compare_COMPARE_EQ, Value: []byte{0x01}}, "condition 1 (field shop): the value:"},
		{&datav1.Condition{Field: "shop", Compare: datav1.Compare_COMPARE_EQ, Value: enc(tuple.Tuple{tuple.Uint(1), tuple.Uint(2)})}, "a tuple of 2 values, want one"},
		{&datav1.Condition{Field: "shop", Compare: datav1.Compare_COMPARE_LT, Value: val(tuple.String("x"))}, `condition 1: field 1 (shop): expected unsigned, got string "x"`},
		{&datav1.Condition{FieldNumber: 1, Compare: datav1.Compare_COMPARE_LT, Value: val(tuple.Null())}, "expected unsigned, got null"},
	} {
		_, err := prepareConditions(sp, what, &datav1.Op{Kind: datav1.OpKind_OP_KIND_CHECK, Conditions: []*datav1.Condition{c.c}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prepareConditions(%v) = %v, want an error containing %q", c.c, err, c.want)
		}
	}
	if _, err := prepareConditions(sp, what, &datav1.Op{Kind: datav1.OpKind_OP_KIND_CHECK}); err == nil || !strings.Contains(err.Error(), "no condition") {
		t.Errorf("a check without conditions: %v", err)
	}
	got, err := prepareConditions(sp, what, &datav1.Op{Kind: datav1.OpKind_OP_KIND_CHECK, Conditions: []*datav1.Condition{
		{Field: "price", Compare: datav1.Compare_COMPARE_GE, Value: val(tuple.Null())},
		{FieldNumber: 2, Compare: datav1.Compare_COMPARE_NE, Value: val(tuple.String("x"))},
	}})
	if err != nil || len(got) != 2 || got[0].GetField() != 2 || got[0].GetCompare() != rspb.Compare_COMPARE_GE || got[1].GetField() != 1 || got[1].GetCompare() != rspb.Compare_COMPARE_NE {
		t.Fatalf("prepareConditions = %v, %v", got, err)
	}
}
