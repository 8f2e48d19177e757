package numerator

import (
	"fmt"
	"os"

	"github.com/shardkit/shardkit/sharding"
)

// OfferWriter writes an offers table (one Parquet file with the columns
// business_id, offer_id, shop_id, warehouse_id), e.g. to prepare inputs or
// synthetic generations.
type OfferWriter struct {
	w *tableWriter
	r record
}

// NewOfferWriter creates the file at path; it must not exist
// (ErrOutputExists).
func NewOfferWriter(path string) (*OfferWriter, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s; choose a new location", ErrOutputExists, path)
	}
	w, err := createTableWriter(path, keyFields, map[string]string{metaFormat: formatV1, metaTable: "offers"})
	if err != nil {
		return nil, err
	}
	return &OfferWriter{w: w}, nil
}

// Write appends one offer.
func (o *OfferWriter) Write(k sharding.OfferKey) error {
	o.r.key = k
	return o.w.add(&o.r)
}

// Close finishes and syncs the file.
func (o *OfferWriter) Close() error { return o.w.close() }
