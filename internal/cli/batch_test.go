package cli

import (
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// batchDefs is the spaces parseBatch knows in these tests: fence (name
// string, ticket unsigned, note string?) and queue (entity string, seq
// unsigned).
func batchDefs(name string) (client.SpaceDef, bool) {
	switch name {
	case "fence":
		return client.SpaceDef{Name: "fence", Format: tuple.Format{
			{Name: "name", Type: tuple.TypeString}, {Name: "ticket", Type: tuple.TypeUnsigned}, {Name: "note", Type: tuple.TypeString, Nullable: true},
		}, PrimaryKey: []string{"name"}}, true
	case "queue":
		return client.SpaceDef{Name: "queue", Format: tuple.Format{{Name: "entity", Type: tuple.TypeString}, {Name: "seq", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"entity", "seq"}}, true
	}
	return client.SpaceDef{}, false
}

func TestParseBatch(t *testing.T) {
	t.Parallel()
	ops, err := parseBatch([]byte(`[
		{"check": ["a"], "if_version": 0, "where": [["ticket", "<=", 5], [3, "!=", null], ["note", "==", "x"]]},
		{"update": ["a"], "ops": [["max", "ticket", 5]], "if_version": 7},
		{"insert": ["a", 1, null], "if_absent": true},
		{"replace": ["b", 2]},
		{"upsert": ["c", 3], "ops": [["+", 2, 1]]},
		{"delete": ["e", 1], "space": "queue"}]`), "fence", batchDefs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 6 {
		t.Fatalf("%d ops", len(ops))
	}
	c := ops[0]
	want := []client.Condition{
		{Field: "ticket", Compare: client.LE, Value: tuple.Uint(5)},
		{Number: 3, Compare: client.NE, Value: tuple.Null()},
		{Field: "note", Compare: client.EQ, Value: tuple.String("x")},
	}
	if c.kind != "check" || c.space != "fence" || *c.ifVersion != 0 || len(c.where) != 3 || !c.key[0].Equal(tuple.String("a")) {
		t.Fatalf("check op %+v", c)
	}
	for i := range want {
		if c.where[i] != want[i] {
			t.Errorf("condition %d = %+v, want %+v", i+1, c.where[i], want[i])
		}
	}
	if u := ops[1]; u.kind != "update" || *u.ifVersion != 7 || len(u.ops) != 1 || u.ops[0].Code != tuple.OpMax {
		t.Errorf("update op %+v", u)
	}
	if i := ops[2]; i.kind != "insert" || !i.ifAbsent || len(i.tuple) != 3 {
		t.Errorf("insert op %+v", i)
	}
	if d := ops[5]; d.kind != "delete" || d.space != "queue" || len(d.key) != 2 {
		t.Errorf("delete op %+v", d)
	}
	for _, c := range []struct{ in, want string }{
		{`{}`, "the ops must be a JSON array of objects"},
		{`[]`, "an empty array"},
		{`[{"insert": ["a", 1]}`, "the ops are not valid JSON"},
		{`[5]`, "op 1: must be an object such as"},
		{`[{"space": "fence"}]`, "op 1: names 0 kinds of op (); give exactly one of insert, replace, update, upsert, delete, check"},
		{`[{"insert": ["a", 1]}, {"insert": ["a", 1], "delete": ["a"]}]`, "op 2: names 2 kinds of op (insert, delete)"},
		{`[{"insert": ["a", 1], "if_version": 0}]`, `op 1 (insert in fence): unknown key "if_version" for a insert; it takes "space", "if_absent"`},
		{`[{"delete": ["a"], "space": "nope"}]`, `op 1 (delete in nope): no space "nope"`},
		{`[{"delete": ["a"], "space": 5}]`, `op 1 (delete in fence): "space" must be a space's name, got 5`},
		{`[{"insert": ["a", "x"]}]`, `op 1 (insert in fence): the tuple: element 2 (ticket): expected unsigned, got string "x"`},
		{`[{"check": ["a", 1]}]`, "op 1 (check in fence): the key"},
		{`[{"check": ["a"]}]`, `op 1 (check in fence): a check needs "if_version" or "where" conditions`},
		{`[{"check": ["a"], "where": [["ticket", "<", "x"]]}]`, `condition 1 (ticket <): expected unsigned, got string "x" (the field is ticket:unsigned)`},
		{`[{"check": ["a"], "where": [["ticket", "=<", 1]]}]`, `condition 1 (field ticket): unknown comparison "=<"`},
		{`[{"check": ["a"], "where": [["nope", "=", 1]]}]`, `condition 1: no field "nope" (the fields: name:string, ticket:unsigned, note:string?)`},
		{`[{"check": ["a"], "where": [[4, "=", 1]]}]`, "condition 1: the field must be a name or a number from 1 to 3, got 4"},
		{`[{"check": ["a"], "where": [["ticket", "="]]}]`, "condition 1 must be [field, comparison, value]"},
		{`[{"check": ["a"], "where": {"ticket": 1}}]`, `"where" must be an array of conditions`},
		{`[{"check": ["a"], "if_version": -1}]`, `"if_version" must be an unsigned integer (0: no tuple), got -1`},
		{`[{"insert": ["a", 1], "if_absent": "yes"}]`, `"if_absent" must be true or false, got "yes"`},
		{`[{"update": ["a"]}]`, `op 1 (update in fence): an update needs "ops"`},
		{`[{"update": ["a"], "ops": [[">", "ticket", 1]]}]`, `op 1 (update in fence): the update: op 1: unknown operator string ">"`},
	} {
		_, err := parseBatch([]byte(c.in), "fence", batchDefs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseBatch(%s) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func FuzzParseBatch(f *testing.F) {
	f.Add([]byte(`[{"check": ["a"], "if_version": 0, "where": [["ticket", "<=", 5], [3, "!=", null]]}, {"update": ["a"], "ops": [["max", "ticket", 5]]}]`))
	f.Add([]byte(`[{"insert": ["a", 1, null], "if_absent": true}, {"delete": ["e", 1], "space": "queue"}, {"upsert": ["c", 3], "ops": [["min", 2, 1]]}]`))
	f.Add([]byte(`[{"check": ["a"], "where": [["note", ">=", "\ud800"], [1, "==", 1e400]]}, {"replace": ["b", 18446744073709551616]}]`))
	f.Add([]byte(`[{"check": [], "where": [[], [0, "", 0], ["", "<", {}]]}, {"space": null, "insert": null}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := parseBatch(data, "fence", batchDefs)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "op ") && !strings.HasPrefix(err.Error(), "the ops") && !strings.Contains(err.Error(), "ops; a batch has at most") {
				t.Fatalf("error %q does not name the op", err)
			}
			return
		}
		if len(ops) == 0 || len(ops) > maxBatchOps {
			t.Fatalf("%d ops accepted", len(ops))
		}
		for i, op := range ops {
			def, ok := batchDefs(op.space)
			if !ok {
				t.Fatalf("op %d names space %q", i+1, op.space)
			}
			switch op.kind {
			case "insert", "replace", "upsert":
				if err := def.Format.Check(op.tuple); err != nil {
					t.Fatalf("op %d: a tuple its format refuses: %v", i+1, err)
				}
			case "check":
				if op.ifVersion == nil && len(op.where) == 0 {
					t.Fatalf("op %d: a check without conditions", i+1)
				}
				for _, c := range op.where {
					n := c.Number - 1
					if c.Field != "" {
						n, _ = def.Format.Index(c.Field)
					}
					if err := def.Format.CheckField(n, c.Value); err != nil || c.Compare < client.EQ || c.Compare > client.GE {
						t.Fatalf("op %d: condition %+v: %v", i+1, c, err)
					}
				}
			}
		}
	})
}

func TestBatchCommand(t *testing.T) {
	t.Parallel()
	addr := dataCluster(t)
	runCases(t, addr, []cliCase{
		{name: "create", args: []string{"space", "create", "leases", "--field", "name:string,ticket:unsigned,note:string?", "--primary", "name"}, out: "-"},
		{name: "create queue", args: []string{"space", "create", "jobs", "--field", "name:string,seq:unsigned", "--primary", "name,seq", "--sharding-key", "name"}, out: "-"},
		{name: "offer", args: []string{"insert", "--if-absent", "leases", `["a", 5]`}, out: "-"},
		{name: "offer again", args: []string{"insert", "--if-absent", "leases", `["a", 9]`}, out: "-"},
		{name: "fenced write", args: []string{"batch", "leases", `[{"check": ["a"], "where": [["ticket", "<=", 6]]},
			{"update": ["a"], "ops": [["max", "ticket", 6]]}, {"insert": ["a", 1], "space": "jobs"}]`}, out: "-"},
		{name: "stale ticket", args: []string{"batch", "leases", "-"}, stdin: `[{"check": ["a"], "where": [["name", "=", "a"], ["ticket", "<=", 5]]},
			{"insert": ["a", 2], "space": "jobs"}]`,
			code: 1, err: []string{"batch in leases", "op 1 (check in space leases): condition 2 (ticket <= 5) does not hold: the field is 6"}},
		{name: "usage error names the op", args: []string{"batch", "leases", `[{"delete": ["a"]}, {"check": ["a"], "where": [["ticket", "<", "x"]]}]`},
			code: 2, err: []string{"batch in leases: op 2 (check in leases): condition 1 (ticket <): expected unsigned"}},
		{name: "another bucket", args: []string{"batch", "leases", `[{"delete": ["a"]}, {"delete": ["b"]}]`},
			code: 2, err: []string{"op 2 is in bucket"}},
		{name: "no such space", args: []string{"batch", "nope", `[{"delete": ["a"]}]`}, code: 1, err: []string{`no space "nope"`}},
		{name: "one argument", args: []string{"batch", "leases"}, code: 2, err: []string{"batch takes 2 arguments, SPACE OPS; got 1"}},
	})
	code, out, errOut := runMain(t, "insert", "--if-absent", "leases", `["b", 1]`, "--peer", addr)
	if code != 0 || !strings.HasPrefix(out, `{"inserted":true,"tuple":["b",1],"version":`) {
		t.Fatalf("insert --if-absent: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runMain(t, "insert", "--if-absent", "leases", `["b", 2]`, "--peer", addr)
	if code != 0 || !strings.HasPrefix(out, `{"inserted":false,"tuple":["b",1],"version":`) {
		t.Fatalf("insert --if-absent of an existing key: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runMain(t, "batch", "leases", `[{"check": ["a"], "where": [["ticket", "=", 6]]}, {"insert": ["a", 2], "space": "jobs"}, {"check": ["a", 9], "space": "jobs", "if_version": 0}]`, "--peer", addr)
	if code != 0 || !regexpLine(out, `\[\{"op":"check","found":true,"tuple":null,"version":\d+\},\{"op":"insert","found":false,"tuple":\["a",2\],"version":\d+\},\{"op":"check","found":false,"tuple":null,"version":0\}\]`) {
		t.Fatalf("batch: exit %d, %q, %q", code, out, errOut)
	}
	// The stale ticket's batch applied nothing: jobs holds ["a",1] and ["a",2] only.
	code, out, _ = runMain(t, "select", "jobs", `["a", 2]`, "--peer", addr)
	if code != 0 || out != "[[\"a\",2]]\n" {
		t.Fatalf("select jobs: %d %q", code, out)
	}
}
