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

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardkit/shardkit/sharding"
)

// writeOffers writes an offers table as one Parquet file.
func writeOffers(tb testing.TB, path string, ks []sharding.OfferKey) {
	tb.Helper()
	w, err := createTableWriter(path, keyFields, map[string]string{"producer": "test"})
	if err != nil {
		tb.Fatal(err)
	}
	for _, k := range ks {
		r := record{key: k}
		if err := w.add(&r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.close(); err != nil {
		tb.Fatal(err)
	}
}

// readState reads a state table back as records.
func readState(t *testing.T, path string) (StateMeta, []record) {
	t.Helper()
	tab, meta, err := openState(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []record
	err = tab.scan(context.Background(), func(b []record) error {
		for _, r := range b {
			r.key.OfferID = strings.Clone(r.key.OfferID)
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return meta, rows
}

func readTable(t *testing.T, path string, state bool) []record {
	t.Helper()
	cols := newDocsColumns
	if state {
		cols = stateColumns
	}
	tab := &parquetTable{columns: cols, state: state}
	if err := tab.check(path, nil); err != nil {
		t.Fatal(err)
	}
	var rows []record
	err := tab.scan(context.Background(), func(b []record) error {
		for _, r := range b {
			r.key.OfferID = strings.Clone(r.key.OfferID)
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

var newDocsColumns = []string{colBusinessID, colOfferID, colShopID, colWarehouseID}

func testKeys(n int, prefix string) []sharding.OfferKey {
	ks := make([]sharding.OfferKey, n)
	for i := range ks {
		ks[i] = sharding.OfferKey{BusinessID: uint64(i % 7), OfferID: fmt.Sprintf("%s-%d", prefix, i), ShopID: uint64(i % 3), WarehouseID: 1}
	}
	return ks
}

// TestRunOnParquetMatchesTheAlgorithm runs three generations through Parquet
// files and checks each output against the same run on in-memory tables.
func TestRunOnParquetMatchesTheAlgorithm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Generation 2 lacks 60% of generation 1's offers: allowed here.
	o := Options{StateType: 4, Scheme: sharding.Builtin()[0], TTL: 1, TempDir: dir, AllowDropFraction: 1}
	gens := [][]sharding.OfferKey{
		testKeys(300, "a"),
		append(testKeys(200, "a"), testKeys(50, "b")...),
		append(testKeys(100, "a"), testKeys(120, "c")...),
	}
	var prevPath string
	var mem *memState
	for g, in := range gens {
		offers := filepath.Join(dir, fmt.Sprintf("offers-%d.parquet", g))
		writeOffers(t, offers, in)
		out := filepath.Join(dir, fmt.Sprintf("state-%d", g))
		tabs := Tables{InputState: prevPath, InputOffers: offers, OutputState: out,
			NewDocs: filepath.Join(dir, fmt.Sprintf("new-%d", g)), ExpiredDocs: filepath.Join(dir, fmt.Sprintf("expired-%d", g))}
		res, err := Run(context.Background(), tabs, o)
		if err != nil {
			t.Fatalf("generation %d: %v", g, err)
		}
		var memRes Result
		var memNew, memExp []record
		mem, memRes, memNew, memExp = runMem(t, mem, in, o)
		meta, rows := readState(t, out)
		if meta != mem.meta || meta != res.State {
			t.Fatalf("generation %d: metadata %+v, result %+v, in memory %+v", g, meta, res.State, mem.meta)
		}
		if fmt.Sprint(sortRows(rows)) != fmt.Sprint(sortRows(mem.rows)) {
			t.Fatalf("generation %d: state rows differ from the in-memory run", g)
		}
		gotNew, gotExp := readTable(t, tabs.NewDocs, false), readTable(t, tabs.ExpiredDocs, true)
		if len(gotNew) != len(memNew) || len(gotExp) != len(memExp) || res.New != memRes.New || res.Expired != memRes.Expired {
			t.Fatalf("generation %d: new %d/%d expired %d/%d", g, len(gotNew), len(memNew), len(gotExp), len(memExp))
		}
		if fmt.Sprint(sortRows(gotExp)) != fmt.Sprint(sortRows(memExp)) {
			t.Fatalf("generation %d: expired rows differ", g)
		}
		ins, err := Inspect(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		for sh, s := range ins.Shards {
			if s.Docs != res.Shards[sh].Docs || s.MaxDocID != res.Shards[sh].MaxDocID || s.Holes != res.Shards[sh].Holes {
				t.Fatalf("generation %d: inspect shard %d %+v, run said %+v", g, sh, s, res.Shards[sh])
			}
		}
		parts, _ := filepath.Glob(filepath.Join(out, "*.parquet"))
		if len(parts) != 16 {
			t.Fatalf("state has %d part files, want one per shard (16)", len(parts))
		}
		prevPath = out
	}
	// Nothing temporary is left next to the outputs.
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary outputs left: %v", left)
	}
}

// writeArrow writes a Parquet file with arbitrary columns.
func writeArrow(tb testing.TB, path string, fields []arrow.Field, kv map[string]string, fill func(b *array.RecordBuilder)) {
	tb.Helper()
	var md *arrow.Metadata
	if kv != nil {
		var ks, vs []string
		for k, v := range kv {
			ks, vs = append(ks, k), append(vs, v)
		}
		m := arrow.NewMetadata(ks, vs)
		md = &m
	}
	sc := arrow.NewSchema(fields, md)
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	fill(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

func TestRunAcceptsSignedAndExtraColumns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "offers.parquet")
	fields := []arrow.Field{
		{Name: "title", Type: arrow.BinaryTypes.String},
		{Name: colBusinessID, Type: arrow.PrimitiveTypes.Int64},
		{Name: colOfferID, Type: arrow.BinaryTypes.Binary},
		{Name: colShopID, Type: arrow.PrimitiveTypes.Int32},
		{Name: colWarehouseID, Type: arrow.PrimitiveTypes.Uint32},
	}
	writeArrow(t, in, fields, nil, func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).AppendValues([]string{"t1", "t2", "t3"}, nil)
		b.Field(1).(*array.Int64Builder).AppendValues([]int64{1, 2, 1}, nil)
		b.Field(2).(*array.BinaryBuilder).AppendStringValues([]string{"x", "y", "x"}, nil)
		b.Field(3).(*array.Int32Builder).AppendValues([]int32{5, 6, 5}, nil)
		b.Field(4).(*array.Uint32Builder).AppendValues([]uint32{0, 0, 0}, nil)
	})
	res, err := Run(context.Background(), Tables{InputOffers: in, OutputState: filepath.Join(dir, "s")}, Options{Scheme: sharding.Builtin()[3]})
	if err != nil {
		t.Fatal(err)
	}
	if res.Docs != 2 || res.Offers != 2 {
		t.Fatalf("result %+v: want 2 distinct offers (one duplicate row merged)", res)
	}
}

// TestBadInputIsRefusedAndLeavesNothing: each bad input ends with an error
// naming the problem, wrapping the package's sentinel, before any output
// appears.
func TestBadInputIsRefusedAndLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	goodOffers := filepath.Join(dir, "good.parquet")
	writeOffers(t, goodOffers, testKeys(50, "g"))
	scheme := sharding.Builtin()[0]
	goodState := filepath.Join(dir, "state")
	if _, err := Run(context.Background(), Tables{InputOffers: goodOffers, OutputState: goodState}, Options{StateType: 1, Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	uint64s := func(b array.Builder, vs ...uint64) { b.(*array.Uint64Builder).AppendValues(vs, nil) }
	missing := filepath.Join(dir, "missing-col.parquet")
	writeArrow(t, missing, []arrow.Field{{Name: colBusinessID, Type: arrow.PrimitiveTypes.Uint64}, {Name: colOfferID, Type: arrow.BinaryTypes.String}, {Name: colShopID, Type: arrow.PrimitiveTypes.Uint64}}, nil,
		func(b *array.RecordBuilder) {
			uint64s(b.Field(0), 1)
			b.Field(1).(*array.StringBuilder).Append("a")
			uint64s(b.Field(2), 1)
		})
	wrongType := filepath.Join(dir, "wrong-type.parquet")
	writeArrow(t, wrongType, []arrow.Field{{Name: colBusinessID, Type: arrow.PrimitiveTypes.Uint64}, {Name: colOfferID, Type: arrow.PrimitiveTypes.Int64}, {Name: colShopID, Type: arrow.PrimitiveTypes.Uint64}, {Name: colWarehouseID, Type: arrow.PrimitiveTypes.Uint64}}, nil,
		func(b *array.RecordBuilder) {
			uint64s(b.Field(0), 1)
			b.Field(1).(*array.Int64Builder).Append(7)
			uint64s(b.Field(2), 1)
			uint64s(b.Field(3), 1)
		})
	nulls := filepath.Join(dir, "nulls.parquet")
	writeArrow(t, nulls, []arrow.Field{{Name: colBusinessID, Type: arrow.PrimitiveTypes.Uint64, Nullable: true}, {Name: colOfferID, Type: arrow.BinaryTypes.String}, {Name: colShopID, Type: arrow.PrimitiveTypes.Uint64}, {Name: colWarehouseID, Type: arrow.PrimitiveTypes.Uint64}}, nil,
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Uint64Builder).AppendNull()
			b.Field(1).(*array.StringBuilder).Append("a")
			uint64s(b.Field(2), 1)
			uint64s(b.Field(3), 1)
		})
	negative := filepath.Join(dir, "negative.parquet")
	writeArrow(t, negative, []arrow.Field{{Name: colBusinessID, Type: arrow.PrimitiveTypes.Int64}, {Name: colOfferID, Type: arrow.BinaryTypes.String}, {Name: colShopID, Type: arrow.PrimitiveTypes.Uint64}, {Name: colWarehouseID, Type: arrow.PrimitiveTypes.Uint64}}, nil,
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(-5)
			b.Field(1).(*array.StringBuilder).Append("a")
			uint64s(b.Field(2), 1)
			uint64s(b.Field(3), 1)
		})
	data, err := os.ReadFile(goodOffers)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.parquet")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	notParquet := filepath.Join(dir, "text.parquet")
	if err := os.WriteFile(notParquet, []byte("business_id,offer_id\n1,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A state part whose metadata was stripped: an offers file posing as a state.
	noMeta := filepath.Join(dir, "nometa")
	if err := os.Mkdir(noMeta, 0o755); err != nil {
		t.Fatal(err)
	}
	writeArrow(t, filepath.Join(noMeta, "part-0.parquet"), stateFields, nil, func(b *array.RecordBuilder) {})

	// The same id and shard count under another name (and placement): the
	// binary's registry is not the one that wrote the state.
	renamed := sharding.BusinessHashScheme(scheme.ID, "business-as-0", scheme.Shards)

	tests := []struct {
		name   string
		tables Tables
		opts   Options
		want   error
		words  string
	}{
		{"missing column", Tables{InputOffers: missing}, Options{Scheme: scheme}, ErrBadInput, "warehouse_id"},
		{"wrong type", Tables{InputOffers: wrongType}, Options{Scheme: scheme}, ErrBadInput, "offer_id"},
		{"nulls", Tables{InputOffers: nulls}, Options{Scheme: scheme}, ErrBadInput, "null"},
		{"negative id", Tables{InputOffers: negative}, Options{Scheme: scheme}, ErrBadInput, "negative"},
		{"truncated", Tables{InputOffers: truncated}, Options{Scheme: scheme}, ErrBadInput, "truncated"},
		{"not parquet", Tables{InputOffers: notParquet}, Options{Scheme: scheme}, ErrBadInput, "Parquet"},
		{"empty directory", Tables{InputOffers: emptyDir}, Options{Scheme: scheme}, ErrBadInput, "no .parquet"},
		{"no such file", Tables{InputOffers: filepath.Join(dir, "nope")}, Options{Scheme: scheme}, ErrBadInput, "nope"},
		{"state without metadata", Tables{InputState: noMeta, InputOffers: goodOffers}, Options{Scheme: scheme}, ErrBadState, "metadata"},
		{"offers as state", Tables{InputState: goodOffers, InputOffers: goodOffers}, Options{Scheme: scheme}, ErrBadInput, "shard_id"},
		{"state of another type", Tables{InputState: goodState, InputOffers: goodOffers}, Options{StateType: 2, Scheme: scheme}, ErrIncompatibleState, "type"},
		{"state of another scheme", Tables{InputState: goodState, InputOffers: goodOffers}, Options{StateType: 1, Scheme: sharding.Builtin()[1]}, ErrIncompatibleState, "--rebuild-state-force"},
		{"state of a scheme renamed", Tables{InputState: goodState, InputOffers: goodOffers}, Options{StateType: 1, Scheme: renamed}, ErrBadState, `"offer-16"`},
		{"output exists", Tables{InputOffers: goodOffers, OutputState: goodState}, Options{Scheme: scheme}, ErrOutputExists, goodState},
		{"negative threshold", Tables{InputOffers: goodOffers}, Options{Scheme: scheme, RebuildThreshold: -1}, ErrBadOptions, "threshold"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tabs := tt.tables
			if tabs.OutputState == "" {
				tabs.OutputState = filepath.Join(dir, fmt.Sprintf("out-%d", i))
			}
			tabs.NewDocs = filepath.Join(dir, fmt.Sprintf("new-%d", i))
			_, err := Run(context.Background(), tabs, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.words) {
				t.Errorf("error %q does not say %q", err, tt.words)
			}
			if tabs.OutputState != goodState {
				if _, err := os.Stat(tabs.OutputState); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("output state exists after a refused run")
				}
			}
			if _, err := os.Stat(tabs.NewDocs); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("new docs table exists after a refused run")
			}
			left, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*-%d.tmp-*", i)))
			if len(left) != 0 {
				t.Errorf("temporary outputs left: %v", left)
			}
		})
	}
	// A changed scheme is accepted with --rebuild-state-force and re-places every offer.
	res, err := Run(context.Background(), Tables{InputState: goodState, InputOffers: goodOffers, OutputState: filepath.Join(dir, "resharded")},
		Options{StateType: 1, Scheme: sharding.Builtin()[1], ForceRebuild: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Version.Scheme != 1 || res.State.Version.Rebuild != 1 || res.Docs != 50 || res.Expired != 0 {
		t.Fatalf("resharding result %+v", res)
	}
	_, rows := readState(t, filepath.Join(dir, "resharded"))
	for _, r := range rows {
		if want := sharding.Builtin()[1].ShardOf(r.key); r.shard != want {
			t.Fatalf("%v on shard %d after resharding, scheme 1 says %d", r.key, r.shard, want)
		}
	}
	// So is a renamed one: its id is the state's, but its placement may differ.
	res, err = Run(context.Background(), Tables{InputState: goodState, InputOffers: goodOffers, OutputState: filepath.Join(dir, "renamed")},
		Options{StateType: 1, Scheme: renamed, ForceRebuild: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.State.SchemeName != renamed.Name || res.Docs != 50 || res.Expired != 0 {
		t.Fatalf("renamed-scheme result %+v", res)
	}
	_, rows = readState(t, filepath.Join(dir, "renamed"))
	moved := 0
	for _, r := range rows {
		if want := renamed.ShardOf(r.key); r.shard != want {
			t.Fatalf("%v on shard %d after resharding, the renamed scheme says %d", r.key, r.shard, want)
		}
		if r.shard != scheme.ShardOf(r.key) {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no offer placed differently by the renamed scheme: the test proves nothing")
	}
}

func FuzzReadOffersFile(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeOffers(f, good, testKeys(20, "f"))
	data, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)-10])
	f.Add(slices.Concat(data[:40], data[60:]))
	f.Add([]byte("PAR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// One file per worker process, rewritten for each input: a fresh
		// temporary directory per input makes minimizing very slow.
		p := filepath.Join(dir, "in.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tab, err := openOffers(p)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %v does not wrap ErrBadInput", err)
			}
			return
		}
		if tab.rows > 100_000 {
			// A few bytes of RLE can claim a billion rows: a valid (if
			// huge) table, not a decoder bug; reading it is just slow.
			t.Skip("footer claims", tab.rows, "rows")
		}
		err = tab.scan(context.Background(), func([]record) error { return nil })
		if err != nil && !errors.Is(err, ErrBadInput) {
			t.Fatalf("scan error %v does not wrap ErrBadInput", err)
		}
	})
}

func FuzzReadStateFile(f *testing.F) {
	dir := f.TempDir()
	in := filepath.Join(dir, "o.parquet")
	writeOffers(f, in, testKeys(30, "s"))
	st := filepath.Join(dir, "state")
	if _, err := Run(context.Background(), Tables{InputOffers: in, OutputState: st}, Options{Scheme: sharding.Builtin()[3]}); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(st, "part-00000.parquet"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)-20])
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "fuzz-state.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tab, _, err := openState(p)
		if err != nil {
			if !errors.Is(err, ErrBadInput) && !errors.Is(err, ErrBadState) {
				t.Fatalf("error %v wraps neither ErrBadInput nor ErrBadState", err)
			}
			return
		}
		if tab.rows > 100_000 {
			t.Skip("footer claims", tab.rows, "rows")
		}
		err = tab.scan(context.Background(), func([]record) error { return nil })
		if err != nil && !errors.Is(err, ErrBadInput) && !errors.Is(err, ErrBadState) {
			t.Fatalf("scan error %v", err)
		}
	})
}

// A state location that appears during the run fails the commit after the
// intermediate tables were renamed into place: they are removed again, the
// foreign state is kept, and abort leaves no temporary directory.
func TestFailedCommitLeavesNothingAtTheOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state, newDocs, expired := filepath.Join(dir, "state"), filepath.Join(dir, "new"), filepath.Join(dir, "expired")
	out, err := newDirOutputs(state, newDocs, expired)
	if err != nil {
		t.Fatal(err)
	}
	meta := StateMeta{Run: 1, SchemeName: "single", Shards: 1, Version: Version{Type: 1, Scheme: 3}}
	sw, err := out.openShard(0, meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(state, 0o755); err != nil { // another writer's
		t.Fatal(err)
	}
	err = out.commit()
	if !errors.Is(err, ErrOutputExists) || !strings.Contains(err.Error(), state) {
		t.Fatalf("commit = %v, want ErrOutputExists naming %s", err, state)
	}
	if err := out.abort(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{newDocs, expired} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after a failed commit (stat: %v)", p, err)
		}
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("the other writer's state was touched: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary outputs left: %v", left)
	}
}
