package numerator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/shardkit/shardkit/sharding"
)

// writeStateFile writes rows as a state part with the given metadata.
func writeStateFile(t *testing.T, path string, rows []record, kv map[string]string) {
	t.Helper()
	writeArrow(t, path, stateFields, kv, func(b *array.RecordBuilder) {
		for _, r := range rows {
			b.Field(0).(*array.Uint64Builder).Append(r.key.BusinessID)
			b.Field(1).(*array.StringBuilder).Append(r.key.OfferID)
			b.Field(2).(*array.Uint64Builder).Append(r.key.ShopID)
			b.Field(3).(*array.Uint64Builder).Append(r.key.WarehouseID)
			b.Field(4).(*array.Uint32Builder).Append(r.shard)
			b.Field(5).(*array.Uint32Builder).Append(r.doc)
			b.Field(6).(*array.Uint64Builder).Append(r.lastSeen)
		}
	})
}

// TestStreamedAndLoadedStatesAgree: a state as this package writes it (one
// sorted part per shard) is streamed; the same rows shuffled into one file
// are loaded and sorted; both runs give the same output. A part that claims
// sorted rows but is not is refused.
func TestStreamedAndLoadedStatesAgree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{StateType: 1, Scheme: sharding.Builtin()[0], TTL: 1}
	in0, in1 := filepath.Join(dir, "o0.parquet"), filepath.Join(dir, "o1.parquet")
	writeOffers(t, in0, testKeys(400, "x"))
	writeOffers(t, in1, append(testKeys(300, "x"), testKeys(80, "y")...))
	s0 := filepath.Join(dir, "s0")
	if _, err := Run(context.Background(), Tables{InputOffers: in0, OutputState: s0}, o); err != nil {
		t.Fatal(err)
	}
	tab, meta, err := openState(s0)
	if err != nil {
		t.Fatal(err)
	}
	if tab.sortedShards(16) == nil {
		t.Fatal("a state written by Run is not streamable")
	}
	_, rows := readState(t, s0)
	kv := meta.keyValues(tableState, 0)
	delete(kv, metaShard)
	shuffled := filepath.Join(dir, "one-file.parquet")
	rev := slices.Clone(rows)
	slices.Reverse(rev)
	writeStateFile(t, shuffled, rev, kv)
	if tab, _, err := openState(shuffled); err != nil || tab.sortedShards(16) != nil {
		t.Fatalf("a single unsorted file: %v, streamable=%v", err, tab != nil && tab.sortedShards(16) != nil)
	}

	outs := map[string]string{}
	for name, st := range map[string]string{"streamed": s0, "loaded": shuffled} {
		out := filepath.Join(dir, "s1-"+name)
		if _, err := Run(context.Background(), Tables{InputState: st, InputOffers: in1, OutputState: out}, o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, got := readState(t, out)
		outs[name] = fmt.Sprint(sortRows(got))
	}
	if outs["streamed"] != outs["loaded"] {
		t.Fatal("the streamed and the loaded state gave different outputs")
	}

	// Shard 3's part rewritten in reverse, metadata kept: refused, not misread.
	bad := filepath.Join(dir, "bad")
	if err := CopyTable(s0, bad); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(bad, "part-00003.parquet")
	var shard3 []record
	for _, r := range rows {
		if r.shard == 3 {
			shard3 = append(shard3, r)
		}
	}
	slices.Reverse(shard3)
	if err := os.Remove(part); err != nil {
		t.Fatal(err)
	}
	writeStateFile(t, part, shard3, meta.keyValues(tableState, 3))
	_, err = Run(context.Background(), Tables{InputState: bad, InputOffers: in1, OutputState: filepath.Join(dir, "s1-bad")}, o)
	if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("unsorted part: %v, want ErrBadState out of order", err)
	}
	// A forced rebuild loads and sorts instead, so it accepts the part.
	o.ForceRebuild = true
	if _, err := Run(context.Background(), Tables{InputState: bad, InputOffers: in1, OutputState: filepath.Join(dir, "s1-rebuilt")}, o); err != nil {
		t.Fatalf("forced rebuild of an unsorted state: %v", err)
	}
}
