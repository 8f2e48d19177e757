package client

import (
	"context"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// Compare is how a Condition compares a tuple's field with its value, in
// tuple.Compare's order of values.
type Compare int

// The comparisons of a Condition.
const (
	EQ Compare = iota + 1 // =
	NE                    // !=
	LT                    // <
	LE                    // <=
	GT                    // >
	GE                    // >=
)

var compareSymbols = [...]string{EQ: "=", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}

// String writes the comparison as ParseCompare reads it: = != < <= > >=.
func (c Compare) String() string {
	if c < EQ || c > GE {
		return "?"
	}
	return compareSymbols[c]
}

// ParseCompare reads a comparison: = (or ==), !=, <, <=, >, >=.
func ParseCompare(s string) (Compare, bool) {
	if s == "==" {
		return EQ, true
	}
	for c := EQ; c <= GE; c++ {
		if compareSymbols[c] == s {
			return c, true
		}
	}
	return 0, false
}

// Condition is one condition of a check op (Batch.Check, Space.Check):
// the key's tuple's field (by Field name, or by 1-based Number) compared
// with Value (of the field's type, or null for a nullable field) must
// hold; a field condition fails when there is no tuple. VersionIs makes
// the condition on the tuple's version instead.
type Condition struct {
	Field   string
	Number  int
	Compare Compare
	Value   tuple.Value

	version *uint64
}

// Where is the condition "field c v" on the field named field.
func Where(field string, c Compare, v tuple.Value) Condition {
	return Condition{Field: field, Compare: c, Value: v}
}

// VersionIs is the condition that the tuple's version is v (0: that there
// is no tuple).
func VersionIs(v uint64) Condition { return Condition{version: &v} }

// IfAbsent makes an Insert skip a key that exists instead of failing (the
// batch goes on): its Result has Found true and the existing tuple; Found
// false says the tuple was inserted.
func IfAbsent() WriteOption {
	return func(o *datav1.Op) { o.IfAbsent = true }
}

// Check adds a check op: it writes nothing, and the whole batch is refused
// (ErrConditionFailed; Error.OpIndex, Error.Condition and
// Error.ActualValue say which op, which condition and what the field
// holds) unless every condition holds on the tuple with key. Its Result
// says whether there is a tuple (Found) and its Version; it carries no
// tuple (Select reads it).
func (b *Batch) Check(space string, key []tuple.Value, conds ...Condition) *Batch {
	op := &datav1.Op{Kind: datav1.OpKind_OP_KIND_CHECK, Space: space, Key: tuple.AppendTuple(nil, key)}
	p := pendingOp{op: op, space: space, key: key}
	for i, c := range conds {
		if c.version != nil {
			if op.IfVersion != nil {
				p.err = invalidf("%s: check: conditions %d and an earlier one both compare the version; give one", space, i+1)
			}
			op.IfVersion = c.version
			continue
		}
		if c.Field != "" && c.Number != 0 || c.Number < 0 {
			p.err = invalidf("%s: check: condition %d names field %q and number %d; give a name or a number from 1", space, i+1, c.Field, c.Number)
		}
		op.Conditions = append(op.Conditions, &datav1.Condition{
			Field: c.Field, FieldNumber: uint32(max(c.Number, 0)), Compare: datav1.Compare(c.Compare),
			Value: tuple.AppendTuple(nil, tuple.Tuple{c.Value}),
		})
	}
	b.ops = append(b.ops, p)
	return b
}

// Check runs a check op alone: it returns whether there is a tuple with
// key and its version when every condition holds, else
// ErrConditionFailed.
func (s *Space) Check(ctx context.Context, key []tuple.Value, conds ...Condition) (Result, error) {
	b := (&Batch{c: s.c}).Check(s.name, key, conds...)
	res, err := b.do(ctx, "check in "+s.name)
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Fence guards a batch with a lease's fencing ticket (a lease of
// Client.Leases, a ZooKeeper znode's version, any number that grows with
// each new holder): the tuple with Key in Space holds, in its unsigned
// field Field, the highest ticket that wrote through it. The fence tuple
// must exist (create it once, e.g. with ticket 0 and Insert(..., IfAbsent())).
type Fence struct {
	Space  string
	Key    []tuple.Value
	Field  string
	Ticket uint64
}

// Fence adds a fence to the batch: a check that the fence tuple's ticket
// is at most f.Ticket and an update that raises it to f.Ticket. Once a
// holder with a higher ticket wrote through the fence, every batch of an
// older holder is refused whole (ErrConditionFailed on the check, whose
// ActualValue is the newer ticket), however late it arrives: a holder that
// was paused past its lease writes nothing. The two ops come first in the
// batch's results; the fence tuple must share the bucket of the batch's
// other keys (the same sharding key).
func (b *Batch) Fence(f Fence) *Batch {
	b.Check(f.Space, f.Key, Where(f.Field, LE, tuple.Uint(f.Ticket)))
	return b.Update(f.Space, f.Key, []tuple.Op{{Code: tuple.OpMax, Field: tuple.FieldRef{Name: f.Field}, Arg: tuple.Uint(f.Ticket)}})
}
