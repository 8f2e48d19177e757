package numerator

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"
)

// A spill file is a sorted run of records written when a shard's rows do not
// fit the memory budget. Format: the magic line, then per record the hash as
// 8 little-endian bytes followed by uvarints business_id, shop_id,
// warehouse_id, len(offer_id), the offer_id bytes, shard, doc, last_seen_run.
const spillMagic = "shardkit-numerator-spill-1\n"

// maxOfferIDLen bounds offer_id in spill files and inputs: longer ids are
// refused as bad input rather than risking a huge allocation.
const maxOfferIDLen = 1 << 16

// spillBuffer is the buffer of each spill file being written or merged.
const spillBuffer = 256 << 10

var errSpillCorrupt = errors.New("numerator: spill file corrupt")

type spillWriter struct {
	f   *os.File
	w   *bufio.Writer
	buf [binary.MaxVarintLen64*7 + 8]byte
}

func createSpill(dir string) (*spillWriter, error) {
	f, err := os.CreateTemp(dir, "spill-*.run")
	if err != nil {
		return nil, fmt.Errorf("numerator: create spill file in %s (set --temp-dir to a writable directory with room): %w", dir, err)
	}
	w := &spillWriter{f: f, w: bufio.NewWriterSize(f, spillBuffer)}
	if _, err := w.w.WriteString(spillMagic); err != nil {
		_ = w.abort()
		return nil, err
	}
	return w, nil
}

func (w *spillWriter) write(r *record) error {
	if _, err := w.w.Write(appendRecordHead(w.buf[:0], r)); err != nil {
		return err
	}
	if _, err := w.w.WriteString(r.key.OfferID); err != nil {
		return err
	}
	_, err := w.w.Write(appendRecordTail(w.buf[:0], r))
	return err
}

// appendRecordHead encodes a record up to its offer_id bytes.
func appendRecordHead(b []byte, r *record) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.hash)
	b = binary.AppendUvarint(b, r.key.BusinessID)
	b = binary.AppendUvarint(b, r.key.ShopID)
	b = binary.AppendUvarint(b, r.key.WarehouseID)
	return binary.AppendUvarint(b, uint64(len(r.key.OfferID)))
}

// appendRecordTail encodes a record after its offer_id bytes.
func appendRecordTail(b []byte, r *record) []byte {
	b = binary.AppendUvarint(b, uint64(r.shard))
	b = binary.AppendUvarint(b, uint64(r.doc))
	return binary.AppendUvarint(b, r.lastSeen)
}

// finish flushes and closes the file and returns its path.
func (w *spillWriter) finish() (string, error) {
	if err := w.w.Flush(); err != nil {
		_ = w.abort()
		return "", fmt.Errorf("numerator: write spill file %s: %w", w.f.Name(), err)
	}
	if err := w.f.Close(); err != nil {
		_ = os.Remove(w.f.Name())
		return "", fmt.Errorf("numerator: close spill file %s: %w", w.f.Name(), err)
	}
	return w.f.Name(), nil
}

func (w *spillWriter) abort() error {
	_ = w.f.Close()
	return os.Remove(w.f.Name())
}

// spillReader reads one spill file. Strings are carved out of an arena, so
// records stay valid after next returns.
type spillReader struct {
	f     *os.File
	r     *bufio.Reader
	arena arena
	e     error
}

func openSpill(path string) (*spillReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("numerator: open spill file: %w", err)
	}
	s := &spillReader{f: f, r: bufio.NewReaderSize(f, spillBuffer)}
	if err := s.readMagic(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return s, nil
}

// newSpillReader reads a spill stream (tests, fuzzing).
func newSpillReader(r io.Reader) *spillReader {
	return &spillReader{r: bufio.NewReaderSize(r, spillBuffer)}
}

func (s *spillReader) readMagic() error {
	var m [len(spillMagic)]byte
	if _, err := io.ReadFull(s.r, m[:]); err != nil || string(m[:]) != spillMagic {
		return fmt.Errorf("%w: bad magic", errSpillCorrupt)
	}
	return nil
}

func (s *spillReader) next() (record, bool) {
	if s.e != nil {
		return record{}, false
	}
	r, err := s.decode()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.e = err
		}
		return record{}, false
	}
	return r, true
}

// maxEncodedRecord bounds one encoded record.
const maxEncodedRecord = 8 + 7*binary.MaxVarintLen64 + maxOfferIDLen

func (s *spillReader) decode() (record, error) {
	// Peek returns less than asked only at the end of the file (or on an
	// error), so a record cut short there is truncated for good.
	b, err := s.r.Peek(maxEncodedRecord)
	if len(b) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return record{}, io.EOF
		}
		return record{}, fmt.Errorf("%w: %v", errSpillCorrupt, err) //nolint:errorlint // not %w: a read error must not read as a clean io.EOF
	}
	r, n, derr := decodeRecordBytes(b)
	if derr != nil {
		return record{}, derr
	}
	if r.key.OfferID != "" {
		r.key.OfferID = s.arena.intern(r.key.OfferID) // the buffer is reused
	}
	if _, err := s.r.Discard(n); err != nil {
		return record{}, fmt.Errorf("%w: %v", errSpillCorrupt, err) //nolint:errorlint // as above
	}
	return r, nil
}

func (s *spillReader) err() error { return s.e }

// decodeRecordBytes decodes one record from b (the spill encoding, as the
// sorter keeps records in memory). The offer_id points into b.
func decodeRecordBytes(b []byte) (record, int, error) {
	if len(b) < 8 {
		return record{}, 0, fmt.Errorf("%w: truncated record", errSpillCorrupt)
	}
	var r record
	r.hash = binary.LittleEndian.Uint64(b)
	pos := 8
	var v [7]uint64
	for i := range v {
		x, n := binary.Uvarint(b[pos:])
		if n <= 0 {
			return record{}, 0, fmt.Errorf("%w: field %d", errSpillCorrupt, i)
		}
		pos += n
		v[i] = x
		if i == 3 {
			if x > uint64(len(b)-pos) {
				return record{}, 0, fmt.Errorf("%w: truncated offer_id", errSpillCorrupt)
			}
			if x > 0 {
				r.key.OfferID = unsafe.String(&b[pos], int(x))
			}
			pos += int(x)
		}
	}
	if v[4] > 1<<32-1 || v[5] > 1<<32-1 {
		return record{}, 0, fmt.Errorf("%w: shard %d or doc %d out of range", errSpillCorrupt, v[4], v[5])
	}
	r.key.BusinessID, r.key.ShopID, r.key.WarehouseID = v[0], v[1], v[2]
	r.shard, r.doc, r.lastSeen = uint32(v[4]), uint32(v[5]), v[6]
	return r, pos, nil
}

func (s *spillReader) close() error {
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}
