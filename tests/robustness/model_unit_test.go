package robustness

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// These run without a cluster (also under -short): they make sure the
// checker accepts what a correct store may answer and refuses what it may
// not, so that a robustness run that passes means something.

// op builds a record on key 1 of client c over [call, ret] (ms).
func op(c int, call, ret int64, in input, out output) record {
	if in.Key == 0 {
		in.Key = 1
	}
	return record{Client: c, In: in, Out: out, Call: call * 1e6, Return: ret * 1e6}
}

func ok(version uint64) output { return output{Result: resOK, Version: version} }

func okFound(version uint64) output { return output{Result: resOK, Found: true, Version: version} }

func read(value string, version uint64) output {
	return output{Result: resOK, Found: value != "", Value: value, Version: version}
}

func unknown(r record) record {
	r.Class, r.Out = clsUnknown, output{Result: resUnknown}
	return r
}

func ins(v string) input           { return input{Kind: opInsert, Value: v} }
func rep(v string) input           { return input{Kind: opReplace, Value: v} }
func cas(e uint64, v string) input { return input{Kind: opCAS, Expect: e, Value: v} }
func rd() input                    { return input{Kind: opRead} }
func del() input                   { return input{Kind: opDelete} }

func TestModel(t *testing.T) {
	cases := []struct {
		name string
		recs []record
		want porcupine.CheckResult
	}{
		{"sequential", []record{
			op(0, 0, 1, ins("a"), ok(5)),
			op(0, 2, 3, rd(), read("a", 5)),
			op(0, 4, 5, cas(5, "b"), ok(7)),
			op(1, 6, 7, rd(), read("b", 7)),
			op(1, 8, 9, rep("c"), okFound(9)),
			op(0, 10, 11, del(), output{Result: resOK, Found: true, Value: "c", Version: 9}),
			op(0, 12, 13, rd(), read("", 0)),
			op(1, 14, 15, ins("d"), ok(12)),
			op(1, 16, 17, ins("e"), output{Result: resExists}),
			op(0, 18, 19, cas(9, "f"), output{Result: resCondFailed, Version: 12}),
			op(0, 20, 21, cas(0, "g"), output{Result: resCondFailed, Version: 12}),
		}, porcupine.Ok},
		{"stale read", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(0, 20, 30, rep("b"), okFound(7)),
			op(1, 40, 50, rd(), read("a", 5)),
		}, porcupine.Illegal},
		{"read of the right value at another version", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 40, 50, rd(), read("a", 6)),
		}, porcupine.Illegal},
		{"cas against a version that is not the tuple's", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, cas(4, "b"), ok(7)),
		}, porcupine.Illegal},
		{"cas refused with the wrong actual version", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, cas(3, "b"), output{Result: resCondFailed, Version: 6}),
		}, porcupine.Illegal},
		{"cas refused although it held", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, cas(5, "b"), output{Result: resCondFailed, Version: 5}),
		}, porcupine.Illegal},
		{"version going back", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(0, 20, 30, rep("b"), okFound(4)),
		}, porcupine.Illegal},
		{"lost write", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, rd(), read("", 0)),
		}, porcupine.Illegal},
		{"insert refused on an absent key", []record{
			op(0, 0, 10, ins("a"), output{Result: resExists}),
		}, porcupine.Illegal},
		{"insert twice", []record{
			op(0, 0, 10, ins("a"), ok(5)),
			op(1, 20, 30, ins("b"), ok(7)),
		}, porcupine.Illegal},
		{"replace says found on an absent key", []record{
			op(0, 0, 10, rep("a"), okFound(5)),
		}, porcupine.Illegal},
		{"concurrent write seen before it returned", []record{
			op(0, 0, 100, rep("a"), ok(5)),
			op(1, 10, 20, rd(), read("", 0)),
			op(1, 30, 40, rd(), read("a", 5)),
		}, porcupine.Ok},
		{"unknown write seen later, its version learnt", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 20, 30, rep("b"), output{})),
			op(0, 100, 110, rd(), read("b", 9)),
			op(0, 120, 130, cas(9, "c"), ok(11)),
		}, porcupine.Ok},
		{"unknown write never applied", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 20, 30, rep("b"), output{})),
			op(0, 100, 110, rd(), read("a", 5)),
		}, porcupine.Ok},
		{"unknown write seen at a version below an earlier write's", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 20, 30, rep("b"), output{})),
			op(0, 100, 110, rd(), read("b", 4)),
		}, porcupine.Illegal},
		{"unknown cas on an unknown version", []record{
			unknown(op(0, 0, 10, rep("a"), output{})),
			unknown(op(1, 20, 30, cas(5, "b"), output{})),
			op(0, 100, 110, rd(), read("b", 8)),
		}, porcupine.Ok},
		{"unknown cas that could not hold", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 20, 30, cas(4, "b"), output{})),
			op(0, 100, 110, rd(), read("b", 8)),
		}, porcupine.Illegal},
		{"unknown delete", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 20, 30, del(), output{})),
			op(0, 100, 110, rd(), read("", 0)),
			op(0, 120, 130, ins("b"), ok(9)),
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			v := check(tc.recs, nil, time.Minute)
			if got := v.Linearizable.Result; got != tc.want {
				t.Fatalf("porcupine says %s (%s), want %s", got, v.Linearizable.Stage, tc.want)
			}
		})
	}
}

func TestValueChecks(t *testing.T) {
	cases := []struct {
		name  string
		recs  []record
		final map[uint64]output
		want  string // a problem containing this; "" for none
	}{
		{"clean", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, rd(), read("a", 5)),
		}, map[uint64]output{1: read("a", 5)}, ""},
		{"applied twice", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, rd(), read("a", 5)),
			op(1, 40, 50, rd(), read("a", 8)),
		}, nil, "applied more than once"},
		{"one version, two values", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(1, 20, 30, rep("b"), ok(5)),
		}, nil, "holds different writes"},
		{"phantom", []record{
			op(1, 20, 30, rd(), read("z", 5)),
		}, nil, "never written"},
		{"ErrUnavailable write applied", []record{
			func() record {
				r := op(0, 0, 10, rep("a"), output{Result: resUnknown})
				r.Class = clsNotApplied
				return r
			}(),
			op(1, 20, 30, rd(), read("a", 5)),
		}, nil, "ErrUnavailable"},
		{"refused insert applied", []record{
			op(0, 0, 10, rep("a"), ok(3)),
			op(0, 20, 30, ins("b"), output{Result: resExists}),
			op(1, 40, 50, rd(), read("b", 5)),
		}, nil, "refused write was applied"},
		{"lost write", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			op(0, 20, 30, rep("b"), okFound(9)),
		}, map[uint64]output{1: read("a", 5)}, "acknowledged write lost"},
		{"ro read from the future", []record{
			func() record {
				r := op(1, 20, 30, rd(), read("a", 5))
				r.Class = clsStaleRead
				return r
			}(),
			op(0, 40, 50, rep("a"), ok(5)),
		}, nil, "seen before it was written"},
		{"lost write, key gone", []record{
			op(0, 0, 10, rep("a"), ok(5)),
		}, map[uint64]output{1: read("", 0)}, "acknowledged write lost"},
		{"deleted after", []record{
			op(0, 0, 10, rep("a"), ok(5)),
			unknown(op(1, 5, 6, del(), output{})),
		}, map[uint64]output{1: read("", 0)}, ""},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			problems := append(checkValues(tc.recs), checkFinal(tc.recs, tc.final)...)
			if tc.want == "" {
				if len(problems) > 0 {
					t.Fatalf("problems in a clean history: %q", problems)
				}
				return
			}
			for _, p := range problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q: %q", tc.want, problems)
		})
	}
}

// A write that failed with ErrUnavailable but was applied and overwritten
// before anyone read it: only its version shows (a refused CAS).
func TestContractIndirect(t *testing.T) {
	notApplied := op(1, 20, 30, rep("b"), output{Result: resUnknown})
	notApplied.Class = clsNotApplied
	recs := []record{
		op(0, 0, 10, rep("a"), ok(5)),
		notApplied,
		op(0, 40, 50, cas(5, "c"), output{Result: resCondFailed, Version: 7}),
		op(0, 60, 70, cas(7, "d"), ok(9)),
	}
	v := check(recs, nil, time.Minute)
	if len(v.Problems) > 0 || v.Linearizable.Result != porcupine.Ok {
		t.Fatalf("with the write possibly applied the history is fine; got %s, %q", v.Linearizable.Result, v.Problems)
	}
	if v.Contract == nil || v.Contract.Result != porcupine.Illegal {
		t.Fatalf("the contract check passed: %+v", v.Contract)
	}
	if len(v.Culprits) != 1 || !strings.Contains(v.Culprits[0], "replace(k1, b)") {
		t.Fatalf("culprits %q, want the replace of b", v.Culprits)
	}
}
