package numerator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardkit/shardkit/sharding"
)

// parquetTable is an input table: the part files of offers or of a state.
type parquetTable struct {
	parts   []string
	columns []string
	state   bool
	rows    int64 // as the parts' footers claim
	// byShard: for a state whose every part holds one shard's rows sorted
	// (as this package writes states), the part of each shard; else nil.
	byShard []shardPart
}

type shardPart struct {
	path string
	rows int64
}

// openOffers checks every part of an offers table before any work starts.
func openOffers(path string) (*parquetTable, error) {
	t := &parquetTable{columns: offerColumns}
	if err := t.check(path, nil); err != nil {
		return nil, fmt.Errorf("input offers %s: %w", path, err)
	}
	return t, nil
}

// openState checks every part of a state and returns its metadata, which
// all parts must agree on.
func openState(path string) (*parquetTable, StateMeta, error) {
	t := &parquetTable{columns: stateColumns, state: true}
	var meta *StateMeta
	byShard := map[uint64]shardPart{}
	sortedParts := true
	err := t.check(path, func(p *part) error {
		m, err := parseStateMeta(p.meta)
		if err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
		order, _ := p.meta(metaOrder)
		shard, serr := strconv.ParseUint(func() string { v, _ := p.meta(metaShard); return v }(), 10, 32)
		if _, dup := byShard[shard]; order != orderV1 || serr != nil || dup || shard >= uint64(m.Shards) {
			sortedParts = false
		} else {
			byShard[shard] = shardPart{path: p.path, rows: p.pf.NumRows()}
		}
		if meta == nil {
			meta = &m
		} else if *meta != m {
			return fmt.Errorf("%w: part %s says %+v, an earlier part %+v; the parts come from different runs", ErrBadState, p.path, m, *meta)
		}
		return nil
	})
	if err != nil {
		return nil, StateMeta{}, fmt.Errorf("input state %s: %w", path, err)
	}
	if sortedParts && len(byShard) == int(meta.Shards) {
		t.byShard = make([]shardPart, meta.Shards)
		for sh, p := range byShard {
			t.byShard[sh] = p
		}
	}
	return t, *meta, nil
}

func (t *parquetTable) check(path string, each func(*part) error) error {
	parts, err := tableParts(path)
	if err != nil {
		return err
	}
	for _, pp := range parts {
		p, err := openPart(pp, t.columns)
		if err != nil {
			return err
		}
		t.rows += p.pf.NumRows()
		if each != nil {
			err = each(p)
		}
		if cerr := p.close(); err == nil && cerr != nil {
			err = fmt.Errorf("%w: %w", ErrBadInput, cerr)
		}
		if err != nil {
			return err
		}
	}
	t.parts = parts
	return nil
}

func (t *parquetTable) rowCount() int64 { return t.rows }

func (t *parquetTable) scan(ctx context.Context, fn func([]record) error) error {
	var d batchDecoder
	for _, pp := range t.parts {
		if err := d.scanPart(ctx, pp, t.columns, t.state, fn); err != nil {
			return err
		}
	}
	return nil
}

// batchDecoder turns Arrow batches of an offers or state table into records,
// reusing its buffers.
type batchDecoder struct {
	batch                           []record
	bus, shop, wh, shard, doc, seen []uint64
}

func (d *batchDecoder) scanPart(ctx context.Context, path string, columns []string, state bool, fn func([]record) error) error {
	p, err := openPart(path, columns)
	if err != nil {
		return err
	}
	err = p.scan(ctx, func(rec arrow.RecordBatch) error {
		batch, err := d.decode(rec, columns, state)
		if err != nil {
			return err
		}
		return fn(batch)
	})
	if cerr := p.close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// decode converts one batch; offer_id strings point into the batch.
func (d *batchDecoder) decode(rec arrow.RecordBatch, columns []string, state bool) ([]record, error) {
	cols, err := columnsOf(rec, columns)
	if err != nil {
		return nil, err
	}
	if d.bus, err = uints(cols[0], colBusinessID, math.MaxUint64, d.bus); err != nil {
		return nil, err
	}
	offer, err := strs(cols[1], colOfferID)
	if err != nil {
		return nil, err
	}
	if d.shop, err = uints(cols[2], colShopID, math.MaxUint64, d.shop); err != nil {
		return nil, err
	}
	if d.wh, err = uints(cols[3], colWarehouseID, math.MaxUint64, d.wh); err != nil {
		return nil, err
	}
	n := int(rec.NumRows())
	d.batch = slices.Grow(d.batch[:0], n)[:n]
	for i := range d.batch {
		d.batch[i] = record{key: sharding.OfferKey{BusinessID: d.bus[i], OfferID: offer(i), ShopID: d.shop[i], WarehouseID: d.wh[i]}}
	}
	if state {
		if d.shard, err = uints(cols[4], colShardID, math.MaxUint32, d.shard); err != nil {
			return nil, err
		}
		if d.doc, err = uints(cols[5], colDocID, math.MaxUint32, d.doc); err != nil {
			return nil, err
		}
		if d.seen, err = uints(cols[6], colLastSeenRun, math.MaxUint64, d.seen); err != nil {
			return nil, err
		}
		for i := range d.batch {
			d.batch[i].shard, d.batch[i].doc, d.batch[i].lastSeen = uint32(d.shard[i]), uint32(d.doc[i]), d.seen[i]
		}
	}
	return d.batch, nil
}
