// Command pqbench compares parquet-go and arrow-go/parquet on the numerator's
// table shapes: writes and reads the offers table and the state table.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pq "github.com/parquet-go/parquet-go"
)

type Offer struct {
	BusinessID  uint64 `parquet:"business_id"`
	OfferID     string `parquet:"offer_id"`
	ShopID      uint64 `parquet:"shop_id"`
	WarehouseID uint64 `parquet:"warehouse_id"`
}

type StateRow struct {
	BusinessID  uint64 `parquet:"business_id"`
	OfferID     string `parquet:"offer_id"`
	ShopID      uint64 `parquet:"shop_id"`
	WarehouseID uint64 `parquet:"warehouse_id"`
	ShardID     uint32 `parquet:"shard_id"`
	DocID       uint32 `parquet:"doc_id"`
	LastSeenRun uint64 `parquet:"last_seen_run"`
}

func gen(n int) []StateRow {
	r := rand.New(rand.NewPCG(1, 2))
	rows := make([]StateRow, n)
	for i := range rows {
		rows[i] = StateRow{
			BusinessID:  uint64(r.IntN(100000)),
			OfferID:     "offer-" + strconv.FormatUint(r.Uint64()%1e12, 36),
			ShopID:      uint64(r.IntN(1000000)),
			WarehouseID: uint64(r.IntN(100)),
			ShardID:     uint32(i % 16),
			DocID:       uint32(i / 16),
			LastSeenRun: uint64(10 + r.IntN(3)),
		}
	}
	return rows
}

const batch = 64 * 1024

// ---- parquet-go ----

func pgWriteOffers(path string, rows []StateRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pq.NewGenericWriter[Offer](f, pq.Compression(&pq.Snappy))
	buf := make([]Offer, 0, batch)
	for i := 0; i < len(rows); i += batch {
		buf = buf[:0]
		for _, r := range rows[i:min(i+batch, len(rows))] {
			buf = append(buf, Offer{r.BusinessID, r.OfferID, r.ShopID, r.WarehouseID})
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func pgWriteState(path string, rows []StateRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pq.NewGenericWriter[StateRow](f, pq.Compression(&pq.Snappy), pq.KeyValueMetadata("shardkit.numerator.version", "1.0.0.1"))
	for i := 0; i < len(rows); i += batch {
		if _, err := w.Write(rows[i:min(i+batch, len(rows))]); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func pgRead[T any](path string) (int, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r := pq.NewGenericReader[T](f)
	defer r.Close()
	buf := make([]T, batch)
	n := 0
	var sum uint64
	for {
		k, err := r.Read(buf)
		n += k
		for i := range buf[:k] {
			sum += uint64(len(any(&buf[i]).(interface{ id() string }).id()))
		}
		if err == io.EOF {
			return n, sum, nil
		}
		if err != nil {
			return n, sum, err
		}
	}
}

func (o *Offer) id() string    { return o.OfferID }
func (s *StateRow) id() string { return s.OfferID }

// ---- arrow-go ----

var offerSchema = arrow.NewSchema([]arrow.Field{
	{Name: "business_id", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "offer_id", Type: arrow.BinaryTypes.String},
	{Name: "shop_id", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "warehouse_id", Type: arrow.PrimitiveTypes.Uint64},
}, nil)

var stateSchema = arrow.NewSchema(append(offerSchema.Fields(),
	arrow.Field{Name: "shard_id", Type: arrow.PrimitiveTypes.Uint32},
	arrow.Field{Name: "doc_id", Type: arrow.PrimitiveTypes.Uint32},
	arrow.Field{Name: "last_seen_run", Type: arrow.PrimitiveTypes.Uint64},
), nil)

func arWrite(path string, rows []StateRow, state bool) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	sc := offerSchema
	if state {
		md := arrow.NewMetadata([]string{"shardkit.numerator.version"}, []string{"1.0.0.1"})
		sc = arrow.NewSchema(stateSchema.Fields(), &md)
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false))
	w, err := pqarrow.NewFileWriter(sc, f, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := 0; i < len(rows); i += batch {
		part := rows[i:min(i+batch, len(rows))]
		bus := b.Field(0).(*array.Uint64Builder)
		off := b.Field(1).(*array.StringBuilder)
		shop := b.Field(2).(*array.Uint64Builder)
		wh := b.Field(3).(*array.Uint64Builder)
		for _, r := range part {
			bus.Append(r.BusinessID)
			off.Append(r.OfferID)
			shop.Append(r.ShopID)
			wh.Append(r.WarehouseID)
		}
		if state {
			sh := b.Field(4).(*array.Uint32Builder)
			doc := b.Field(5).(*array.Uint32Builder)
			ls := b.Field(6).(*array.Uint64Builder)
			for _, r := range part {
				sh.Append(r.ShardID)
				doc.Append(r.DocID)
				ls.Append(r.LastSeenRun)
			}
		}
		rec := b.NewRecord()
		err := w.WriteBuffered(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return w.Close()
}

func arRead(path string, state bool) (int, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return 0, 0, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{Parallel: false, BatchSize: batch}, memory.DefaultAllocator)
	if err != nil {
		return 0, 0, err
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return 0, 0, err
	}
	defer rr.Release()
	n := 0
	var sum uint64
	rows := make([]StateRow, batch)
	for rr.Next() {
		rec := rr.Record()
		k := int(rec.NumRows())
		bus := rec.Column(0).(*array.Uint64)
		off := rec.Column(1).(*array.String)
		shop := rec.Column(2).(*array.Uint64)
		wh := rec.Column(3).(*array.Uint64)
		for i := 0; i < k; i++ {
			rows[i].BusinessID = bus.Value(i)
			rows[i].OfferID = string([]byte(off.Value(i))) // copy out: arrow memory is released
			rows[i].ShopID = shop.Value(i)
			rows[i].WarehouseID = wh.Value(i)
			sum += uint64(len(rows[i].OfferID))
		}
		if state {
			sh := rec.Column(4).(*array.Uint32)
			doc := rec.Column(5).(*array.Uint32)
			ls := rec.Column(6).(*array.Uint64)
			for i := 0; i < k; i++ {
				rows[i].ShardID = sh.Value(i)
				rows[i].DocID = doc.Value(i)
				rows[i].LastSeenRun = ls.Value(i)
			}
		}
		n += k
	}
	return n, sum, rr.Err()
}

func main() {
	n := flag.Int("rows", 2_000_000, "rows per table")
	dir := flag.String("dir", os.TempDir(), "scratch directory")
	flag.Parse()
	rows := gen(*n)
	runtime.GC()
	fmt.Printf("rows=%d go=%s GOMAXPROCS=%d\n", *n, runtime.Version(), runtime.GOMAXPROCS(0))
	type step struct {
		name string
		f    func() error
		path string
	}
	var sink uint64
	check := func(got int, s uint64, err error) error {
		sink += s
		if err != nil {
			return err
		}
		if got != *n {
			return fmt.Errorf("read %d rows, want %d", got, *n)
		}
		return nil
	}
	pgo := filepath.Join(*dir, "pg-offers.parquet")
	pgs := filepath.Join(*dir, "pg-state.parquet")
	aro := filepath.Join(*dir, "ar-offers.parquet")
	ars := filepath.Join(*dir, "ar-state.parquet")
	steps := []step{
		{"parquet-go write offers", func() error { return pgWriteOffers(pgo, rows) }, pgo},
		{"parquet-go read offers", func() error { return check(pgRead[Offer](pgo)) }, ""},
		{"parquet-go write state", func() error { return pgWriteState(pgs, rows) }, pgs},
		{"parquet-go read state", func() error { return check(pgRead[StateRow](pgs)) }, ""},
		{"parquet-go col read offers", func() error { return check(pgReadColumnar(pgo, false)) }, ""},
		{"parquet-go col read state", func() error { return check(pgReadColumnar(pgs, true)) }, ""},
		{"arrow-go write offers", func() error { return arWrite(aro, rows, false) }, aro},
		{"arrow-go read offers", func() error { return check(arRead(aro, false)) }, ""},
		{"arrow-go write state", func() error { return arWrite(ars, rows, true) }, ars},
		{"arrow-go read state", func() error { return check(arRead(ars, true)) }, ""},
	}
	for _, s := range steps {
		best := time.Duration(1 << 62)
		for rep := 0; rep < 3; rep++ {
			runtime.GC()
			t0 := time.Now()
			if err := s.f(); err != nil {
				fmt.Println(s.name, "error:", err)
				os.Exit(1)
			}
			best = min(best, time.Since(t0))
		}
		size := ""
		if s.path != "" {
			st, _ := os.Stat(s.path)
			size = fmt.Sprintf("  %.1f MB", float64(st.Size())/1e6)
		}
		fmt.Printf("%-26s best of 3 %8.0f ms  %6.2f M rows/s%s\n", s.name, float64(best.Microseconds())/1000, float64(*n)/best.Seconds()/1e6, size)
	}
	for _, p := range []string{pgo, pgs, aro, ars} {
		os.Remove(p)
	}
	_ = sink
}
