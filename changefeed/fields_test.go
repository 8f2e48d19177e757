package changefeed

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// With KeyField and ValueField, a record is keyed by the named key field
// and its value is the named field's bytes as they are; a delete is a
// tombstone. The headers still place it.
func TestAKeyFieldAndAValueField(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, _ := cluster(ctx, t, 1)
	poll(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "x", Format: tuple.Format{
			{Name: "e", Type: tuple.TypeUnsigned}, {Name: "id", Type: tuple.TypeString}, {Name: "rec", Type: tuple.TypeBytes}},
			PrimaryKey: []string{"e", "id"}, ShardingKey: []string{"e"}}, true)
		return err
	})
	k := broker(t, 0, "")
	defer k.Close()
	cfg := baseConfig(c, k, "a")
	cfg.Spaces, cfg.KeyField, cfg.ValueField, cfg.Name = []string{"x"}, "id", "rec", "fx"
	p := startFeed(ctx, t, cfg)
	waitStarted(ctx, t, c, "fx", 4, p)

	x := c.Space("x")
	writes := []struct{ id, v string }{{"a", "v1"}, {"b", "w1"}, {"a", "v2"}, {"a", ""}}
	for _, w := range writes {
		var err error
		if w.v == "" {
			_, err = x.Delete(ctx, []tuple.Value{tuple.Uint(7), tuple.String(w.id)})
		} else {
			_, err = x.Replace(ctx, tuple.Tuple{tuple.Uint(7), tuple.String(w.id), tuple.Bytes([]byte(w.v))})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics(testTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string][]string{}
	n := 0
	for deadline := time.Now().Add(time.Minute); n < len(writes); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records came: %v", n, len(writes), got)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			if _, _, _, err := Position(r); err != nil {
				t.Errorf("record %q: %v", r.Value, err)
			}
			v := string(r.Value)
			if r.Value == nil {
				v = "<tombstone>"
			}
			got[string(r.Key)] = append(got[string(r.Key)], v)
			n++
		})
	}
	if a, b := strings.Join(got["a"], ","), strings.Join(got["b"], ","); a != "v1,v2,<tombstone>" || b != "w1" || len(got) != 2 {
		t.Fatalf("records by key: %v; want a: v1,v2,<tombstone> and b: w1", got)
	}
}

func TestKeyAndValueFieldsAreChecked(t *testing.T) {
	defs := []client.SpaceDef{{Name: "x", Format: tuple.Format{
		{Name: "e", Type: tuple.TypeUnsigned}, {Name: "id", Type: tuple.TypeString}, {Name: "n", Type: tuple.TypeUnsigned}, {Name: "rec", Type: tuple.TypeBytes}},
		PrimaryKey: []string{"e", "id"}, ShardingKey: []string{"e"}}}
	for _, tc := range []struct {
		key, value, want string
	}{
		{"rec", "", `key field "rec" is not in space x's primary key`},
		{"", "nope", `value field "nope" is not a field of space x`},
		{"", "n", `value field "n" of space x is unsigned; it must be string or bytes`},
		{"id", "rec", ""},
	} {
		l, err := layoutsOf(defs, Config{Spaces: []string{"x"}, KeyField: tc.key, ValueField: tc.value})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("key %q value %q: %v", tc.key, tc.value, err)
		case tc.want == "" && (l["x"].keyField != 1 || l["x"].valueField != 3):
			t.Errorf("key %q value %q: layout %+v, want the key field at 1 and the value at 3", tc.key, tc.value, l["x"])
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("key %q value %q = %v, want an error naming %q", tc.key, tc.value, err, tc.want)
		}
	}
	if _, err := layoutsOf(defs, Config{Spaces: []string{"y"}}); err == nil || !strings.Contains(err.Error(), `no space "y"`) {
		t.Errorf("a missing space = %v", err)
	}
}
