package numerator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Formats of DumpTable.
const (
	DumpJSONLines = "jsonl" // one JSON object per row, the columns in order
	DumpTable     = "table" // aligned columns under a header
)

// DumpOptions shape DumpTable's output.
type DumpOptions struct {
	// Format is DumpJSONLines ("" too) or DumpTable.
	Format string
	// Limit stops after that many rows; 0 dumps every row.
	Limit int64
}

// errDumpLimit ends a dump at its limit.
var errDumpLimit = errors.New("numerator: dump limit reached")

// Dump writes the rows of a table (a Parquet file, or a directory of part
// files read in name order; any columns, not only the numerator's) to w.
// A file that is not readable Parquet is refused with ErrBadInput. It
// returns how many rows it wrote.
func Dump(ctx context.Context, path string, w io.Writer, o DumpOptions) (int64, error) {
	switch o.Format {
	case "", DumpJSONLines, DumpTable:
	default:
		return 0, fmt.Errorf("%w: dump format %q; use %s or %s", ErrBadOptions, o.Format, DumpJSONLines, DumpTable)
	}
	if o.Limit < 0 {
		return 0, fmt.Errorf("%w: dump limit %d is negative; 0 dumps every row", ErrBadOptions, o.Limit)
	}
	parts, err := tableParts(path)
	if err != nil {
		return 0, err
	}
	d := &dumper{o: o, bw: bufio.NewWriter(w)}
	if o.Format == DumpTable {
		d.tw = tabwriter.NewWriter(d.bw, 0, 0, 2, ' ', 0)
	}
	for _, pp := range parts {
		if err = d.part(ctx, pp); err != nil {
			break
		}
	}
	if errors.Is(err, errDumpLimit) {
		err = nil
	}
	if d.tw != nil {
		err = errors.Join(err, d.tw.Flush())
	}
	return d.rows, errors.Join(err, d.bw.Flush())
}

type dumper struct {
	o      DumpOptions
	bw     *bufio.Writer
	tw     *tabwriter.Writer
	rows   int64
	header string // the table format's current header
	line   []byte
}

func (d *dumper) part(ctx context.Context, path string) error {
	p, err := openPart(path, nil)
	if err != nil {
		return err
	}
	err = p.scan(ctx, d.batch)
	if cerr := p.close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w: %w", ErrBadInput, cerr)
	}
	if err != nil && !errors.Is(err, errDumpLimit) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return err
}

// batch writes one record batch's rows.
func (d *dumper) batch(rec arrow.RecordBatch) error {
	sc := rec.Schema()
	names := make([]string, sc.NumFields())
	for i, f := range sc.Fields() {
		names[i] = f.Name
	}
	if d.tw != nil {
		if h := strings.Join(names, "\t"); h != d.header {
			d.header = h
			if _, err := fmt.Fprintln(d.tw, h); err != nil {
				return err
			}
		}
	}
	keys := make([][]byte, len(names))
	for i, n := range names {
		k, err := json.Marshal(n)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	for r := range int(rec.NumRows()) {
		if d.o.Limit > 0 && d.rows >= d.o.Limit {
			return errDumpLimit
		}
		var err error
		if d.tw != nil {
			err = d.tableRow(rec, r)
		} else {
			err = d.jsonRow(rec, keys, r)
		}
		if err != nil {
			return err
		}
		d.rows++
	}
	return nil
}

func (d *dumper) tableRow(rec arrow.RecordBatch, r int) error {
	d.line = d.line[:0]
	for c := range int(rec.NumCols()) {
		if c > 0 {
			d.line = append(d.line, '\t')
		}
		col := rec.Column(c)
		var v string
		switch {
		case col.IsNull(r):
			v = "null"
		case isBinary(col):
			v = fmt.Sprintf("%q", col.GetOneForMarshal(r))
		default:
			v = col.ValueStr(r)
		}
		d.line = append(d.line, cellEscaper.Replace(v)...)
	}
	d.line = append(d.line, '\n')
	_, err := d.tw.Write(d.line)
	return err
}

func (d *dumper) jsonRow(rec arrow.RecordBatch, keys [][]byte, r int) error {
	d.line = append(d.line[:0], '{')
	for c := range int(rec.NumCols()) {
		if c > 0 {
			d.line = append(d.line, ',')
		}
		d.line = append(d.line, keys[c]...)
		d.line = append(d.line, ':')
		col := rec.Column(c)
		v := col.GetOneForMarshal(r)
		if b, ok := v.([]byte); ok && isBinary(col) {
			v = string(b) // offer ids written as binary read as text
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%w: column %s row %d: %w", ErrBadInput, rec.ColumnName(c), d.rows, err)
		}
		d.line = append(d.line, b...)
	}
	d.line = append(d.line, '}', '\n')
	_, err := d.bw.Write(d.line)
	return err
}

// cellEscaper keeps a tab or newline in a value from breaking the columns.
var cellEscaper = strings.NewReplacer("\t", `\t`, "\n", `\n`)

func isBinary(a arrow.Array) bool {
	switch a.(type) {
	case *array.Binary, *array.LargeBinary:
		return true
	}
	return false
}
