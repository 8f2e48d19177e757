package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/tuple"
)

// scanPageMax is the most rows a scan reads and sends at a time. A part
// saves its scan's progress after each page's records were acknowledged,
// so a process that takes a scan over knows that the one before it sent
// at most one page past the saved progress: it numbers its records from
// scanPageMax past the saved index, and no two records of a bucket's scan
// ever share a (revision, index) while carrying different rows.
const scanPageMax = 1000

// scanSep separates a part's saved cursor from its scan's progress in the
// cursor field of its tuple in CursorSpace.
const scanSep = " scan:"

// scanPos is where a bucket's scan stands: the space being read, the
// primary key of the last row whose record was acknowledged (encoded by
// tuple.AppendTuple; none: from the space's first row) and the index of
// the bucket's next scan record.
type scanPos struct {
	Space string `json:"space"`
	After []byte `json:"after,omitempty"`
	Next  int    `json:"next"`
}

// splitSaved splits a part's saved cursor field into the watch cursor
// and the scan's progress of the buckets still being scanned (nil: none).
func splitSaved(text string) (cursor string, pending map[uint32]*scanPos, err error) {
	cursor, state, found := strings.Cut(text, scanSep)
	if !found {
		return text, nil, nil
	}
	if err := json.Unmarshal([]byte(state), &pending); err != nil {
		return "", nil, fmt.Errorf("the scan's progress %q is not its JSON: %w", state, err)
	}
	for b, p := range pending {
		if p == nil || p.Next < 0 {
			return "", nil, fmt.Errorf("the scan's progress of bucket %d is %v: want a space and an index from 0", b, p)
		}
	}
	return cursor, pending, nil
}

// joinSaved is splitSaved's inverse.
func joinSaved(cur client.Cursor, pending map[uint32]*scanPos) string {
	if len(pending) == 0 {
		return cur.String()
	}
	state, _ := json.Marshal(pending) // a map of plain structs: no error
	return cur.String() + scanSep + string(state)
}

// errStopped: the part stopped during its scan (its context ended or its
// lease went unrenewed); what was sent and acknowledged is saved.
var errStopped = errors.New("stopped")

// scan sends the rows of the part's pending buckets, bucket by bucket and
// space by space in name order, a page at a time: it reads a page (a
// linearizable Range of the bucket, which follows a bucket that moves),
// produces one record per row, waits until Kafka acknowledged them all,
// then saves the bucket's progress (with save, fenced) before the next
// page. Each record carries the revision the part's watch of the bucket
// began at (from), so that the changes the watch has queued since, sent
// after the scan, follow it in a consumer's (revision, index) order. A
// row read here may already show a change that then comes again among
// those changes; applying every record of a key in order ends with its
// last value.
func (f *feed) scan(ctx context.Context, pr *partRun, a *acks, from map[uint32]uint64, pending map[uint32]*scanPos,
	save func(context.Context) error) error {
	what := fmt.Sprintf("changefeed %s: part %d", f.cfg.Name, pr.p)
	spaces := slices.Sorted(slices.Values(f.cfg.Spaces))
	for _, b := range slices.Sorted(maps.Keys(pending)) {
		pos := pending[b]
		si := slices.Index(spaces, pos.Space)
		if si < 0 {
			// A space no longer fed (the feed runs with other --space):
			// the bucket's scan starts again with the spaces fed now.
			si, pos.Space, pos.After = 0, spaces[0], nil
		}
		for si < len(spaces) {
			var after []tuple.Value
			if pos.After != nil {
				k, err := tuple.DecodeTuple(pos.After)
				if err != nil {
					return fmt.Errorf("%s: the scan's last key of bucket %d: %w", what, b, err)
				}
				after = k
			}
			rows, more, err := f.readPage(ctx, pos.Space, b, after)
			if err != nil {
				return err
			}
			if time.Since(time.Unix(0, pr.renewed.Load())) > f.cfg.LeaseTTL {
				f.cfg.Logger.Warn("changefeed: a part's lease expired before it was renewed", "part", pr.p)
				return errStopped
			}
			if len(rows) > 0 {
				key, err := f.sendScan(ctx, a, pos, b, from[b], rows)
				if err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				if _, err := a.cursor(); err != nil {
					return fmt.Errorf("%s: Kafka refused a record: %w", what, err)
				}
				if ctx.Err() != nil {
					return errStopped
				}
				if f.cfg.scanned != nil {
					f.cfg.scanned(pr.p)
				}
				pos.After = key
				pos.Next += len(rows)
			}
			if !more {
				si++
				pos.After = nil
				if si < len(spaces) {
					pos.Space = spaces[si]
				}
			}
			if si == len(spaces) {
				delete(pending, b)
			}
			if err := f.saveUntil(ctx, pr, save); err != nil {
				return err
			}
		}
	}
	return nil
}

// readPage reads a page of bucket b's rows of space after key after,
// again after a failure (a replicaset without a leader, a bucket
// between moves) until ctx ends.
func (f *feed) readPage(ctx context.Context, space string, b uint32, after []tuple.Value) ([]client.Versioned, bool, error) {
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		rows, more, err := f.cfg.Client.Space(space).Range(ctx, client.RangeOptions{Bucket: b, After: after, Limit: f.cfg.scanPage})
		if err == nil {
			return rows, more, nil
		}
		if ctx.Err() != nil {
			return nil, false, errStopped
		}
		f.cfg.Logger.Warn("changefeed: reading a bucket for the initial scan", "bucket", b, "space", space, "err", err)
		if retry.Sleep(ctx, backoff.Next()) != nil {
			return nil, false, errStopped
		}
	}
}

// sendScan produces one record per row, at revision rev of bucket b from
// index pos.Next on, and waits for Kafka's acknowledgements (or a
// refusal, in a, or ctx's end); it returns the last row's encoded key.
func (f *feed) sendScan(ctx context.Context, a *acks, pos *scanPos, b uint32, rev uint64, rows []client.Versioned) ([]byte, error) {
	at := time.Now()
	e := a.add(b, rev, len(rows), time.Time{})
	var last tuple.Tuple
	for i, row := range rows {
		pks := f.layouts[pos.Space].pks
		key := make(tuple.Tuple, 0, len(pks))
		for _, j := range pks {
			if j >= len(row.Tuple) {
				return nil, fmt.Errorf("a row of %s in bucket %d has %d fields, fewer than its key needs", pos.Space, b, len(row.Tuple))
			}
			key = append(key, row.Tuple[j])
		}
		last = key
		index := pos.Next + i
		r := Record{Space: pos.Space, Kind: client.ChangeScan, Key: key, Tuple: row.Tuple, Version: row.Version,
			Bucket: b, Revision: rev, Index: index, Changes: index + 1, Time: at}
		rec := &kgo.Record{
			Key:   f.recordKey(&r),
			Value: f.value(&r),
			Headers: []kgo.RecordHeader{
				{Key: HeaderBucket, Value: strconv.AppendUint(nil, uint64(b), 10)},
				{Key: HeaderRevision, Value: strconv.AppendUint(nil, rev, 10)},
				{Key: HeaderIndex, Value: strconv.AppendInt(nil, int64(index), 10)},
				{Key: HeaderChanges, Value: strconv.AppendInt(nil, int64(index+1), 10)},
			},
		}
		f.kc.Produce(f.hard, rec, func(_ *kgo.Record, err error) { a.ack(b, e, err) })
	}
	a.drain(ctx)
	return tuple.AppendTuple(nil, last), nil
}

// saveUntil saves the part's state, again after a failure, until it is
// saved, the part was taken over, or ctx ends: a scan goes on only once
// its progress is saved, so that no more than one page is ever sent past
// it.
func (f *feed) saveUntil(ctx context.Context, pr *partRun, save func(context.Context) error) error {
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		err := save(ctx)
		switch {
		case err == nil, errors.Is(err, errLostPart):
			return err
		case ctx.Err() != nil:
			return errStopped
		}
		f.cfg.Logger.Warn("changefeed: saving the scan's progress", "part", pr.p, "err", err)
		if retry.Sleep(ctx, backoff.Next()) != nil {
			return errStopped
		}
	}
}
