package numerator

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
)

// parquetTable is an input table: the part files of offers or of a state.
type parquetTable struct {
	parts   []string
	columns []string
	state   bool
	rows    int64 // as the parts' footers claim
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
	err := t.check(path, func(p *part) error {
		m, err := parseStateMeta(p.meta)
		if err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
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

func (t *parquetTable) scan(ctx context.Context, fn func([]record) error) error {
	var batch []record
	var bus, shop, wh, shard, doc, seen []uint64
	for _, pp := range t.parts {
		p, err := openPart(pp, t.columns)
		if err != nil {
			return err
		}
		err = p.scan(ctx, func(rec arrow.RecordBatch) error {
			cols, err := columnsOf(rec, t.columns)
			if err != nil {
				return err
			}
			if bus, err = uints(cols[0], colBusinessID, math.MaxUint64, bus); err != nil {
				return err
			}
			offer, err := strs(cols[1], colOfferID)
			if err != nil {
				return err
			}
			if shop, err = uints(cols[2], colShopID, math.MaxUint64, shop); err != nil {
				return err
			}
			if wh, err = uints(cols[3], colWarehouseID, math.MaxUint64, wh); err != nil {
				return err
			}
			n := int(rec.NumRows())
			batch = batch[:0]
			for i := range n {
				batch = append(batch, record{})
				r := &batch[i]
				r.key.BusinessID, r.key.OfferID, r.key.ShopID, r.key.WarehouseID = bus[i], offer(i), shop[i], wh[i]
			}
			if t.state {
				if shard, err = uints(cols[4], colShardID, math.MaxUint32, shard); err != nil {
					return err
				}
				if doc, err = uints(cols[5], colDocID, math.MaxUint32, doc); err != nil {
					return err
				}
				if seen, err = uints(cols[6], colLastSeenRun, math.MaxUint64, seen); err != nil {
					return err
				}
				for i := range batch {
					batch[i].shard, batch[i].doc, batch[i].lastSeen = uint32(shard[i]), uint32(doc[i]), seen[i]
				}
			}
			return fn(batch)
		})
		if cerr := p.close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", pp, err)
		}
	}
	return nil
}
