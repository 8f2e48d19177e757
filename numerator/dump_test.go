package numerator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

func TestDumpAStateAsJSONLinesAndAsATable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "offers.parquet")
	writeOffers(t, in, testKeys(40, "d"))
	st := filepath.Join(dir, "state")
	if _, err := Run(context.Background(), Tables{InputOffers: in, OutputState: st}, Options{Scheme: sharding.Builtin()[0]}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := Dump(t.Context(), st, &out, DumpOptions{})
	if err != nil || n != 40 {
		t.Fatalf("Dump = %d, %v; want the 40 rows", n, err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 40 || !strings.HasPrefix(lines[0], `{"business_id":`) {
		t.Fatalf("%d lines, the first %q", len(lines), lines[0])
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var row struct {
			OfferID     string `json:"offer_id"`
			ShardID     uint32 `json:"shard_id"`
			DocID       uint32 `json:"doc_id"`
			LastSeenRun uint64 `json:"last_seen_run"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil || row.LastSeenRun != 1 || !strings.HasPrefix(row.OfferID, "d") {
			t.Fatalf("line %q: %+v, %v", l, row, err)
		}
		seen[row.OfferID] = true
	}
	if len(seen) != 40 {
		t.Fatalf("%d distinct offers, want 40", len(seen))
	}

	out.Reset()
	n, err = Dump(t.Context(), in, &out, DumpOptions{Format: DumpTable, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("Dump --limit 3 = %d, %v", n, err)
	}
	rows := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(rows) != 4 || strings.Join(strings.Fields(rows[0]), " ") != "business_id offer_id shop_id warehouse_id" {
		t.Fatalf("table of 3 rows:\n%s", out.String())
	}
}

func TestDumpRefusesWhatIsNotParquet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeOffers(t, good, testKeys(20, "g"))
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":     nil,
		"text":      []byte("business_id,offer_id\n1,a\n"),
		"truncated": data[:len(data)/2],
		"no footer": data[:len(data)-8],
		"magic":     []byte("PAR1PAR1"),
	}
	for name, b := range cases {
		p := filepath.Join(dir, name+".parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Dump(t.Context(), p, io.Discard, DumpOptions{}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: Dump = %v, want ErrBadInput naming the file", name, err)
		}
	}
	if _, err := Dump(t.Context(), filepath.Join(dir, "missing"), io.Discard, DumpOptions{}); !errors.Is(err, ErrBadInput) {
		t.Errorf("a missing file: %v, want ErrBadInput", err)
	}
	for _, o := range []DumpOptions{{Format: "csv"}, {Limit: -1}} {
		if _, err := Dump(t.Context(), good, io.Discard, o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Dump with %+v = %v, want ErrBadOptions", o, err)
		}
	}
}

func FuzzDump(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeOffers(f, good, testKeys(20, "z"))
	data, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, false)
	f.Add(data[:len(data)-10], true)
	f.Add(append(append([]byte(nil), data[:40]...), data[60:]...), false)
	f.Add([]byte("PAR1"), true)
	f.Fuzz(func(t *testing.T, b []byte, table bool) {
		p := filepath.Join(dir, "in.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		o := DumpOptions{Limit: 1000} // a few bytes can claim a billion rows
		if table {
			o.Format = DumpTable
		}
		if _, err := Dump(context.Background(), p, io.Discard, o); err != nil && !errors.Is(err, ErrBadInput) {
			t.Fatalf("Dump error %v does not wrap ErrBadInput", err)
		}
	})
}

// Example: write an offers table in Go and read it back.
func ExampleNewOfferWriter() {
	dir, _ := os.MkdirTemp("", "offers-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "offers.parquet")
	w, err := NewOfferWriter(path)
	if err != nil {
		panic(err)
	}
	for _, k := range []sharding.OfferKey{
		{BusinessID: 1, OfferID: "sku-1", ShopID: 10, WarehouseID: 1},
		{BusinessID: 1, OfferID: "sku-2", ShopID: 10, WarehouseID: 2},
	} {
		if err := w.Write(k); err != nil {
			panic(err)
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	if _, err := Dump(context.Background(), path, os.Stdout, DumpOptions{}); err != nil {
		panic(err)
	}
	// Output:
	// {"business_id":1,"offer_id":"sku-1","shop_id":10,"warehouse_id":1}
	// {"business_id":1,"offer_id":"sku-2","shop_id":10,"warehouse_id":2}
}
