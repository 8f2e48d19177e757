package scheduler

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestApplyPatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		patch      Patch
		want       string
		err        bool
	}{
		{"sets and deletes", `{"a":1,"b":2}`, Patch{"b": nil, "c": json.RawMessage(`"x"`)}, `{"a":1,"c":"x"}`, false},
		{"empty body is an empty object", ``, Patch{"a": json.RawMessage(`1`)}, `{"a":1}`, false},
		{"not an object", `[1]`, Patch{"a": nil}, ``, true},
		{"null body", `null`, Patch{"a": nil}, ``, true},
		{"bad value", `{}`, Patch{"a": json.RawMessage(`{`)}, ``, true},
	}
	for _, tc := range tests {
		got, err := ApplyPatch([]byte(tc.body), tc.patch)
		if tc.err {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: ApplyPatch = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestChangedFields(t *testing.T) {
	t.Parallel()
	got, err := ChangedFields([]byte(`{"a":1,"b":{"x":1},"c":3}`), []byte(`{ "a" : 1, "b":{"x":2}, "d":4}`))
	if err != nil || !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("ChangedFields = %v, %v; want [b c d] (a is equal as compact JSON)", got, err)
	}
	if got, _ := ChangedFields([]byte(`{"a":1}`), []byte(`{"a":1}`)); len(got) != 0 {
		t.Fatalf("ChangedFields of equal bodies = %v", got)
	}
	if _, err := ChangedFields([]byte(`{}`), []byte(`7`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ChangedFields of a non-object = %v, want ErrInvalid", err)
	}
}

func TestMergeFields(t *testing.T) {
	t.Parallel()
	if got := MergeFields([]string{"b", "a"}, []string{"a", "c"}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("MergeFields = %v", got)
	}
	if got := MergeFields(nil, []string{"a"}); got != nil {
		t.Fatalf("MergeFields with every field = %v, want nil (every field)", got)
	}
}

func TestShardOfIsStableAndInRange(t *testing.T) {
	t.Parallel()
	// Stores and runners of one deployment must agree: the function is
	// fixed (xxhash64 of the id, mod shards).
	if got := ShardOf("offer-1", 1024); got != ShardOf("offer-1", 1024) || got < 0 || got >= 1024 {
		t.Fatalf("ShardOf = %d", got)
	}
	seen := map[int]bool{}
	for i := range 1000 {
		seen[ShardOf(string(rune('a'+i%26))+string(rune(i)), 8)] = true
	}
	if len(seen) != 8 {
		t.Fatalf("1000 ids fell in %d of 8 shards", len(seen))
	}
}

func TestStageConfigRefusals(t *testing.T) {
	t.Parallel()
	c := StageConfig{ID: "pricer", OwnFields: []string{"band"}}
	if err := c.checkResult(Result{Patch: Patch{"price": nil}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a patch of a field the stage does not own = %v, want ErrInvalid", err)
	}
	if err := c.checkResult(Result{Body: []byte(`{}`), Patch: Patch{"band": nil}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a body and a patch = %v, want ErrInvalid", err)
	}
	if err := c.checkResult(Result{Body: []byte(`"x"`)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a body that is not an object = %v, want ErrInvalid", err)
	}
	if err := c.checkResult(Result{Patch: Patch{"band": json.RawMessage(`"low"`)}}); err != nil {
		t.Fatalf("a patch of an own field = %v", err)
	}
	for _, bad := range []StageConfig{{ID: ""}, {ID: "x"}, {ID: "x", Stage: nil, MaxParallel: -1}} {
		if err := bad.fill(); !errors.Is(err, ErrInvalid) {
			t.Errorf("fill(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if !c.interested(nil) || !c.interested([]string{"x"}) {
		t.Fatal("a stage with no declared fields must hear of every change")
	}
	c.Fields = []string{"price"}
	if c.interested([]string{"title"}) || !c.interested([]string{"title", "price"}) {
		t.Fatal("field interest: asked about the wrong changes")
	}
}

func FuzzBodies(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte(`{"a":2,"b":[1]}`))
	f.Add([]byte(``), []byte(`null`))
	f.Add([]byte(`{"a":"x"}`), []byte("{\"a\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		// Bodies come from outside (Put) and from stages: never a panic,
		// and a field reported changed is one whose patch changes it.
		fields, err := ChangedFields(a, b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ChangedFields error %v is not ErrInvalid", err)
			}
			return
		}
		p := Patch{}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		for _, fld := range fields {
			p[fld] = m[fld]
		}
		patched, err := ApplyPatch(a, p)
		if err != nil {
			t.Fatalf("ApplyPatch of the changed fields: %v", err)
		}
		if rest, err := ChangedFields(patched, b); err != nil || len(rest) != 0 {
			t.Fatalf("a patch of the changed fields %v leaves %v changed (%v)", fields, rest, err)
		}
	})
}
