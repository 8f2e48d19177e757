package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// fileMagic opens every data file: the format's name and version.
var fileMagic = []byte("SKBKUP1\n")

// MaxRecordBytes bounds one record's payload: a chunk of a copy is at most
// replicaset.MaxChunkBytes of tuples plus its framing, so anything much
// larger is damage, not data.
const MaxRecordBytes = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged marks a record or file that is not what the format says.
var ErrDamaged = errors.New("backup: damaged")

// RecordWriter appends records to a data file: per record its payload's
// length (4 bytes, big-endian), its CRC32C (4 bytes, big-endian), then
// the payload (a marshalled rspb.CopyChunk).
type RecordWriter struct {
	w       *bufio.Writer
	n       int64
	records int
}

// NewRecordWriter writes the file's header to w and returns its writer.
func NewRecordWriter(w io.Writer) (*RecordWriter, error) {
	rw := &RecordWriter{w: bufio.NewWriterSize(w, 1<<20)}
	if _, err := rw.w.Write(fileMagic); err != nil {
		return nil, err
	}
	rw.n = int64(len(fileMagic))
	return rw, nil
}

// Write appends one chunk.
func (rw *RecordWriter) Write(c *rspb.CopyChunk) error {
	p, err := c.MarshalVT()
	if err != nil {
		return err
	}
	if len(p) > MaxRecordBytes {
		return fmt.Errorf("backup: a chunk of bucket %d is %d bytes; at most %d", c.GetBucket(), len(p), MaxRecordBytes)
	}
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(p)))
	binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(p, castagnoli))
	if _, err := rw.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := rw.w.Write(p); err != nil {
		return err
	}
	rw.n += int64(len(hdr) + len(p))
	rw.records++
	return nil
}

// Flush writes what is buffered.
func (rw *RecordWriter) Flush() error { return rw.w.Flush() }

// Size is the bytes written so far (header included).
func (rw *RecordWriter) Size() int64 { return rw.n }

// Records is the records written so far.
func (rw *RecordWriter) Records() int { return rw.records }

// RecordReader reads the records of a data file.
type RecordReader struct {
	r      *bufio.Reader
	off    int64
	header bool
	buf    []byte
}

// NewRecordReader reads records from r (a data file from its start).
func NewRecordReader(r io.Reader) *RecordReader {
	return &RecordReader{r: bufio.NewReaderSize(r, 1<<20)}
}

// Next returns the next chunk; io.EOF after the last whole record. A
// file that ends inside a record, a record whose CRC differs, or a
// payload that is not a chunk is an error wrapping ErrDamaged that names
// the offset.
func (rr *RecordReader) Next() (*rspb.CopyChunk, error) {
	if !rr.header {
		got := make([]byte, len(fileMagic))
		if _, err := io.ReadFull(rr.r, got); err != nil {
			return nil, fmt.Errorf("%w: the header is missing or cut short: %w", ErrDamaged, err)
		}
		if string(got) != string(fileMagic) {
			return nil, fmt.Errorf("%w: the file does not begin with %q (a shardkit backup data file)", ErrDamaged, fileMagic)
		}
		rr.header, rr.off = true, int64(len(fileMagic))
	}
	var hdr [8]byte
	n, err := io.ReadFull(rr.r, hdr[:])
	switch {
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("%w: the record at offset %d is cut short after %d bytes of its header", ErrDamaged, rr.off, n)
	}
	size := binary.BigEndian.Uint32(hdr[:4])
	if size > MaxRecordBytes {
		return nil, fmt.Errorf("%w: the record at offset %d says it is %d bytes; at most %d", ErrDamaged, rr.off, size, MaxRecordBytes)
	}
	if cap(rr.buf) < int(size) {
		rr.buf = make([]byte, size)
	}
	p := rr.buf[:size]
	if n, err := io.ReadFull(rr.r, p); err != nil {
		return nil, fmt.Errorf("%w: the record at offset %d is cut short: %d of its %d bytes", ErrDamaged, rr.off, n, size)
	}
	if want, got := binary.BigEndian.Uint32(hdr[4:]), crc32.Checksum(p, castagnoli); want != got {
		return nil, fmt.Errorf("%w: the record at offset %d has CRC32C %08x, its header says %08x", ErrDamaged, rr.off, got, want)
	}
	c := &rspb.CopyChunk{}
	if err := c.UnmarshalVT(p); err != nil {
		return nil, fmt.Errorf("%w: the record at offset %d is not a bucket chunk: %w", ErrDamaged, rr.off, err)
	}
	rr.off += int64(len(hdr)) + int64(size)
	return c, nil
}
