package main

import (
	"io"
	"os"

	pq "github.com/parquet-go/parquet-go"
)

// pgReadColumnar reads column pages directly (no row reconstruction). It
// handles only plain-encoded pages, the ceiling of what parquet-go offers.
func pgReadColumnar(path string, state bool) (int, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		return 0, 0, err
	}
	ncol := 4
	if state {
		ncol = 7
	}
	n := 0
	var sum uint64
	var rows []StateRow
	for _, rg := range pf.RowGroups() {
		k := int(rg.NumRows())
		if cap(rows) < k {
			rows = make([]StateRow, k)
		}
		rows = rows[:k]
		for c, cc := range rg.ColumnChunks()[:ncol] {
			pages := cc.Pages()
			i := 0
			for {
				p, err := pages.ReadPage()
				if err == io.EOF {
					break
				}
				if err != nil {
					return n, sum, err
				}
				d := p.Data()
				switch c {
				case 1:
					data, off := d.ByteArray()
					for j := 0; j+1 < len(off); j++ {
						rows[i+j].OfferID = string(data[off[j]:off[j+1]])
						sum += uint64(len(rows[i+j].OfferID))
					}
					i += len(off) - 1
				case 0, 2, 3, 6:
					v := d.Uint64()
					for j := range v {
						switch c {
						case 0:
							rows[i+j].BusinessID = v[j]
						case 2:
							rows[i+j].ShopID = v[j]
						case 3:
							rows[i+j].WarehouseID = v[j]
						default:
							rows[i+j].LastSeenRun = v[j]
						}
					}
					i += len(v)
				case 4, 5:
					v := d.Uint32()
					for j := range v {
						if c == 4 {
							rows[i+j].ShardID = v[j]
						} else {
							rows[i+j].DocID = v[j]
						}
					}
					i += len(v)
				}
				pq.Release(p)
			}
			pages.Close()
		}
		n += k
	}
	return n, sum, nil
}
