package numerator

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardkit/shardkit/numerator/internal/fsutil"
)

var (
	keyFields = []arrow.Field{
		{Name: colBusinessID, Type: arrow.PrimitiveTypes.Uint64},
		{Name: colOfferID, Type: arrow.BinaryTypes.String},
		{Name: colShopID, Type: arrow.PrimitiveTypes.Uint64},
		{Name: colWarehouseID, Type: arrow.PrimitiveTypes.Uint64},
	}
	shardField    = arrow.Field{Name: colShardID, Type: arrow.PrimitiveTypes.Uint32}
	docField      = arrow.Field{Name: colDocID, Type: arrow.PrimitiveTypes.Uint32}
	lastSeenField = arrow.Field{Name: colLastSeenRun, Type: arrow.PrimitiveTypes.Uint64}
	// stateFields is the state's schema; the expired-docs table has the same.
	stateFields   = append(append([]arrow.Field(nil), keyFields...), shardField, docField, lastSeenField)
	newDocsFields = append(append([]arrow.Field(nil), keyFields...), shardField, docField)
)

// A writer buffers a whole row group (every column's pages) until it is
// complete, so row groups are kept to one batch: the buffers of the part
// files being written (three tables, two shards at once) stay a few
// megabytes each.
const (
	writeBatch    = 16 << 10
	rowGroupLimit = writeBatch
)

// tableWriter writes one part file of a table.
type tableWriter struct {
	path   string
	f      *os.File
	w      *pqarrow.FileWriter
	b      *array.RecordBuilder
	n      int
	extras bool // shard_id, doc_id (and last_seen_run when the schema has it)
	seen   bool
}

func createTableWriter(path string, fields []arrow.Field, kv map[string]string) (*tableWriter, error) {
	keys, vals := make([]string, 0, len(kv)), make([]string, 0, len(kv))
	for k, v := range kv {
		keys, vals = append(keys, k), append(vals, v)
	}
	md := arrow.NewMetadata(keys, vals)
	sc := arrow.NewSchema(fields, &md)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("numerator: create %s: %w", path, err)
	}
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Snappy),
		parquet.WithDictionaryDefault(false),
		parquet.WithMaxRowGroupLength(rowGroupLimit),
	)
	// The writer closes its sink; hide Close so the file can be synced first.
	w, err := pqarrow.NewFileWriter(sc, struct{ io.Writer }{f}, props, pqarrow.DefaultWriterProps())
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("numerator: write %s: %w", path, err)
	}
	t := &tableWriter{path: path, f: f, w: w, b: array.NewRecordBuilder(memory.DefaultAllocator, sc),
		extras: len(fields) > 4, seen: len(fields) > 6}
	t.reserve()
	return t, nil
}

// reserve sizes the builders for a whole batch, so that they do not grow
// (and copy) row by row.
func (t *tableWriter) reserve() {
	for i := range t.b.Fields() {
		t.b.Field(i).Reserve(writeBatch)
	}
	t.b.Field(1).(*array.StringBuilder).ReserveData(writeBatch * 24)
}

func (t *tableWriter) add(r *record) error {
	t.b.Field(0).(*array.Uint64Builder).Append(r.key.BusinessID)
	t.b.Field(1).(*array.StringBuilder).Append(r.key.OfferID)
	t.b.Field(2).(*array.Uint64Builder).Append(r.key.ShopID)
	t.b.Field(3).(*array.Uint64Builder).Append(r.key.WarehouseID)
	if t.extras {
		t.b.Field(4).(*array.Uint32Builder).Append(r.shard)
		t.b.Field(5).(*array.Uint32Builder).Append(r.doc)
	}
	if t.seen {
		t.b.Field(6).(*array.Uint64Builder).Append(r.lastSeen)
	}
	t.n++
	if t.n >= writeBatch {
		return t.flush()
	}
	return nil
}

func (t *tableWriter) flush() error {
	if t.n == 0 {
		return nil
	}
	rec := t.b.NewRecordBatch()
	defer rec.Release()
	t.n = 0
	t.reserve()
	if err := t.w.WriteBuffered(rec); err != nil {
		return fmt.Errorf("numerator: write %s: %w", t.path, err)
	}
	return nil
}

// close flushes, writes the footer and syncs the file.
func (t *tableWriter) close() error {
	err := t.flush()
	t.b.Release()
	if cerr := t.w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("numerator: write %s: %w", t.path, cerr)
	}
	if err == nil {
		if serr := t.f.Sync(); serr != nil {
			err = fmt.Errorf("numerator: sync %s: %w", t.path, serr)
		}
	}
	if cerr := t.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("numerator: close %s: %w", t.path, cerr)
	}
	return err
}

// dirOutputs writes each output table as a directory of part files, one per
// shard, under a temporary name next to the final one (a working directory
// owned by this process: a dead run's is removed by the next run, see
// cleanLeftovers); commit renames them into place (new docs, expired docs,
// then the state last).
type dirOutputs struct {
	final [3]string        // state, new docs, expired; "" = not wanted
	tmp   [3]*fsutil.Owned // nil once published or not wanted
}

func newDirOutputs(state, newDocs, expired string) (*dirOutputs, error) {
	d := &dirOutputs{final: [3]string{state, newDocs, expired}}
	for i, p := range d.final {
		if p == "" {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			_ = d.abort()
			return nil, fmt.Errorf("%w: %s; a run never overwrites, choose a new location", ErrOutputExists, p)
		}
		o, err := fsutil.CreateOwned(p)
		if err != nil {
			_ = d.abort()
			return nil, fmt.Errorf("numerator: create output: %w", err)
		}
		d.tmp[i] = o
	}
	return d, nil
}

func (d *dirOutputs) openShard(shard uint32, meta StateMeta) (shardWriter, error) {
	name := fmt.Sprintf("part-%05d.parquet", shard)
	sw := &shardFiles{}
	specs := []struct {
		table  string
		fields []arrow.Field
		dst    **tableWriter
	}{{tableState, stateFields, &sw.st}, {tableNewDocs, newDocsFields, &sw.nd}, {tableExpired, stateFields, &sw.ex}}
	for i, s := range specs {
		if d.tmp[i] == nil {
			continue
		}
		w, err := createTableWriter(filepath.Join(d.tmp[i].Path, name), s.fields, meta.keyValues(s.table, shard))
		if err != nil {
			_ = sw.close()
			return nil, err
		}
		*s.dst = w
	}
	return sw, nil
}

func (d *dirOutputs) commit() (err error) {
	// What this commit has renamed into place; on an error it is removed
	// again, so that nothing is left at the final locations (the
	// temporary directories not yet renamed are left to abort).
	var published []string
	defer func() {
		if err == nil {
			return
		}
		for _, p := range published {
			if rerr := os.RemoveAll(p); rerr != nil {
				err = errors.Join(err, fmt.Errorf("numerator: remove %s after a failed commit: %w", p, rerr))
			}
		}
	}()
	for _, i := range []int{1, 2, 0} {
		tmp := d.tmp[i]
		if tmp == nil {
			continue
		}
		if _, err := os.Lstat(d.final[i]); err == nil {
			return fmt.Errorf("%w: %s appeared during the run; this run's output is removed", ErrOutputExists, d.final[i])
		}
		if err := fsutil.SyncDir(tmp.Path); err != nil {
			return err
		}
		if err := os.Rename(tmp.Path, d.final[i]); err != nil {
			return fmt.Errorf("numerator: publish %s: %w", d.final[i], err)
		}
		d.tmp[i] = nil
		published = append(published, d.final[i])
		if err := tmp.Release(); err != nil {
			return fmt.Errorf("numerator: publish %s: %w", d.final[i], err)
		}
		if err := fsutil.SyncDir(filepath.Dir(d.final[i])); err != nil {
			return err
		}
	}
	return nil
}

func (d *dirOutputs) abort() error {
	var errs []error
	for i, o := range d.tmp {
		errs = append(errs, o.RemoveAll())
		d.tmp[i] = nil
	}
	return errors.Join(errs...)
}

// shardFiles are one shard's part files of the three output tables.
type shardFiles struct{ st, nd, ex *tableWriter }

func (s *shardFiles) state(r *record) error { return s.st.add(r) }

func (s *shardFiles) newDoc(r *record) error {
	if s.nd == nil {
		return nil
	}
	return s.nd.add(r)
}

func (s *shardFiles) expired(r *record) error {
	if s.ex == nil {
		return nil
	}
	return s.ex.add(r)
}

func (s *shardFiles) close() error {
	var errs []error
	for _, w := range []*tableWriter{s.st, s.nd, s.ex} {
		if w != nil {
			errs = append(errs, w.close())
		}
	}
	return errors.Join(errs...)
}
