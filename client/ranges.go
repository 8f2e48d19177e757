package client

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"iter"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// RangeOptions choose the tuples of a range within one bucket. A bound is
// the leading parts of a primary key (one to all of them, each of its
// field's type); one of fewer parts than the key stands for every key
// that starts with it. Bounds combine: Prefix [s] with Until [s, now] is
// the keys starting with s whose second part is below now.
type RangeOptions struct {
	// Bucket is the one bucket read (Space.Bucket finds a key's).
	Bucket uint32
	// Prefix: only keys that start with it.
	Prefix []tuple.Value
	// From (inclusive) or After (exclusive, of every key starting with
	// it), not both: only keys from there on.
	From, After []tuple.Value
	// Until (exclusive, of every key starting with it): only keys before.
	Until []tuple.Value
	// Reverse reads in descending key order; resume it with Until set to
	// the last key read (forward: with After).
	Reverse bool
	// Limit: at most this many tuples (0: 1000; at most 10000).
	Limit int
	// Mode: RW (the default) reads linearizably on the leader, RO on the
	// nearest replica.
	Mode Mode
}

// Range reads the tuples of the space in one bucket within o's bounds,
// in primary-key order (descending with o.Reverse); more says whether
// more tuples within the bounds follow the last one returned. The
// tuples are read at one point of the bucket's history, also while the
// bucket moves. A bound that does not fit the key is refused
// (ErrInvalid), naming the bound and the field.
func (s *Space) Range(ctx context.Context, o RangeOptions) (ts []Versioned, more bool, err error) {
	op := "range of " + s.name
	if o.Limit < 0 {
		return nil, false, &Error{Op: op, Msg: fmt.Sprintf("a limit of %d: give 0 (1000) or more", o.Limit), kind: ErrInvalid}
	}
	req := &datav1.RangeRequest{Space: s.name, Bucket: o.Bucket, Limit: uint32(o.Limit), Mode: o.Mode.api(),
		Prefix: boundBytes(o.Prefix), From: boundBytes(o.From), After: boundBytes(o.After), Until: boundBytes(o.Until), Reverse: o.Reverse}
	var resp *datav1.RangeResponse
	err = s.c.dataCall(ctx, op, o.Bucket, o.Mode == RW, true, func(ctx context.Context, dc datav1.DataServiceClient) error {
		var err error
		resp, err = dc.Range(ctx, req)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	ts = make([]Versioned, 0, len(resp.GetTuples()))
	for _, v := range resp.GetTuples() {
		t, err := tuple.DecodeTuple(v.GetTuple())
		if err != nil {
			return nil, false, &Error{Op: op, Msg: "a tuple the cluster sent: " + err.Error(), kind: ErrInternal}
		}
		ts = append(ts, Versioned{Tuple: t, Version: v.GetVersion()})
	}
	return ts, resp.GetMore(), nil
}

func boundBytes(parts []tuple.Value) []byte {
	if len(parts) == 0 {
		return nil
	}
	return tuple.AppendTuple(nil, parts)
}

// ScanOptions choose a scan of a whole space.
type ScanOptions struct {
	// Cursor resumes a scan after the tuple whose ScanResult.Cursor it is
	// ("": from the start).
	Cursor string
	// Limit: at most this many tuples in all (0: every one).
	Limit int
	// PageSize: how many tuples one call reads at most (0: 1000; at most
	// 10000).
	PageSize int
	// Mode: RW (the default) reads each page linearizably on the bucket's
	// leader, RO on the nearest replica.
	Mode Mode
}

// ScanResult is one tuple of a scan.
type ScanResult struct {
	Tuple   tuple.Tuple
	Version uint64
	Bucket  uint32
	sp      *schema.Space
}

// Cursor returns the cursor that resumes the scan after this tuple
// (ScanOptions.Cursor). It is opaque: the bucket and the tuple's key.
func (r ScanResult) Cursor() string {
	if r.sp == nil {
		return "" // not a tuple a scan returned
	}
	key, err := r.sp.KeyOf(r.Tuple)
	if err != nil {
		return "" // the cluster sends tuples of the space's format
	}
	return encodeCursor(r.Bucket, tuple.AppendTuple(nil, key))
}

// cursorVersion is the first byte of a cursor's bytes.
const cursorVersion = 1

func encodeCursor(bucket uint32, key []byte) string {
	b := make([]byte, 0, 5+len(key))
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint32(b, bucket)
	return base64.RawURLEncoding.EncodeToString(append(b, key...))
}

func decodeCursor(c string) (bucket uint32, key []byte, err error) {
	if c == "" {
		return 1, nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 5 || b[0] != cursorVersion || binary.BigEndian.Uint32(b[1:5]) == 0 {
		return 0, nil, fmt.Errorf("cursor %q is not one a scan returned", c)
	}
	if len(b) > 5 {
		if _, err := tuple.DecodeTuple(b[5:]); err != nil {
			return 0, nil, fmt.Errorf("cursor %q is not one a scan returned: its key: %w", c, err)
		}
	}
	return binary.BigEndian.Uint32(b[1:5]), b[5:], nil
}

// Scan reads every tuple of the space, in (bucket, primary key) order, a
// page at a time, as an iterator; a failure ends it (as its last pair).
// Each page is read from the replicaset that holds its bucket when the
// page is asked, from the bucket's keys after the last one read, so a
// bucket that moves during the scan is followed with no tuple missed or
// repeated. A page holds the tuples of one or more buckets, each bucket's
// read at one point of its history; a bucket larger than a page is read
// at several. So a scan returns every tuple that exists, unchanged, from
// its start to its end once, and of the tuples written meanwhile, those
// whose (bucket, key) the scan has not passed when their write applies
// (docs/data.md, "Ranges and scans").
func (s *Space) Scan(ctx context.Context, o ScanOptions) iter.Seq2[ScanResult, error] {
	op := "scan of " + s.name
	return func(yield func(ScanResult, error) bool) {
		fail := func(err error) { yield(ScanResult{}, err) }
		if o.Limit < 0 || o.PageSize < 0 {
			fail(&Error{Op: op, Msg: fmt.Sprintf("a limit of %d and a page size of %d: give 0 or more", o.Limit, o.PageSize), kind: ErrInvalid})
			return
		}
		b, after, err := decodeCursor(o.Cursor)
		if err != nil {
			fail(&Error{Op: op, Msg: err.Error(), kind: ErrInvalid})
			return
		}
		sp, _, err := s.c.space(ctx, s.name)
		if err != nil {
			fail(err)
			return
		}
		page := o.PageSize
		if page == 0 {
			page = 1000
		}
		n := 0
		for {
			want := page
			if o.Limit > 0 {
				want = min(page, o.Limit-n)
			}
			req := &datav1.RangeRequest{Space: s.name, Bucket: b, After: after, Limit: uint32(want), Mode: o.Mode.api(), Scan: true}
			var resp *datav1.RangeResponse
			err := s.c.dataCall(ctx, op, b, o.Mode == RW, true, func(ctx context.Context, dc datav1.DataServiceClient) error {
				var err error
				resp, err = dc.Range(ctx, req)
				return err
			})
			if err != nil {
				fail(err)
				return
			}
			for _, v := range resp.GetTuples() {
				t, err := tuple.DecodeTuple(v.GetTuple())
				if err != nil {
					fail(&Error{Op: op, Msg: "a tuple the cluster sent: " + err.Error(), kind: ErrInternal})
					return
				}
				if !yield(ScanResult{Tuple: t, Version: v.GetVersion(), Bucket: v.GetBucket(), sp: sp}, nil) {
					return
				}
				if n++; o.Limit > 0 && n == o.Limit {
					return
				}
			}
			if !resp.GetMore() {
				return
			}
			if nb := resp.GetNextBucket(); nb < b || nb == b && len(resp.GetTuples()) == 0 {
				fail(&Error{Op: op, Msg: fmt.Sprintf("the cluster answered a page of bucket %d with no progress (next bucket %d)", b, nb), kind: ErrInternal})
				return
			}
			b, after = resp.GetNextBucket(), resp.GetNextAfter()
		}
	}
}
