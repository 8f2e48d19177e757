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
		PrimaryKey:       []int{0, 1},
		ShardingKeyParts: 1,
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
		{"sharding 0", func(d *Definition) { d.ShardingKeyParts = 0 }, "the sharding key must be 1 to 2 leading parts of the primary key, not 0"},
		{"sharding too long", func(d *Definition) { d.ShardingKeyParts = 3 }, "not 3"},
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
	if bt, err := sp.BucketOfTuple(tup, 3000); err != nil || bt != b {
		t.Fatalf("BucketOfTuple = %d, %v", bt, err)
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
	api.ShardingKeyParts = 0
	if back, _ := FromAPI(api); back.ShardingKeyParts != 2 {
		t.Fatalf("a sharding key of 0 parts gave %d, not the whole primary key", back.ShardingKeyParts)
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
		if len(sp.KeyFormat()) != len(sp.PrimaryKey()) || sp.ShardingKeyParts() < 1 || sp.ShardingKeyParts() > len(sp.PrimaryKey()) {
			t.Fatalf("compiled %v inconsistently", msg)
		}
	})
}
