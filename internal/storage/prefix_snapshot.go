package storage

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshots of a key range, for the state machines of Raft groups: a
// sequence of records (uvarint key length, key suffix, uvarint value length,
// value), where the key suffix is the key without the range's prefix.

// MaxSnapshotRecord bounds one key or value read from a snapshot stream.
const MaxSnapshotRecord = 64 << 20

// ErrBadSnapshot is returned for a snapshot stream that cannot be decoded.
var ErrBadSnapshot = errors.New("storage: bad snapshot stream")

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// WritePrefixSnapshot writes every key with the given prefix, as it is in r.
func WritePrefixSnapshot(ctx context.Context, r pebble.Reader, prefix []byte, w io.Writer) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	bw := bufio.NewWriterSize(w, 64<<10)
	var hdr []byte
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := it.Key()[len(prefix):]
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		hdr = binary.AppendUvarint(hdr[:0], uint64(len(k)))
		hdr = append(hdr, k...)
		hdr = binary.AppendUvarint(hdr, uint64(len(v)))
		if _, err := bw.Write(hdr); err != nil {
			return err
		}
		if _, err := bw.Write(v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	return bw.Flush()
}

// RestorePrefixSnapshot replaces every key with the given prefix by the
// records read from r, committing in batches of about 4 MiB. It is
// repeatable: it deletes the range first.
func RestorePrefixSnapshot(ctx context.Context, db *pebble.DB, prefix []byte, r io.Reader) error {
	if err := db.DeleteRange(prefix, PrefixEnd(prefix), pebble.NoSync); err != nil {
		return err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	b := db.NewBatch()
	defer func() { _ = b.Close() }()
	key := append([]byte(nil), prefix...)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := readSnapshotField(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		v, err := readSnapshotField(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: record without a value", ErrBadSnapshot)
			}
			return err
		}
		key = append(key[:len(prefix)], k...)
		if err := b.Set(key, v, nil); err != nil {
			return err
		}
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			_ = b.Close()
			b = db.NewBatch()
		}
	}
	return b.Commit(pebble.NoSync)
}

func readSnapshotField(br *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	if n > MaxSnapshotRecord {
		return nil, fmt.Errorf("%w: record of %d bytes exceeds %d", ErrBadSnapshot, n, MaxSnapshotRecord)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, fmt.Errorf("%w: truncated: %w", ErrBadSnapshot, err)
	}
	return buf, nil
}
