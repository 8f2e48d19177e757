package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// A check op refuses the whole batch unless its conditions hold; the
// error is ErrConditionFailed naming the op, the condition and the value.
func TestACheckOpGuardsABatch(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "check_offers")
	ins, err := s.Insert(ctx, offer(1, "fence", 5))
	if err != nil {
		t.Fatal(err)
	}
	fence := key(1, "fence")
	res, err := c.Batch().
		Check("check_offers", fence, client.VersionIs(ins.Version), client.Where("price", client.LE, tuple.Double(5)), client.Where("offer", client.EQ, tuple.String("fence"))).
		Update("check_offers", fence, []tuple.Op{{Code: tuple.OpMax, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(6)}}).
		Insert("check_offers", offer(1, "w1", 1)).
		Do(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Found || res[0].Tuple != nil || res[0].Version != ins.Version || !res[1].Tuple.Equal(offer(1, "fence", 6)) {
		t.Fatalf("results %+v", res)
	}
	_, err = c.Batch().
		Insert("check_offers", offer(1, "w2", 1)).
		Check("check_offers", fence, client.Where("price", client.LE, tuple.Double(5))).
		Do(ctx)
	var e *client.Error
	if !errors.Is(err, client.ErrConditionFailed) || !errors.As(err, &e) || e.OpIndex != 2 || e.Condition != 1 || e.ActualValue != tuple.Double(6) ||
		!strings.Contains(err.Error(), "op 2 (check in space check_offers): condition 1 (price <= 5) does not hold: the field is 6") {
		t.Fatalf("a failed check: %v (%+v)", err, e)
	}
	if r, _, err := s.Select(ctx, key(1, "w2"), client.RW); err != nil || r.Found {
		t.Fatalf("a refused batch applied its insert: %+v, %v", r, err)
	}
	// The version condition: 0 for an absent key.
	if _, err := s.Check(ctx, key(1, "none"), client.VersionIs(0)); err != nil {
		t.Fatalf("version 0 of an absent key: %v", err)
	}
	_, err = s.Check(ctx, fence, client.VersionIs(ins.Version))
	if !errors.As(err, &e) || !errors.Is(err, client.ErrConditionFailed) || e.Condition != 0 || e.ActualVersion == ins.Version || e.ActualVersion == 0 {
		t.Fatalf("a stale version: %v", err)
	}
	// A condition by field number, and one that does not fit its field.
	if _, err := s.Check(ctx, fence, client.Condition{Number: 3, Compare: client.GT, Value: tuple.Double(5)}); err != nil {
		t.Fatalf("by number: %v", err)
	}
	_, err = s.Check(ctx, fence, client.Where("price", client.GT, tuple.String("5")))
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), `condition 1: field 3 (price): expected double, got string "5"`) {
		t.Fatalf("a value of another type: %v", err)
	}
	_, err = s.Check(ctx, fence, client.VersionIs(1), client.VersionIs(2))
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "both compare the version") {
		t.Fatalf("two version conditions: %v", err)
	}
}

// An insert with IfAbsent is skipped when its key exists: Found says so,
// and the rest of the batch is applied.
func TestAnInsertIfAbsentSaysWhetherItInserted(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "offer_queue")
	r, err := s.Insert(ctx, offer(2, "e1", 1), client.IfAbsent())
	if err != nil || r.Found {
		t.Fatalf("first offer: %+v, %v", r, err)
	}
	res, err := c.Batch().Insert("offer_queue", offer(2, "e1", 2), client.IfAbsent()).Insert("offer_queue", offer(2, "e2", 3)).Do(ctx)
	if err != nil || !res[0].Found || !res[0].Tuple.Equal(offer(2, "e1", 1)) || res[0].Version != r.Version || res[1].Found {
		t.Fatalf("second offer: %+v, %v", res, err)
	}
	if _, err := s.Insert(ctx, offer(2, "e1", 2)); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("an insert without IfAbsent: %v", err)
	}
	if _, err := s.Replace(ctx, offer(2, "e1", 2), client.IfAbsent()); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "if_absent is an insert's") {
		t.Fatalf("IfAbsent on a replace: %v", err)
	}
}

func TestParseCompare(t *testing.T) {
	for s, want := range map[string]client.Compare{"=": client.EQ, "==": client.EQ, "!=": client.NE, "<": client.LT, "<=": client.LE, ">": client.GT, ">=": client.GE} {
		if got, ok := client.ParseCompare(s); !ok || got != want {
			t.Errorf("ParseCompare(%q) = %v, %v", s, got, ok)
		}
		if s != "==" && want.String() != s {
			t.Errorf("%v.String() = %q", want, want.String())
		}
	}
	for _, s := range []string{"", "=<", "<>", "eq"} {
		if _, ok := client.ParseCompare(s); ok {
			t.Errorf("ParseCompare(%q) accepted it", s)
		}
	}
}
