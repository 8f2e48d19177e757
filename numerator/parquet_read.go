package numerator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"golang.org/x/sync/errgroup"
)

// Column names of the numerator's tables (docs/numerator.md).
const (
	colBusinessID  = "business_id"
	colOfferID     = "offer_id"
	colShopID      = "shop_id"
	colWarehouseID = "warehouse_id"
	colShardID     = "shard_id"
	colDocID       = "doc_id"
	colLastSeenRun = "last_seen_run"
)

var (
	offerColumns = []string{colBusinessID, colOfferID, colShopID, colWarehouseID}
	stateColumns = []string{colBusinessID, colOfferID, colShopID, colWarehouseID, colShardID, colDocID, colLastSeenRun}
)

// readBatch is the rows of a decoded batch: small enough that the batches
// in flight (two per reader, plus the one being converted) stay a few
// megabytes, large enough that the per-batch work does not show.
const readBatch = 16 << 10

// tableParts lists a table's Parquet files: the path itself, or the
// *.parquet files of a directory in name order.
func tableParts(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	var parts []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".parquet") && !strings.HasPrefix(e.Name(), ".") {
			parts = append(parts, filepath.Join(path, e.Name()))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: directory %s holds no .parquet files", ErrBadInput, path)
	}
	return parts, nil
}

// part is one open Parquet file.
type part struct {
	path string
	f    *os.File
	pf   *file.Reader
	fr   *pqarrow.FileReader
	cols []int // leaf indices of the wanted columns, in the wanted order
}

// openPart opens a Parquet file and checks that it has the named columns
// with usable types: unsigned or non-negative integers, and a string or
// binary offer_id.
func openPart(path string, columns []string) (*part, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	p := &part{path: path, f: f}
	if err := p.init(columns); err != nil {
		_ = f.Close()
		return nil, err
	}
	return p, nil
}

func (p *part) init(columns []string) (err error) {
	defer func() {
		if r := recover(); r != nil { // the reader must not take the process down on a hostile file
			err = fmt.Errorf("%w: %s: unreadable Parquet: %v", ErrBadInput, p.path, r)
		}
	}()
	p.pf, err = file.NewParquetReader(p.f, file.WithReadProps(readProps()))
	if err != nil {
		return fmt.Errorf("%w: %s is not a readable Parquet file (truncated or corrupt?): %w", ErrBadInput, p.path, err)
	}
	p.fr, err = pqarrow.NewFileReader(p.pf, pqarrow.ArrowReadProperties{BatchSize: readBatch}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadInput, p.path, err)
	}
	sc, err := p.fr.Schema()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadInput, p.path, err)
	}
	for _, name := range columns {
		idx := p.pf.MetaData().Schema.ColumnIndexByName(name)
		fields := sc.FieldIndices(name)
		if idx < 0 || len(fields) != 1 {
			return fmt.Errorf("%w: %s has no column %q; the table needs columns %s", ErrBadInput, p.path, name, strings.Join(columns, ", "))
		}
		if err := checkColumnType(name, sc.Field(fields[0]).Type); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadInput, p.path, err)
		}
		p.cols = append(p.cols, idx)
	}
	return nil
}

// readProps streams each column chunk through a small buffer instead of
// reading it whole: a row group of another tool's table can be hundreds
// of megabytes, and only a batch of it is decoded at a time.
func readProps() *parquet.ReaderProperties {
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = true
	props.BufferSize = readBuffer
	return props
}

// readBuffer is each column chunk's read buffer.
const readBuffer = 256 << 10

func checkColumnType(name string, t arrow.DataType) error {
	if name == colOfferID {
		switch t.ID() {
		case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
			return nil
		}
		return fmt.Errorf("column %s is %s; want a string", name, t)
	}
	switch t.ID() {
	case arrow.UINT64, arrow.INT64, arrow.UINT32, arrow.INT32:
		return nil
	}
	return fmt.Errorf("column %s is %s; want an unsigned (or non-negative) 32- or 64-bit integer", name, t)
}

func (p *part) close() error { return p.f.Close() }

func (p *part) meta(key string) (string, bool) {
	v := p.pf.MetaData().KeyValueMetadata().FindValue(key)
	if v == nil {
		return "", false
	}
	return *v, true
}

// scan reads the part's wanted columns in batches: one goroutine decodes
// while the caller's fn converts, so both cores work.
func (p *part) scan(ctx context.Context, fn func(rec arrow.RecordBatch) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: unreadable Parquet: %v", ErrBadInput, p.path, r)
		}
	}()
	rr, err := p.fr.GetRecordReader(ctx, p.cols, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadInput, p.path, err)
	}
	defer rr.Release()
	g, ctx := errgroup.WithContext(ctx)
	recs := make(chan arrow.RecordBatch, 2)
	g.Go(func() (err error) {
		defer close(recs)
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %s: unreadable Parquet: %v", ErrBadInput, p.path, r)
			}
		}()
		for rr.Next() {
			rec := rr.RecordBatch()
			rec.Retain()
			select {
			case recs <- rec:
			case <-ctx.Done():
				rec.Release()
				return ctx.Err()
			}
		}
		if err := rr.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w: %s (truncated or corrupt?): %w", ErrBadInput, p.path, err)
		}
		return nil
	})
	g.Go(func() error {
		for rec := range recs {
			err := fn(rec)
			rec.Release()
			if err != nil {
				return err // cancels ctx: the reader stops instead of reading on
			}
		}
		return nil
	})
	err = g.Wait()
	for rec := range recs { // what the reader had sent before it stopped
		rec.Release()
	}
	return err
}

// uints converts an integer column to uint64s, refusing nulls, negatives
// and values above maxVal.
func uints(a arrow.Array, name string, maxVal uint64, dst []uint64) ([]uint64, error) {
	if a.NullN() > 0 {
		return nil, fmt.Errorf("%w: column %s has %d nulls; every row needs a value", ErrBadInput, name, a.NullN())
	}
	dst = dst[:0]
	switch c := a.(type) {
	case *array.Uint64:
		dst = append(dst, c.Uint64Values()...)
	case *array.Uint32:
		for _, v := range c.Uint32Values() {
			dst = append(dst, uint64(v))
		}
	case *array.Int64:
		for _, v := range c.Int64Values() {
			if v < 0 {
				return nil, fmt.Errorf("%w: column %s has the negative value %d", ErrBadInput, name, v)
			}
			dst = append(dst, uint64(v))
		}
	case *array.Int32:
		for _, v := range c.Int32Values() {
			if v < 0 {
				return nil, fmt.Errorf("%w: column %s has the negative value %d", ErrBadInput, name, v)
			}
			dst = append(dst, uint64(v))
		}
	default:
		return nil, fmt.Errorf("%w: column %s is %s", ErrBadInput, name, a.DataType())
	}
	if maxVal != ^uint64(0) {
		for _, v := range dst {
			if v > maxVal {
				return nil, fmt.Errorf("%w: column %s has the value %d, above %d", ErrBadInput, name, v, maxVal)
			}
		}
	}
	return dst, nil
}

// strs returns the i-th string of a string or binary column (without a
// copy: valid while the batch is).
func strs(a arrow.Array, name string) (func(i int) string, error) {
	if a.NullN() > 0 {
		return nil, fmt.Errorf("%w: column %s has %d nulls; every row needs a value", ErrBadInput, name, a.NullN())
	}
	switch c := a.(type) {
	case *array.String:
		return c.Value, nil
	case *array.LargeString:
		return c.Value, nil
	case *array.Binary:
		return c.ValueString, nil
	case *array.LargeBinary:
		return c.ValueString, nil
	}
	return nil, fmt.Errorf("%w: column %s is %s", ErrBadInput, name, a.DataType())
}

// columnsOf finds the wanted columns of a batch by name.
func columnsOf(rec arrow.RecordBatch, names []string) ([]arrow.Array, error) {
	out := make([]arrow.Array, len(names))
	for i, n := range names {
		idx := rec.Schema().FieldIndices(n)
		if len(idx) != 1 {
			return nil, fmt.Errorf("%w: a batch lacks column %s", ErrBadInput, n)
		}
		out[i] = rec.Column(idx[0])
	}
	return out, nil
}
