package meta

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

func testSpace(name string) *metapb.Space {
	return &metapb.Space{
		Name: name,
		Format: []*metapb.Field{
			{Name: "shop", Type: "unsigned"}, {Name: "offer", Type: "string"}, {Name: "price", Type: "double", Nullable: true},
		},
		PrimaryKey:  []uint32{0, 1},
		ShardingKey: []uint32{0},
	}
}

func createCmd(sp *metapb.Space, ifNotExists bool) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_CreateSpace{CreateSpace: &metapb.CreateSpace{Space: sp, IfNotExists: ifNotExists}}}
}

func dropCmd(name string) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_DropSpace{DropSpace: &metapb.DropSpace{Name: name}}}
}

func TestSpacesGetIdsAndRaiseTheSchemaVersion(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	a := f.must(createCmd(testSpace("offers"), false)).Space
	b := f.must(createCmd(testSpace("states"), false)).Space
	if a.GetId() != 1 || b.GetId() != 2 || a.GetSchemaVersion() != 1 || b.GetSchemaVersion() != 2 {
		t.Fatalf("ids/versions %d/%d %d/%d, want 1/1 2/2", a.GetId(), a.GetSchemaVersion(), b.GetId(), b.GetSchemaVersion())
	}
	f.refused(createCmd(testSpace("offers"), false), `space "offers" already exists`)
	// The same definition with if_not_exists is no change; another one is refused.
	if r := f.must(createCmd(testSpace("offers"), true)); r.Space.GetId() != 1 || f.sm.State().Props.GetSchemaVersion() != 2 {
		t.Fatalf("if_not_exists of the same space: %v, schema version %d", r.Space, f.sm.State().Props.GetSchemaVersion())
	}
	other := testSpace("offers")
	other.ShardingKey = []uint32{1}
	f.refused(createCmd(other, true), "already exists (id 1) with another definition (if-not-exists accepts only the same one)")

	f.must(dropCmd("offers"))
	f.refused(dropCmd("offers"), `no space "offers"`)
	c := f.must(createCmd(testSpace("offers"), false)).Space
	if c.GetId() != 3 || f.sm.State().Props.GetSchemaVersion() != 4 {
		t.Fatalf("recreated space id %d (schema %d), want a new id 3 at version 4: ids are never reused", c.GetId(), f.sm.State().Props.GetSchemaVersion())
	}
	if len(f.sm.State().SortedSpaces()) != 2 {
		t.Fatalf("spaces %v", f.sm.State().SortedSpaces())
	}
}

func TestSpaceDefinitionsAreValidatedAtApply(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	for _, tc := range []struct {
		name string
		edit func(*metapb.Space)
		want string
	}{
		{"bad name", func(s *metapb.Space) { s.Name = "1x" }, "invalid space name"},
		{"no format", func(s *metapb.Space) { s.Format = nil }, "space x"},
		{"bad type", func(s *metapb.Space) { s.Format[2].Type = "float" }, `field 3 (price)`},
		{"duplicate field", func(s *metapb.Space) { s.Format[1].Name = "shop" }, "shop"},
		{"no primary key", func(s *metapb.Space) { s.PrimaryKey = nil }, "no primary key"},
		{"key field missing", func(s *metapb.Space) { s.PrimaryKey = []uint32{7} }, "primary key field 8 does not exist"},
		{"key field twice", func(s *metapb.Space) { s.PrimaryKey = []uint32{0, 0} }, "appears twice"},
		{"nullable key", func(s *metapb.Space) { s.PrimaryKey = []uint32{2} }, "nullable"},
		{"sharding field outside the key", func(s *metapb.Space) { s.ShardingKey = []uint32{2} }, "sharding key field 3 (price) is not in the primary key (shop, offer)"},
		{"sharding field missing", func(s *metapb.Space) { s.ShardingKey = []uint32{9} }, "sharding key field 10 does not exist"},
		{"sharding field twice", func(s *metapb.Space) { s.ShardingKey = []uint32{1, 1} }, "field 2 (offer) appears twice in the sharding key"},
		{"no sharding key", func(s *metapb.Space) { s.ShardingKey = nil }, "no sharding key"},
	} {
		sp := testSpace("x")
		tc.edit(sp)
		r := f.apply(createCmd(sp, false))
		if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, r.Err, tc.want)
		}
	}
	if n := len(f.sm.State().Spaces); n != 0 || f.sm.State().Props.GetSchemaVersion() != 0 {
		t.Fatalf("refused definitions left %d spaces, schema version %d", n, f.sm.State().Props.GetSchemaVersion())
	}
}

func TestSameDefinitionIgnoresIdAndVersion(t *testing.T) {
	a, b := testSpace("s"), testSpace("s")
	b.Id, b.SchemaVersion = 9, 9
	if !sameDefinition(a, b) {
		t.Fatal("spaces differing only by id and version are not the same definition")
	}
	c := proto.CloneOf(a)
	c.Format[0].Nullable = true
	if sameDefinition(a, c) {
		t.Fatal("a nullable field was not seen as a difference")
	}
}

func FuzzCompileSpace(f *testing.F) {
	seed, _ := proto.Marshal(testSpace("offers"))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		sp := &metapb.Space{}
		if proto.Unmarshal(data, sp) != nil {
			return
		}
		c, err := CompileSpace(sp)
		if err != nil {
			return
		}
		// A valid definition has a usable format and key, and group 0's
		// message converts back to the same definition.
		if c.Format().Validate() != nil || len(c.PrimaryKey()) == 0 || len(c.ShardingKey()) == 0 || len(c.ShardingKey()) > len(c.PrimaryKey()) {
			t.Fatalf("accepted %v", sp)
		}
		back, err := SpaceDefinition(SpaceMessage(c.Definition()))
		if err != nil || !reflect.DeepEqual(back, c.Definition()) {
			t.Fatalf("%v converts back to %+v (%v), not %+v", sp, back, err, c.Definition())
		}
	})
}
