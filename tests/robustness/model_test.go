package robustness

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// The model: every key of the space is a register with a version. A write
// that succeeds returns its version (the replicaset's log index of the
// entry that applied it); a read returns the value and version it found.
// The model treats versions as opaque numbers except that they grow
// within a replicaset: a version is the replicaset's group id << 48 | its
// log index, so a later write to a key on the same replicaset has a larger
// version than every earlier one there; after the key's bucket moves to
// another replicaset its versions are that one's and may be smaller
// (docs/data.md: compare versions for equality only).
//
// A write whose outcome is unknown may have been applied at any moment
// after its call, or never (porcupine places it after everything else,
// where it changes nothing observable). When such a write is applied the
// model does not know its version; the next read or refused CAS that
// reports one teaches it. That makes the model nondeterministic (an
// unknown CAS against an unknown version may or may not apply), so it is a
// porcupine.NondeterministicModel turned into a Model by the power-set
// construction.

type opKind uint8

const (
	opRead opKind = iota
	opInsert
	opReplace
	opCAS
	opDelete
)

func (k opKind) String() string {
	switch k {
	case opRead:
		return "read"
	case opInsert:
		return "insert"
	case opReplace:
		return "replace"
	case opCAS:
		return "cas"
	case opDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

func (k opKind) isWrite() bool { return k != opRead }

// input is what a client asked.
type input struct {
	Kind  opKind
	Key   uint64
	Value string // insert, replace, cas: the value written (unique in the run)
	// Expect is a CAS's if_version (0: only if the key is absent).
	Expect uint64
}

// result is how an operation ended, as far as the model is concerned.
type result uint8

const (
	resOK         result = iota // done; Found, Value, Version say what it saw or wrote
	resExists                   // insert refused: the key exists (ErrAlreadyExists)
	resCondFailed               // CAS refused: Version is the tuple's actual version (ErrConditionFailed)
	resUnknown                  // a write that may or may not have been applied
)

// output is what the client was told.
type output struct {
	Result result
	// Found: for a read, the key exists; for replace and delete, it
	// existed before the write.
	Found bool
	// Value read, or deleted (delete with Found).
	Value string
	// Version: read or written (ok), the deleted tuple's (delete with
	// Found), the actual version (resCondFailed).
	Version uint64
}

// regState is one key's register.
type regState struct {
	Exists bool
	Value  string
	// Version is the tuple's version when Known (0 when the key is absent,
	// which is always Known).
	Version uint64
	Known   bool
	// Floor is the largest version of a write to this key the model has
	// seen: the next write's version is larger.
	Floor uint64
}

func absent(floor uint64) regState { return regState{Known: true, Floor: floor} }

// notAfter reports whether version v cannot come after version w: both
// are of the same replicaset and v is not larger.
func notAfter(v, w uint64) bool { return v>>48 == w>>48 && v <= w }

// learn returns s with its version v as observed; ok is false when v
// contradicts what the model knows.
func (s regState) learn(v uint64) (regState, bool) {
	if s.Known {
		return s, s.Version == v
	}
	if notAfter(v, s.Floor) {
		return s, false
	}
	s.Version, s.Known, s.Floor = v, true, v
	return s, true
}

// written returns the state after a write of value at version v; ok is
// false when v does not grow.
func (s regState) written(value string, v uint64) (regState, bool) {
	if notAfter(v, s.Floor) || (s.Known && notAfter(v, s.Version)) {
		return s, false
	}
	return regState{Exists: true, Value: value, Version: v, Known: true, Floor: v}, true
}

// writtenUnknown is the state after a write of unknown outcome took effect.
func (s regState) writtenUnknown(value string) regState {
	return regState{Exists: true, Value: value, Floor: s.Floor}
}

func one(s regState, ok bool) []any {
	if !ok {
		return nil
	}
	return []any{s}
}

func stepRegister(state, in, out any) []any {
	s, i, o := state.(regState), in.(input), out.(output)
	switch i.Kind {
	case opRead:
		if o.Result != resOK || o.Found != s.Exists {
			return nil
		}
		if !o.Found {
			return one(s, o.Version == 0)
		}
		if o.Value != s.Value {
			return nil
		}
		return one(s.learn(o.Version))
	case opInsert:
		switch o.Result {
		case resOK:
			if s.Exists {
				return nil
			}
			return one(s.written(i.Value, o.Version))
		case resExists:
			return one(s, s.Exists)
		case resUnknown:
			if s.Exists {
				return []any{s}
			}
			return []any{s.writtenUnknown(i.Value)}
		}
	case opReplace:
		switch o.Result {
		case resOK:
			if o.Found != s.Exists {
				return nil
			}
			return one(s.written(i.Value, o.Version))
		case resUnknown:
			return []any{s.writtenUnknown(i.Value)}
		}
	case opCAS:
		switch o.Result {
		case resOK:
			cur, ok := s.casHolds(i.Expect)
			if !ok {
				return nil
			}
			return one(cur.written(i.Value, o.Version))
		case resCondFailed:
			if o.Version == i.Expect {
				return nil
			}
			if !s.Exists {
				return one(s, o.Version == 0)
			}
			if o.Version == 0 {
				return nil
			}
			return one(s.learn(o.Version))
		case resUnknown:
			switch {
			case !s.Exists:
				if i.Expect == 0 {
					return []any{s.writtenUnknown(i.Value)}
				}
				return []any{s}
			case s.Known:
				if s.Version == i.Expect {
					return []any{s.writtenUnknown(i.Value)}
				}
				return []any{s}
			case i.Expect == 0:
				return []any{s}
			default:
				// The version is unknown: it may have been i.Expect.
				return []any{s, s.writtenUnknown(i.Value)}
			}
		}
	case opDelete:
		switch o.Result {
		case resOK:
			if o.Found != s.Exists {
				return nil
			}
			if !o.Found {
				return []any{s}
			}
			if o.Value != s.Value {
				return nil
			}
			cur, ok := s.learn(o.Version)
			return one(absent(cur.Floor), ok)
		case resUnknown:
			return []any{absent(s.Floor)}
		}
	}
	return nil
}

// casHolds reports whether a CAS expecting version e applies in state s,
// and the state with the version learnt.
func (s regState) casHolds(e uint64) (regState, bool) {
	if !s.Exists {
		return s, e == 0
	}
	if e == 0 {
		return s, false
	}
	return s.learn(e)
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[uint64][]porcupine.Operation{}
	var keys []uint64
	for _, op := range history {
		k := op.Input.(input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describeOp(in, out any) string {
	i, o := in.(input), out.(output)
	var call string
	switch i.Kind {
	case opRead, opDelete:
		call = fmt.Sprintf("%s(k%d)", i.Kind, i.Key)
	case opCAS:
		call = fmt.Sprintf("cas(k%d, if v%d, %s)", i.Key, i.Expect, i.Value)
	default:
		call = fmt.Sprintf("%s(k%d, %s)", i.Kind, i.Key, i.Value)
	}
	switch o.Result {
	case resExists:
		return call + " -> exists"
	case resCondFailed:
		return fmt.Sprintf("%s -> condition failed (v%d)", call, o.Version)
	case resUnknown:
		return call + " -> ?"
	}
	switch i.Kind {
	case opRead:
		if !o.Found {
			return call + " -> absent"
		}
		return fmt.Sprintf("%s -> %s@v%d", call, o.Value, o.Version)
	case opDelete:
		if !o.Found {
			return call + " -> was absent"
		}
		return fmt.Sprintf("%s -> deleted %s@v%d", call, o.Value, o.Version)
	case opReplace:
		return fmt.Sprintf("%s -> v%d (found %v)", call, o.Version, o.Found)
	}
	return fmt.Sprintf("%s -> v%d", call, o.Version)
}

func describeState(state any) string {
	s := state.(regState)
	if !s.Exists {
		return "absent"
	}
	if !s.Known {
		return s.Value + "@v?"
	}
	return fmt.Sprintf("%s@v%d", s.Value, s.Version)
}

// registerModel is the per-key model porcupine checks.
var registerModel = (&porcupine.NondeterministicModel{
	Partition:         partitionByKey,
	Init:              func() []any { return []any{absent(0)} },
	Step:              stepRegister,
	Equal:             func(a, b any) bool { return a.(regState) == b.(regState) },
	Hash:              hashState,
	DescribeOperation: describeOp,
	DescribeState:     describeState,
}).ToModel()

func hashState(state any) uint64 {
	s := state.(regState)
	h := fnv.New64a()
	fmt.Fprintf(h, "%t|%s|%d|%t|%d", s.Exists, s.Value, s.Version, s.Known, s.Floor)
	return h.Sum64()
}
