package numerator

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

func encodeSpill(recs ...record) []byte {
	b := []byte(spillMagic)
	for i := range recs {
		b = appendRecordHead(b, &recs[i])
		b = append(b, recs[i].key.OfferID...)
		b = appendRecordTail(b, &recs[i])
	}
	return b
}

func decodeSpill(data []byte) ([]record, error) {
	s := newSpillReader(bytes.NewReader(data))
	if err := s.readMagic(); err != nil {
		return nil, err
	}
	var out []record
	for {
		r, ok := s.next()
		if !ok {
			return out, s.err()
		}
		out = append(out, r)
	}
}

func TestSpillFileRoundTrip(t *testing.T) {
	t.Parallel()
	recs := []record{
		{hash: 1, key: sharding.OfferKey{BusinessID: 1, OfferID: "a", ShopID: 2, WarehouseID: 3}, shard: 4, doc: 5, lastSeen: 6},
		{hash: ^uint64(0), key: sharding.OfferKey{BusinessID: ^uint64(0), OfferID: "", ShopID: ^uint64(0), WarehouseID: ^uint64(0)}, shard: ^uint32(0), doc: ^uint32(0), lastSeen: ^uint64(0)},
	}
	w, err := createSpill(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	path, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, encodeSpill(recs...)) {
		t.Fatalf("file bytes differ from the documented encoding")
	}
	got, err := decodeSpill(data)
	if err != nil || len(got) != 2 || got[0] != recs[0] || got[1] != recs[1] {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, recs)
	}
	// Every truncation is reported, never a silent short read.
	for n := len(spillMagic) + 1; n < len(data); n++ {
		if _, err := decodeSpill(data[:n]); err == nil || !errors.Is(err, errSpillCorrupt) {
			if n == len(encodeSpill(recs[0])) {
				continue // a clean record boundary
			}
			t.Fatalf("truncated at %d of %d: error %v, want errSpillCorrupt", n, len(data), err)
		}
	}
}

func FuzzSpillDecode(f *testing.F) {
	f.Add(encodeSpill(record{hash: 7, key: sharding.OfferKey{BusinessID: 1, OfferID: "x"}, doc: 3}))
	f.Add(encodeSpill())
	f.Add([]byte("not a spill file"))
	f.Add(append([]byte(spillMagic), 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := decodeSpill(data)
		if err != nil {
			if !errors.Is(err, errSpillCorrupt) {
				t.Fatalf("error %v does not wrap errSpillCorrupt", err)
			}
			return
		}
		// What decodes survives a re-encoding unchanged.
		again, err := decodeSpill(encodeSpill(recs...))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-decoding %d records: %d, %v", len(recs), len(again), err)
		}
		for i := range recs {
			if again[i] != recs[i] {
				t.Fatalf("record %d: %+v became %+v", i, recs[i], again[i])
			}
		}
	})
}
