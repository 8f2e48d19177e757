package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/scheduler"
)

func laneTable(l scheduler.Lane) string {
	if l == scheduler.LaneRescan {
		return "queue_rescan"
	}
	return "queue"
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// insertEntry writes a new entry into its lane and queue_inverted (the
// caller knows it is absent).
func (s *Store) insertEntry(ctx context.Context, tx pgx.Tx, e scheduler.Entry) error {
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.t("queue_inverted")+" (shard_id, offer_id, stage_id, ts, lane, timer) VALUES ($1, $2, $3, $4, $5, $6)",
		e.Shard, e.OfferID, e.Stage, micros(e.Due), int16(e.Lane), e.Timer); err != nil {
		return wrap("queue: insert", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.t(laneTable(e.Lane))+" (shard_id, stage_id, ts, offer_id) VALUES ($1, $2, $3, $4)",
		e.Shard, e.Stage, micros(e.Due), e.OfferID); err != nil {
		return wrap("queue: insert", err)
	}
	return s.notify(ctx, tx, e.Shard, e.Stage)
}

// deleteEntry removes a stage's entry of an offer, if any.
func (s *Store) deleteEntry(ctx context.Context, tx pgx.Tx, sh int, stage, id string) error {
	_, _, err := s.takeEntry(ctx, tx, sh, stage, id)
	return err
}

// takeHeldEntry takes an offer's entry out of a stage's queue for a write
// of l's holder: the fence checked, the entry locked, ErrNotFound when
// the offer is not in the queue.
func (s *Store) takeHeldEntry(ctx context.Context, tx pgx.Tx, l scheduler.Lease, stage, id string) (scheduler.Entry, error) {
	if err := s.fence(ctx, tx, l); err != nil {
		return scheduler.Entry{}, err
	}
	if _, _, err := s.lockEntry(ctx, tx, l.Shard, stage, id); err != nil {
		return scheduler.Entry{}, err
	}
	e, found, err := s.takeEntry(ctx, tx, l.Shard, stage, id)
	if err != nil {
		return scheduler.Entry{}, err
	}
	if !found {
		return scheduler.Entry{}, fmt.Errorf("%w: offer %q is not in stage %q's queue", scheduler.ErrNotFound, id, stage)
	}
	return e, nil
}

// takeEntry removes a stage's entry of an offer and returns it (found
// false when there was none).
func (s *Store) takeEntry(ctx context.Context, tx pgx.Tx, sh int, stage, id string) (scheduler.Entry, bool, error) {
	e := scheduler.Entry{Shard: sh, Stage: stage, OfferID: id}
	var ts int64
	var lane int16
	err := tx.QueryRow(ctx, "DELETE FROM "+s.t("queue_inverted")+" WHERE shard_id = $1 AND offer_id = $2 AND stage_id = $3 RETURNING ts, lane, timer, attempts, last_error",
		sh, id, stage).Scan(&ts, &lane, &e.Timer, &e.Attempts, &e.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, wrap("queue: delete", err)
	}
	e.Due, e.Lane = fromMicros(ts), scheduler.Lane(lane) //nolint:gosec // 0 or 1
	if _, err := tx.Exec(ctx, "DELETE FROM "+s.t(laneTable(e.Lane))+" WHERE shard_id = $1 AND stage_id = $2 AND ts = $3 AND offer_id = $4", sh, stage, ts, id); err != nil {
		return e, false, wrap("queue: delete", err)
	}
	return e, true, nil
}

func (s *Store) checkEntry(l scheduler.Lease, stage, id string) error {
	if err := s.checkShard(l, id); err != nil {
		return err
	}
	return scheduler.ValidateID("stage", stage)
}

// Offer implements scheduler.Store: an OfferMany of one.
func (s *Store) Offer(ctx context.Context, l scheduler.Lease, e scheduler.Entry) (bool, error) {
	queued, err := s.OfferMany(ctx, l, []scheduler.Entry{e})
	if err != nil {
		return false, err
	}
	return queued[0], nil
}

// lockEntry reads a stage's entry of an offer and serialises the writers
// of that (offer, stage) pair until tx ends, also while it is absent (a
// transaction-scoped advisory lock on the pair).
func (s *Store) lockEntry(ctx context.Context, tx pgx.Tx, sh int, stage, id string) (scheduler.Entry, bool, error) {
	// Two pairs that hash alike only take turns too.
	key := s.schema + "\x1f" + strconv.Itoa(sh) + "\x1f" + stage + "\x1f" + id
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key); err != nil {
		return scheduler.Entry{}, false, wrap("queue: lock", err)
	}
	es, err := s.entries(ctx, tx, " AND stage_id = $3", sh, id, stage)
	if err != nil || len(es) == 0 {
		return scheduler.Entry{}, false, err
	}
	return es[0], true, nil
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Store) entries(ctx context.Context, q queryer, extra string, args ...any) ([]scheduler.Entry, error) {
	rows, err := q.Query(ctx, "SELECT shard_id, offer_id, stage_id, ts, lane, timer, attempts, last_error FROM "+s.t("queue_inverted")+
		" WHERE shard_id = $1 AND offer_id = $2"+extra+" ORDER BY stage_id", args...)
	if err != nil {
		return nil, wrap("queue: read", err)
	}
	out, err := pgx.CollectRows(rows, scanEntry)
	return out, wrap("queue: read", err)
}

func scanEntry(row pgx.CollectableRow) (scheduler.Entry, error) {
	var e scheduler.Entry
	var ts int64
	var lane int16
	err := row.Scan(&e.Shard, &e.OfferID, &e.Stage, &ts, &lane, &e.Timer, &e.Attempts, &e.LastError)
	e.Due, e.Lane = fromMicros(ts), scheduler.Lane(lane) //nolint:gosec // 0 or 1
	return e, err
}

// Peek implements scheduler.Store.
func (s *Store) Peek(ctx context.Context, l scheduler.Lease, stage string, now time.Time, limit int) ([]scheduler.Entry, time.Time, error) {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return nil, time.Time{}, err
	}
	if limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("%w: peek limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	// One query: each lane's due entries (up to limit each), and the
	// earliest later due time of either lane, read from the lanes' keys
	// (shard_id, stage_id, ts, ...) so that it is the first row of a range.
	lane := func(table string) string {
		return "(SELECT q.ts AS sort_ts, i.shard_id, i.offer_id, i.stage_id, i.ts, i.lane, i.timer, i.attempts, i.last_error FROM " + s.t(table) + " q" +
			" JOIN " + s.t("queue_inverted") + " i ON i.shard_id = q.shard_id AND i.offer_id = q.offer_id AND i.stage_id = q.stage_id" +
			" WHERE q.shard_id = $1 AND q.stage_id = $2 AND q.ts <= $3 ORDER BY q.ts, q.offer_id LIMIT $4)"
	}
	rows, err := s.pool.Query(ctx, lane("queue")+" UNION ALL "+lane("queue_rescan")+
		" UNION ALL (SELECT -1, 0, '', '', least((SELECT min(ts) FROM "+s.t("queue")+" WHERE shard_id = $1 AND stage_id = $2 AND ts > $3),"+
		" (SELECT min(ts) FROM "+s.t("queue_rescan")+" WHERE shard_id = $1 AND stage_id = $2 AND ts > $3)), 0, false, 0, '')",
		l.Shard, stage, micros(now), limit)
	if err != nil {
		return nil, time.Time{}, wrap("peek", err)
	}
	var main, rescan []scheduler.Entry
	var at time.Time
	var sortTS int64
	var e scheduler.Entry
	var ts *int64
	var ln int16
	_, err = pgx.ForEachRow(rows, []any{&sortTS, &e.Shard, &e.OfferID, &e.Stage, &ts, &ln, &e.Timer, &e.Attempts, &e.LastError}, func() error {
		switch {
		case sortTS < 0:
			if ts != nil {
				at = fromMicros(*ts)
			}
		case ln == int16(scheduler.LaneRescan):
			e.Due, e.Lane = fromMicros(*ts), scheduler.LaneRescan
			rescan = append(rescan, e)
		default:
			e.Due, e.Lane = fromMicros(*ts), scheduler.LaneMain
			main = append(main, e)
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, wrap("peek", err)
	}
	byDue := func(a, b scheduler.Entry) int {
		if c := a.Due.Compare(b.Due); c != 0 {
			return c
		}
		return cmpString(a.OfferID, b.OfferID)
	}
	slices.SortStableFunc(main, byDue)
	slices.SortStableFunc(rescan, byDue)
	out := append(main, rescan...)
	return out[:min(len(out), limit)], at, nil
}

// Delete implements scheduler.Store.
func (s *Store) Delete(ctx context.Context, l scheduler.Lease, stage, id string) error {
	if err := s.checkEntry(l, stage, id); err != nil {
		return err
	}
	return s.tx(ctx, "delete", func(tx pgx.Tx) error {
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		if _, _, err := s.lockEntry(ctx, tx, l.Shard, stage, id); err != nil {
			return err
		}
		return s.deleteEntry(ctx, tx, l.Shard, stage, id)
	})
}

// Check implements scheduler.Store.
func (s *Store) Check(ctx context.Context, shard int, id string) ([]scheduler.Entry, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return nil, err
	}
	return s.checks.do(ctx, checkKey{shard: shard, offer: id})
}

type checkKey struct {
	shard int
	offer string
}

// checkMany lists the queue entries of offers, in one query.
func (s *Store) checkMany(ctx context.Context, keys []checkKey) ([][]scheduler.Entry, error) {
	shards, ids := make([]int32, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		shards[i], ids[i] = int32(k.shard), k.offer //nolint:gosec // below maxShards
	}
	rows, err := s.pool.Query(ctx, "SELECT u.n, i.shard_id, i.offer_id, i.stage_id, i.ts, i.lane, i.timer, i.attempts, i.last_error"+
		" FROM unnest($1::integer[], $2::text[]) WITH ORDINALITY AS u(shard, offer_id, n)"+
		" JOIN "+s.t("queue_inverted")+" i ON i.shard_id = u.shard AND i.offer_id = u.offer_id ORDER BY u.n, i.stage_id", shards, ids)
	if err != nil {
		return nil, wrap("queue: read", err)
	}
	out := make([][]scheduler.Entry, len(keys))
	var n int64
	var e scheduler.Entry
	var ts int64
	var lane int16
	_, err = pgx.ForEachRow(rows, []any{&n, &e.Shard, &e.OfferID, &e.Stage, &ts, &lane, &e.Timer, &e.Attempts, &e.LastError}, func() error {
		e.Due, e.Lane = fromMicros(ts), scheduler.Lane(lane) //nolint:gosec // 0 or 1
		out[n-1] = append(out[n-1], e)
		return nil
	})
	if err != nil {
		return nil, wrap("queue: read", err)
	}
	return out, nil
}

// Retry implements scheduler.Store.
func (s *Store) Retry(ctx context.Context, l scheduler.Lease, stage, id string, at time.Time, cause string) (int, error) {
	if err := s.checkEntry(l, stage, id); err != nil {
		return 0, err
	}
	attempts := 0
	err := s.tx(ctx, "retry", func(tx pgx.Tx) error {
		e, err := s.takeHeldEntry(ctx, tx, l, stage, id)
		if err != nil {
			return err
		}
		e.Due, e.Attempts, e.LastError = at, min(e.Attempts, math.MaxInt32-1)+1, truncate(cause, maxCause)
		attempts = e.Attempts
		if err := s.insertEntry(ctx, tx, e); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE "+s.t("queue_inverted")+" SET attempts = $4, last_error = $5 WHERE shard_id = $1 AND offer_id = $2 AND stage_id = $3",
			l.Shard, id, stage, e.Attempts, e.LastError)
		return wrap("retry", err)
	})
	return attempts, err
}

// maxCause bounds a stored error message.
const maxCause = 4096

// truncate cuts s to at most n bytes, not inside a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// ---- changed offers ----

// Changes implements scheduler.Store.
func (s *Store) Changes(ctx context.Context, l scheduler.Lease, limit int) ([]scheduler.Change, error) {
	rows, err := s.pool.Query(ctx, "SELECT shard, offer_id, seq, source, all_fields, fields, chain FROM "+s.t("changed")+
		" WHERE shard = $1 ORDER BY seq LIMIT $2", l.Shard, limit)
	if err != nil {
		return nil, wrap("read changed offers", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduler.Change, error) {
		var c scheduler.Change
		var all bool
		err := row.Scan(&c.Shard, &c.OfferID, &c.Seq, &c.Source, &all, &c.Fields, &c.Chain)
		if all {
			c.Fields = nil
		} else if c.Fields == nil {
			c.Fields = []string{}
		}
		return c, err
	})
	return out, wrap("read changed offers", err)
}

// AckChange implements scheduler.Store: an AckChanges of one.
func (s *Store) AckChange(ctx context.Context, l scheduler.Lease, c scheduler.Change) error {
	return s.AckChanges(ctx, l, []scheduler.Change{c})
}

// fencedExec runs one statement in a transaction fenced by l.
func (s *Store) fencedExec(ctx context.Context, l scheduler.Lease, what, sql string, args ...any) error {
	return s.tx(ctx, what, func(tx pgx.Tx) error {
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return wrap(what, err)
	})
}

// Scan implements scheduler.Store.
func (s *Store) Scan(ctx context.Context, shard int, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, "SELECT offer_id FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id > $2 ORDER BY offer_id LIMIT $3", shard, after, limit)
	if err != nil {
		return nil, wrap("scan offers", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, wrap("scan offers", err)
}

// ---- AfterSave ----

// AfterSaves implements scheduler.Store.
func (s *Store) AfterSaves(ctx context.Context, l scheduler.Lease, stage string, limit int) ([]scheduler.Pending, error) {
	rows, err := s.pool.Query(ctx, "SELECT shard, stage_id, offer_id, seq FROM "+s.t("aftersave")+" WHERE shard = $1 AND stage_id = $2 ORDER BY seq LIMIT $3", l.Shard, stage, limit)
	if err != nil {
		return nil, wrap("read pending after-saves", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduler.Pending, error) {
		var p scheduler.Pending
		err := row.Scan(&p.Shard, &p.Stage, &p.OfferID, &p.Seq)
		return p, err
	})
	return out, wrap("read pending after-saves", err)
}

// AfterSaveDone implements scheduler.Store.
func (s *Store) AfterSaveDone(ctx context.Context, l scheduler.Lease, p scheduler.Pending) error {
	if err := s.checkShard(l, p.OfferID); err != nil {
		return err
	}
	return s.fencedExec(ctx, l, "after-save done",
		"DELETE FROM "+s.t("aftersave")+" WHERE shard = $1 AND stage_id = $2 AND offer_id = $3 AND seq = $4", l.Shard, p.Stage, p.OfferID, p.Seq)
}

// ---- dead letters ----

// DeadLetter implements scheduler.Store.
func (s *Store) DeadLetter(ctx context.Context, l scheduler.Lease, stage, id, cause string) error {
	if err := s.checkEntry(l, stage, id); err != nil {
		return err
	}
	return s.tx(ctx, "dead-letter", func(tx pgx.Tx) error {
		e, err := s.takeHeldEntry(ctx, tx, l, stage, id)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+s.t("dead_letters")+" (stage_id, offer_id, shard, attempts, cause) VALUES ($1, $2, $3, $4, $5)"+
			" ON CONFLICT (stage_id, offer_id) DO UPDATE SET attempts = EXCLUDED.attempts, cause = EXCLUDED.cause, at = clock_timestamp()",
			stage, id, l.Shard, e.Attempts, truncate(cause, maxCause))
		return wrap("dead-letter", err)
	})
}

// DeadLetters implements scheduler.Store.
func (s *Store) DeadLetters(ctx context.Context, stage string, limit int) ([]scheduler.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, "SELECT stage_id, offer_id, attempts, cause, at FROM "+s.t("dead_letters")+" WHERE stage_id = $1 ORDER BY at, offer_id LIMIT $2", stage, limit)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduler.DeadLetter, error) {
		var d scheduler.DeadLetter
		err := row.Scan(&d.Stage, &d.OfferID, &d.Attempts, &d.Cause, &d.At)
		return d, err
	})
	return out, wrap("list dead letters", err)
}

// Requeue implements scheduler.Store.
func (s *Store) Requeue(ctx context.Context, stage, id string, at time.Time) error {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return err
	}
	return s.tx(ctx, "requeue", func(tx pgx.Tx) error {
		var sh int
		err := tx.QueryRow(ctx, "DELETE FROM "+s.t("dead_letters")+" WHERE stage_id = $1 AND offer_id = $2 RETURNING shard", stage, id).Scan(&sh)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no dead letter of offer %q in stage %q", scheduler.ErrNotFound, id, stage)
		}
		if err != nil {
			return wrap("requeue", err)
		}
		_, found, err := s.lockEntry(ctx, tx, sh, stage, id)
		if err != nil || found {
			return err // queued again meanwhile: it stays as it is
		}
		return s.insertEntry(ctx, tx, scheduler.Entry{Shard: sh, Stage: stage, OfferID: id, Due: at})
	})
}

// Stats implements scheduler.Store.
func (s *Store) Stats(ctx context.Context, stage string) (int, time.Time, error) {
	var n int
	var earliest *int64
	err := s.pool.QueryRow(ctx, "SELECT count(*), min(ts) FROM "+s.t("queue_inverted")+" WHERE stage_id = $1", stage).Scan(&n, &earliest)
	if err != nil {
		return 0, time.Time{}, wrap("queue stats", err)
	}
	var at time.Time
	if earliest != nil {
		at = fromMicros(*earliest)
	}
	return n, at, nil
}
