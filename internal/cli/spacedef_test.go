package cli

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

func TestParseSpaceDef(t *testing.T) {
	t.Parallel()
	d, err := parseSpaceDef("offers", []string{"shop:unsigned", " offer:string , price:double?"}, "shop, offer", "shop")
	if err != nil {
		t.Fatal(err)
	}
	want := tuple.Format{{Name: "shop", Type: tuple.TypeUnsigned}, {Name: "offer", Type: tuple.TypeString}, {Name: "price", Type: tuple.TypeDouble, Nullable: true}}
	if d.Name != "offers" || !slices.Equal(d.Format, want) || !slices.Equal(d.PrimaryKey, []string{"shop", "offer"}) || !slices.Equal(d.ShardingKey, []string{"shop"}) {
		t.Errorf("parseSpaceDef = %+v", d)
	}
	if d, err := parseSpaceDef("x", []string{"a:uuid"}, "a", ""); err != nil || d.ShardingKey != nil {
		t.Errorf("no --sharding-key: %+v, %v; want the whole primary key (nil)", d, err)
	}
	if d, err := parseSpaceDef("x", []string{"a:string,b:integer"}, "a,b", "a,b"); err != nil || !slices.Equal(d.ShardingKey, []string{"a", "b"}) {
		t.Errorf("the whole key as --sharding-key: %+v, %v", d, err)
	}
	if d, err := parseSpaceDef("q", []string{"stage:string,due_at:unsigned,entity_id:string"}, "stage,due_at,entity_id", "entity_id"); err != nil || !slices.Equal(d.ShardingKey, []string{"entity_id"}) {
		t.Errorf("a sharding key of the primary key's last field: %+v, %v", d, err)
	}

	for _, c := range []struct {
		fields            []string
		primary, sharding string
		want              string
	}{
		{nil, "a", "", "--field is required"},
		{[]string{"a"}, "a", "", `--field: field spec "a" has no ':'`},
		{[]string{"a:int"}, "a", "", `unknown type "int"`},
		{[]string{"a:unsigned,"}, "a", "", "--field: an empty field spec"},
		{[]string{"1a:unsigned"}, "1a", "", "starts with a digit"},
		{[]string{"a:unsigned", "a:string"}, "a", "", "field 2 (a): the name is already field 1's"},
		{[]string{"a:unsigned"}, "", "", "--primary is required"},
		{[]string{"a:unsigned"}, "a,,a", "", `--primary "a,,a": an empty field name`},
		{[]string{"a:unsigned"}, "b", "", `--primary: no field "b"; the fields are a`},
		{[]string{"a:unsigned"}, "a,a", "", "--primary: field a is named twice"},
		{[]string{"a:unsigned?"}, "a", "", "--primary: field a is nullable (a:unsigned?)"},
		{[]string{"a:unsigned,b:string"}, "a", "a,b", "--sharding-key: field b is not in --primary a"},
		{[]string{"a:unsigned,b:string"}, "a,b", "c", `--sharding-key: no field "c"`},
	} {
		_, err := parseSpaceDef("x", c.fields, c.primary, c.sharding)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseSpaceDef(%q, %q, %q) = %v; want %q", c.fields, c.primary, c.sharding, err, c.want)
		}
	}
}

// FuzzParseSpaceDef: any flags either give a definition the cluster's
// rules accept (a valid format; a primary key of distinct, non-nullable
// fields; a sharding key of its first parts) that reads back the same from
// its own flags, or a one-line refusal naming a flag. Never a panic.
func FuzzParseSpaceDef(f *testing.F) {
	f.Add("shop:unsigned\noffer:string,price:double?", "shop,offer", "shop")
	f.Add("a:uuid", "a", "")
	f.Add("a:unsigned?,b:bytes", "b", "b")
	f.Add("a:string\n\nb:boolean", "a, b", "a,b")
	f.Add(":,", ",", ",")
	f.Fuzz(func(t *testing.T, fields, primary, sharding string) {
		d, err := parseSpaceDef("x", strings.Split(fields, "\n"), primary, sharding)
		if err != nil {
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Fatalf("refusal on several lines: %q", msg)
			}
			if !strings.Contains(msg, "--field") && !strings.Contains(msg, "--primary") && !strings.Contains(msg, "--sharding-key") {
				t.Fatalf("refusal %q names no flag", msg)
			}
			return
		}
		if err := d.Format.Validate(); err != nil {
			t.Fatalf("accepted an invalid format: %v", err)
		}
		if len(d.PrimaryKey) == 0 || len(d.PrimaryKey) > tuple.MaxKeyParts {
			t.Fatalf("primary key %q", d.PrimaryKey)
		}
		seen := map[string]bool{}
		for _, name := range d.PrimaryKey {
			i, ok := d.Format.Index(name)
			if !ok || d.Format[i].Nullable || seen[name] {
				t.Fatalf("primary key %q over %v", d.PrimaryKey, d.Format)
			}
			seen[name] = true
		}
		for _, name := range d.ShardingKey {
			if !slices.Contains(d.PrimaryKey, name) {
				t.Fatalf("sharding key %q outside primary key %q", d.ShardingKey, d.PrimaryKey)
			}
		}
		specs := make([]string, len(d.Format))
		for i, fd := range d.Format {
			specs[i] = fd.String()
		}
		again, err := parseSpaceDef("x", specs, strings.Join(d.PrimaryKey, ","), strings.Join(d.ShardingKey, ","))
		if err != nil || !slices.Equal(again.Format, d.Format) || !slices.Equal(again.PrimaryKey, d.PrimaryKey) || !slices.Equal(again.ShardingKey, d.ShardingKey) {
			t.Fatalf("%+v does not read back from its own flags: %+v, %v", d, again, err)
		}
	})
}

func TestCallList(t *testing.T) {
	t.Parallel()
	code, out, errOut := runMain(t, "call", "--list")
	if code != 0 || !regexpLine(out, `^count +ro +count\(space\)`) || !regexpLine(out, `^echo +ro`) || !regexpLine(out, `^buckets +ro`) {
		t.Errorf("call --list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	mine := proc.Procedure{Name: "mine", Mode: proc.RW, Doc: "mine(x): my own",
		Func: func(context.Context, proc.Context, tuple.Tuple) (tuple.Tuple, error) { return nil, nil }}
	var stdout, stderr strings.Builder
	if code := Main([]string{"call", "--list"}, nil, &stdout, &stderr, mine); code != 0 || !regexpLine(stdout.String(), `^mine +rw +mine\(x\): my own$`) {
		t.Errorf("call --list with a procedure of the binary: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	// A procedure named like a built-in: the binary refuses to start.
	mine.Name = "count"
	stdout.Reset()
	stderr.Reset()
	if code := Main([]string{"version"}, nil, &stdout, &stderr, mine); code != 1 || stderr.String() != "shardkit: this binary's procedures: proc: procedure count is already registered\n" {
		t.Errorf("a procedure named count: exit %d, stderr %q", code, stderr.String())
	}
	for _, args := range [][]string{{"call", "--list", "x"}, {"space", "nope"}} {
		if code, _, errOut := runMain(t, args...); code != 2 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
}
