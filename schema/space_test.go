package schema

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

func offers() Definition {
	return Definition{
		Name: "offers",
		Format: tuple.Format{
			{Name: "shop", Type: tuple.TypeUnsigned}, {Name: "offer", Type: tuple.TypeString}, {Name: "price", Type: tuple.TypeDouble, Nullable: true},
		},
		PrimaryKey:  []int{0, 1},
		ShardingKey: []int{0},
	}
}

func TestCompileRefusesWhatIsWrong(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Definition)
		want string
	}{
		{"bad name", func(d *Definition) { d.Name = "1x" }, `invalid space name "1x"`},
		{"no key", func(d *Definition) { d.PrimaryKey = nil }, "no primary key"},
		{"key outside format", func(d *Definition) { d.PrimaryKey = []int{0, 5} }, "primary key field 6 does not exist (the format has 3 fields)"},
		{"key twice", func(d *Definition) { d.PrimaryKey = []int{0, 0} }, "field 1 (shop) appears twice"},
		{"nullable key", func(d *Definition) { d.PrimaryKey = []int{2} }, "primary key field 3 (price) is nullable"},
		{"no sharding key", func(d *Definition) { d.ShardingKey = nil }, "no sharding key: name at least one of the primary key's fields (shop, offer)"},
		{"sharding field outside the key", func(d *Definition) { d.ShardingKey = []int{2} }, "sharding key field 3 (price) is not in the primary key (shop, offer)"},
		{"sharding field missing", func(d *Definition) { d.ShardingKey = []int{7} }, "sharding key field 8 does not exist"},
		{"sharding field twice", func(d *Definition) { d.ShardingKey = []int{1, 1} }, "field 2 (offer) appears twice in the sharding key"},
		{"bad format", func(d *Definition) { d.Format = nil }, "space offers:"},
	}
	for _, c := range cases {
		d := offers()
		c.edit(&d)
		_, err := Compile(d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want it to say %q", c.name, err, c.want)
		}
	}
	if _, err := Compile(offers()); err != nil {
		t.Fatal(err)
	}
}

func TestKeysAndBuckets(t *testing.T) {
	sp, err := Compile(offers())
	if err != nil {
		t.Fatal(err)
	}
	tup := tuple.Tuple{tuple.Uint(7), tuple.String("a"), tuple.Double(1.5)}
	key, err := sp.KeyOf(tup)
	if err != nil || !reflect.DeepEqual(key, []tuple.Value{tuple.Uint(7), tuple.String("a")}) {
		t.Fatalf("KeyOf = %v, %v", key, err)
	}
	if _, err := sp.KeyOf(tup[:1]); err == nil || !strings.Contains(err.Error(), "field 2 (offer) is part of the primary key") {
		t.Fatalf("a short tuple: %v", err)
	}
	b, err := sp.BucketOf(key, 3000)
	want, _ := sharding.BucketOf(key[:1], 3000)
	if err != nil || b != want {
		t.Fatalf("BucketOf = %d, %v; the sharding key's bucket is %d", b, err, want)
	}
	// Keys that share the sharding key share the bucket.
	if b2, _ := sp.BucketOf([]tuple.Value{tuple.Uint(7), tuple.String("zzz")}, 3000); b2 != b {
		t.Fatalf("same sharding key, buckets %d and %d", b, b2)
	}
	if bc, err := sp.BucketOfChecked(key, 3000); err != nil || bc != b {
		t.Fatalf("BucketOfChecked = %d, %v; BucketOf %d", bc, err, b)
	}
	if _, err := sp.BucketOf(key[:1], 3000); err == nil || !strings.Contains(err.Error(), "a key has 2 parts (shop, offer), got 1") {
		t.Fatalf("a short key: %v", err)
	}
	if _, err := sp.BucketOf([]tuple.Value{tuple.String("x"), tuple.String("a")}, 3000); err == nil || !strings.Contains(err.Error(), "the key:") {
		t.Fatalf("a key of the wrong type: %v", err)
	}
	if _, err := sp.DecodeKey([]byte{0xc1}); err == nil {
		t.Fatal("a key that is not a tuple was decoded")
	}
	if k, err := sp.DecodeKey(tuple.AppendTuple(nil, key)); err != nil || !reflect.DeepEqual(k, key) {
		t.Fatalf("DecodeKey = %v, %v", k, err)
	}
}

// A sharding key chosen among the primary key's fields in any position
// hashes those fields' values, in its own order; one that is the key's
// leading fields places keys as a prefix always did.
func TestChosenShardingFields(t *testing.T) {
	q, err := Compile(Definition{
		Name: "queue",
		Format: tuple.Format{
			{Name: "stage", Type: tuple.TypeString}, {Name: "due_at", Type: tuple.TypeUnsigned}, {Name: "entity_id", Type: tuple.TypeString},
		},
		PrimaryKey:  []int{0, 1, 2},
		ShardingKey: []int{2},
	})
	if err != nil {
		t.Fatal(err)
	}
	entity, err := Compile(Definition{
		Name:        "entities",
		Format:      tuple.Format{{Name: "id", Type: tuple.TypeString}, {Name: "body", Type: tuple.TypeBytes}},
		PrimaryKey:  []int{0},
		ShardingKey: []int{0},
	})
	if err != nil {
		t.Fatal(err)
	}
	eb, _ := entity.BucketOf([]tuple.Value{tuple.String("e42")}, 3000)
	for _, stage := range []string{"photos", "price"} {
		for due := range uint64(3) {
			b, err := q.BucketOf([]tuple.Value{tuple.String(stage), tuple.Uint(due), tuple.String("e42")}, 3000)
			if err != nil || b != eb {
				t.Fatalf("queue row (%s, %d, e42) in bucket %d (%v), its entity in %d", stage, due, b, err, eb)
			}
		}
	}
	two, err := Compile(Definition{Name: "two", Format: q.Format(), PrimaryKey: []int{0, 1, 2}, ShardingKey: []int{2, 0}})
	if err != nil {
		t.Fatal(err)
	}
	key := []tuple.Value{tuple.String("s"), tuple.Uint(1), tuple.String("e")}
	got := two.ShardingValues(key)
	if !reflect.DeepEqual(got, []tuple.Value{tuple.String("e"), tuple.String("s")}) {
		t.Fatalf("sharding values %v, want (e, s)", got)
	}
	b, _ := two.BucketOf(key, 3000)
	want, _ := sharding.BucketOf([]tuple.Value{tuple.String("e"), tuple.String("s")}, 3000)
	if b != want {
		t.Fatalf("bucket %d, want %d", b, want)
	}
	prefix, err := Compile(Definition{Name: "p", Format: q.Format(), PrimaryKey: []int{0, 1, 2}, ShardingKey: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = prefix.BucketOf(key, 3000)
	want, _ = sharding.BucketOf(key[:2], 3000)
	if b != want {
		t.Fatalf("a leading-fields sharding key placed the key in %d, not %d", b, want)
	}
}

func TestAPIConversion(t *testing.T) {
	d := offers()
	d.ID, d.SchemaVersion = 4, 9
	api := ToAPI(d)
	if !reflect.DeepEqual(api.GetPrimaryKey(), []uint32{1, 2}) || api.GetFormat()[0].GetType() != "unsigned" {
		t.Fatalf("ToAPI = %v", api)
	}
	back, err := FromAPI(api)
	if err != nil || !reflect.DeepEqual(back, d) {
		t.Fatalf("FromAPI(ToAPI(d)) = %+v, %v; want %+v", back, err, d)
	}
	api.ShardingKey = nil
	if back, _ := FromAPI(api); !reflect.DeepEqual(back.ShardingKey, []int{0, 1}) {
		t.Fatalf("an empty sharding key gave %v, not the whole primary key", back.ShardingKey)
	}
	api.ShardingKey = []uint32{0}
	if _, err := FromAPI(api); err == nil || !strings.Contains(err.Error(), "sharding key field numbers start at 1") {
		t.Fatalf("sharding field number 0: %v", err)
	}
	api.PrimaryKey = []uint32{0}
	if _, err := FromAPI(api); err == nil || !strings.Contains(err.Error(), "field numbers start at 1") {
		t.Fatalf("field number 0: %v", err)
	}
	api = ToAPI(d)
	api.Format[1].Type = "text"
	if _, err := FromAPI(api); err == nil || !strings.Contains(err.Error(), "field 2 (offer)") {
		t.Fatalf("an unknown type: %v", err)
	}
}

// FuzzCompileAPI: whatever a caller sends as a space, a compiled one is
// consistent: its keys come from its tuples and land in a bucket.
func FuzzCompileAPI(f *testing.F) {
	seed, _ := proto.Marshal(ToAPI(offers()))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := &datav1.Space{}
		if proto.Unmarshal(data, msg) != nil {
			return
		}
		sp, err := CompileAPI(msg)
		if err != nil {
			return
		}
		back, err := FromAPI(ToAPI(sp.Definition()))
		if err != nil || !reflect.DeepEqual(back, sp.Definition()) {
			t.Fatalf("%v does not convert back: %+v, %v", msg, back, err)
		}
		if len(sp.KeyFormat()) != len(sp.PrimaryKey()) || len(sp.ShardingKey()) < 1 || len(sp.ShardingKey()) > len(sp.PrimaryKey()) {
			t.Fatalf("compiled %v inconsistently", msg)
		}
		// Every sharding field is a primary-key field: a key's sharding
		// values are among its own.
		key := make([]tuple.Value, len(sp.PrimaryKey()))
		for i := range key {
			key[i] = tuple.Uint(uint64(i))
		}
		for _, v := range sp.ShardingValues(key) {
			if n, _ := v.AsUint(); int(n) >= len(key) {
				t.Fatalf("%v: sharding value %v is not one of the key's", msg, v)
			}
		}
	})
}
