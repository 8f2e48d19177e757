package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/scheduler"
)

// The batch writes (SaveMany, OfferMany, AckChanges, PutMany; Save,
// Offer, AckChange and Put are batches of one) take two round trips
// whatever their size: BEGIN with the fence, the locks and the reads in
// one pipeline; the writes, set-based where rows are alike (unnest of
// arrays), with COMMIT in another. What decides between the two pipelines
// (version checks, patches, the queue's rules) runs here, between them.

// pipeTx is a READ COMMITTED transaction on a connection of the pool
// whose BEGIN goes with its first pipeline (read) and whose COMMIT goes
// with its last (commit).
type pipeTx struct {
	c    *pgxpool.Conn
	open bool
}

// ptx runs f in a pipeTx; a transaction f leaves open (an error, or
// nothing to write) is rolled back.
func (s *Store) ptx(ctx context.Context, what string, f func(*pipeTx) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: %s: connect: %w", what, err)
	}
	defer c.Release() // a connection left in a transaction is closed by the pool
	p := &pipeTx{c: c}
	err = f(p)
	if p.open {
		_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}

// read begins the transaction and sends b in the same pipeline.
func (p *pipeTx) read(ctx context.Context, b *pgx.Batch, what string) (pgx.BatchResults, error) {
	nb := &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: "BEGIN ISOLATION LEVEL READ COMMITTED"}}, b.QueuedQueries...)}
	p.open = true
	br := p.c.SendBatch(ctx, nb)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, fmt.Errorf("pgstore: %s: begin: %w", what, err)
	}
	return br, nil
}

// commit sends w and COMMIT in one pipeline.
func (p *pipeTx) commit(ctx context.Context, w *pgx.Batch, what string) error {
	w.Queue("COMMIT")
	if err := execAll(p.c.SendBatch(ctx, w), w.Len(), what); err != nil {
		return err
	}
	p.open = false
	return nil
}

// pair is an (offer, stage) pair: a queue entry's or a state's key.
type pair struct{ offer, stage string }

// lockKey is the advisory lock that serialises the writers of a pair's
// queue entry, also while it is absent (two pairs that hash alike only
// take turns too).
func (s *Store) lockKey(sh int, p pair) string {
	return s.schema + "\x1f" + strconv.Itoa(sh) + "\x1f" + p.stage + "\x1f" + p.offer
}

// queueFence queues the fence of l: the shard's row read FOR SHARE (see
// fence).
func (s *Store) queueFence(b *pgx.Batch, l scheduler.Lease) {
	b.Queue("SELECT owner, epoch FROM "+s.t("shards")+" WHERE shard = $1 FOR SHARE", l.Shard)
}

// readFence reads queueFence's answer.
func (s *Store) readFence(br pgx.BatchResults, l scheduler.Lease) error {
	var owner string
	var epoch int64
	return s.fenceAnswer(l, br.QueryRow().Scan(&owner, &epoch), owner, epoch)
}

// queueLocks queues the advisory locks of pairs of shard sh, in the keys'
// order, so that two batches never wait for each other in a cycle.
func (s *Store) queueLocks(b *pgx.Batch, sh int, pairs []pair) {
	keys := make([]string, len(pairs))
	for i, p := range pairs {
		keys[i] = s.lockKey(sh, p)
	}
	slices.Sort(keys)
	b.Queue("SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM unnest($1::text[]) AS k", keys)
}

func splitPairs(pairs []pair) (offers, stages []string) {
	offers, stages = make([]string, len(pairs)), make([]string, len(pairs))
	for i, p := range pairs {
		offers[i], stages[i] = p.offer, p.stage
	}
	return offers, stages
}

// queueReadEntries queues the read of pairs' queue entries (scanEntry's
// columns).
func (s *Store) queueReadEntries(b *pgx.Batch, sh int, pairs []pair) {
	offers, stages := splitPairs(pairs)
	b.Queue("SELECT i.shard_id, i.offer_id, i.stage_id, i.ts, i.lane, i.timer, i.attempts, i.last_error FROM "+s.t("queue_inverted")+" i"+
		" JOIN unnest($2::text[], $3::text[]) AS u(offer_id, stage_id) ON i.offer_id = u.offer_id AND i.stage_id = u.stage_id"+
		" WHERE i.shard_id = $1", sh, offers, stages)
}

// queueDeleteEntries queues the removal of pairs' entries, from
// queue_inverted and from their lanes.
func (s *Store) queueDeleteEntries(b *pgx.Batch, sh int, pairs []pair) {
	if len(pairs) == 0 {
		return
	}
	offers, stages := splitPairs(pairs)
	b.Queue("WITH d AS (DELETE FROM "+s.t("queue_inverted")+" i USING unnest($2::text[], $3::text[]) AS u(offer_id, stage_id)"+
		" WHERE i.shard_id = $1 AND i.offer_id = u.offer_id AND i.stage_id = u.stage_id RETURNING i.stage_id, i.ts, i.offer_id, i.lane),"+
		" m AS (DELETE FROM "+s.t("queue")+" q USING d WHERE d.lane = 0 AND q.shard_id = $1 AND q.stage_id = d.stage_id AND q.ts = d.ts AND q.offer_id = d.offer_id),"+
		" r AS (DELETE FROM "+s.t("queue_rescan")+" q USING d WHERE d.lane = 1 AND q.shard_id = $1 AND q.stage_id = d.stage_id AND q.ts = d.ts AND q.offer_id = d.offer_id)"+
		" SELECT count(*) FROM d", sh, offers, stages)
}

// queueInsertEntries queues the insertion of es (all of shard sh, known
// absent) into queue_inverted and their lanes, and a wake-up per stage.
func (s *Store) queueInsertEntries(b *pgx.Batch, sh int, es []scheduler.Entry) {
	if len(es) == 0 {
		return
	}
	n := len(es)
	offers, stages, ts, lanes := make([]string, n), make([]string, n), make([]int64, n), make([]int16, n)
	timers, attempts, causes := make([]bool, n), make([]int32, n), make([]string, n)
	var laneUsed [2]bool
	stageSet := map[string]bool{}
	for i, e := range es {
		offers[i], stages[i], ts[i], lanes[i] = e.OfferID, e.Stage, micros(e.Due), int16(e.Lane)
		timers[i], attempts[i], causes[i] = e.Timer, int32(min(e.Attempts, 1<<31-1)), e.LastError //nolint:gosec // bounded
		laneUsed[e.Lane] = true
		stageSet[e.Stage] = true
	}
	b.Queue("INSERT INTO "+s.t("queue_inverted")+" (shard_id, offer_id, stage_id, ts, lane, timer, attempts, last_error)"+
		" SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::smallint[], $6::boolean[], $7::integer[], $8::text[])",
		sh, offers, stages, ts, lanes, timers, attempts, causes)
	for lane, used := range laneUsed {
		if used {
			b.Queue("INSERT INTO "+s.t(laneTable(scheduler.Lane(lane)))+" (shard_id, stage_id, ts, offer_id)"+ //nolint:gosec // 0 or 1
				" SELECT $1, stage_id, ts, offer_id FROM unnest($2::text[], $3::text[], $4::bigint[], $5::smallint[]) AS u(offer_id, stage_id, ts, lane) WHERE lane = $6",
				sh, offers, stages, ts, lanes, int16(lane)) //nolint:gosec // 0 or 1
		}
	}
	for _, st := range slices.Sorted(maps.Keys(stageSet)) {
		s.queueNotify(b, sh, st)
	}
}

// queueNotify queues a wake-up of shard sh's stage ("" for the marks),
// sent at commit.
func (s *Store) queueNotify(b *pgx.Batch, sh int, stage string) {
	b.Queue("SELECT pg_notify($1, $2)", s.channel, strconv.Itoa(sh)+" "+stage)
}

// execAll reads every answer of a batch that returns nothing wanted.
func execAll(br pgx.BatchResults, n int, what string) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return wrap(what, err)
		}
	}
	return wrap(what, br.Close())
}

// ---- OfferMany ----

// OfferMany implements scheduler.Store: the entries in one transaction,
// each decided as Offer decides, in order.
func (s *Store) OfferMany(ctx context.Context, l scheduler.Lease, entries []scheduler.Entry) ([]bool, error) {
	for i, e := range entries {
		if err := s.checkEntry(l, e.Stage, e.OfferID); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Lane != scheduler.LaneMain && e.Lane != scheduler.LaneRescan {
			return nil, fmt.Errorf("%w: entry %d (offer %q, stage %q): lane %d", scheduler.ErrInvalid, i, e.OfferID, e.Stage, e.Lane)
		}
	}
	queued := make([]bool, len(entries))
	if len(entries) == 0 {
		return queued, nil
	}
	var pairs []pair
	seen := map[pair]bool{}
	for _, e := range entries {
		p := pair{e.OfferID, e.Stage}
		if !seen[p] {
			seen[p] = true
			pairs = append(pairs, p)
		}
	}
	err := s.ptx(ctx, "offer", func(tx *pipeTx) error {
		b := &pgx.Batch{}
		s.queueFence(b, l)
		s.queueLocks(b, l.Shard, pairs)
		s.queueReadEntries(b, l.Shard, pairs)
		br, err := tx.read(ctx, b, "offer")
		if err != nil {
			return err
		}
		if err := s.readFence(br, l); err != nil {
			br.Close()
			return err
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return wrap("offer: lock", err)
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return wrap("offer: read", err)
		}
		old, err := pgx.CollectRows(rows, scanEntry)
		if err != nil {
			br.Close()
			return wrap("offer: read", err)
		}
		if err := br.Close(); err != nil {
			return wrap("offer: read", err)
		}
		// Decide in order, on the queue as the earlier entries left it.
		cur := map[pair]scheduler.Entry{}
		for _, e := range old {
			cur[pair{e.OfferID, e.Stage}] = e
		}
		orig := maps.Clone(cur)
		changed := map[pair]bool{}
		for i, e := range entries {
			e.Shard = l.Shard
			p := pair{e.OfferID, e.Stage}
			if o, found := cur[p]; found {
				earlier := e.Due.Before(o.Due)
				promote := e.Lane == scheduler.LaneMain && o.Lane == scheduler.LaneRescan
				if !earlier && !promote {
					continue
				}
				if !earlier {
					e.Due = o.Due
				}
				if o.Lane == scheduler.LaneMain {
					e.Lane = scheduler.LaneMain
				}
			}
			e.Attempts, e.LastError = 0, ""
			cur[p], changed[p], queued[i] = e, true, true
		}
		var del []pair
		var ins []scheduler.Entry
		for _, p := range pairs {
			if !changed[p] {
				continue
			}
			if _, found := orig[p]; found {
				del = append(del, p)
			}
			ins = append(ins, cur[p])
		}
		w := &pgx.Batch{}
		s.queueDeleteEntries(w, l.Shard, del)
		s.queueInsertEntries(w, l.Shard, ins)
		return tx.commit(ctx, w, "offer: write")
	})
	if err != nil {
		return nil, err
	}
	return queued, nil
}

// ---- AckChanges ----

// AckChanges implements scheduler.Store: one fenced statement for all.
func (s *Store) AckChanges(ctx context.Context, l scheduler.Lease, cs []scheduler.Change) error {
	ids, seqs := make([]string, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		if err := s.checkShard(l, c.OfferID); err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
		ids[i], seqs[i] = c.OfferID, c.Seq
	}
	if len(cs) == 0 {
		return nil
	}
	return s.ptx(ctx, "ack changed offers", func(tx *pipeTx) error {
		b := &pgx.Batch{}
		s.queueFence(b, l)
		b.Queue("DELETE FROM "+s.t("changed")+" c USING unnest($2::text[], $3::bigint[]) AS u(offer_id, seq)"+
			" WHERE c.shard = $1 AND c.offer_id = u.offer_id AND c.seq = u.seq", l.Shard, ids, seqs)
		br, err := tx.read(ctx, b, "ack changed offers")
		if err != nil {
			return err
		}
		if err := s.readFence(br, l); err != nil {
			br.Close()
			return err
		}
		if err := execAll(br, 1, "ack changed offers"); err != nil {
			return err
		}
		return tx.commit(ctx, &pgx.Batch{}, "ack changed offers")
	})
}

// ---- SaveMany ----

func (s *Store) checkSave(l scheduler.Lease, sv scheduler.Save) error {
	if err := s.checkShard(l, sv.OfferID); err != nil {
		return err
	}
	if err := scheduler.ValidateID("stage", sv.Stage); err != nil {
		return err
	}
	if sv.Body != nil && sv.Patch != nil {
		return fmt.Errorf("%w: save of offer %q by stage %q has both a body and a patch", scheduler.ErrInvalid, sv.OfferID, sv.Stage)
	}
	if sv.Body != nil {
		return scheduler.CheckBody(sv.Body)
	}
	return nil
}

type offerRow struct {
	version int64
	body    []byte
}

type stateRow struct {
	version int64
	typeURL string
	value   []byte
}

// SaveMany implements scheduler.Store: every save in one transaction.
func (s *Store) SaveMany(ctx context.Context, l scheduler.Lease, saves []scheduler.Save) ([]scheduler.Saved, []error, error) {
	// todo: the saves that passed the checks of their input, by offer id.
	todo, errs := scheduler.OncePerOffer("SaveMany", len(saves),
		func(i int) error { return s.checkSave(l, saves[i]) }, func(i int) string { return saves[i].OfferID })
	slices.SortFunc(todo, func(a, b int) int { return cmpString(saves[a].OfferID, saves[b].OfferID) })
	var out []scheduler.Saved
	err := s.ptx(ctx, "save", func(tx *pipeTx) error {
		out = make([]scheduler.Saved, len(saves))
		for _, i := range todo {
			errs[i] = nil
		}
		if len(todo) == 0 {
			return nil
		}
		ids, stages := make([]string, len(todo)), make([]string, len(todo))
		pairs := make([]pair, len(todo))
		for k, i := range todo {
			ids[k], stages[k] = saves[i].OfferID, saves[i].Stage
			pairs[k] = pair{saves[i].OfferID, saves[i].Stage}
		}
		b := &pgx.Batch{}
		s.queueFence(b, l)
		b.Queue("SELECT offer_id, version, body FROM "+s.t("offers")+" WHERE shard = $1 AND offer_id = ANY($2) ORDER BY offer_id FOR UPDATE", l.Shard, ids)
		b.Queue("SELECT st.offer_id, st.stage_id, st.version, st.type_url, st.value FROM "+s.t("states")+" st"+
			" JOIN unnest($2::text[], $3::text[]) AS u(offer_id, stage_id) ON st.offer_id = u.offer_id AND st.stage_id = u.stage_id"+
			" WHERE st.shard = $1 ORDER BY st.offer_id FOR UPDATE OF st", l.Shard, ids, stages)
		s.queueLocks(b, l.Shard, pairs)
		b.Queue("SELECT clock_timestamp()")
		br, err := tx.read(ctx, b, "save")
		if err != nil {
			return err
		}
		if err := s.readFence(br, l); err != nil {
			br.Close()
			return err
		}
		offers := map[string]offerRow{}
		states := map[pair]stateRow{}
		var now time.Time
		err = func() error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var id string
			var o offerRow
			if _, err := pgx.ForEachRow(rows, []any{&id, &o.version, &o.body}, func() error {
				offers[id] = offerRow{o.version, slices.Clone(o.body)}
				return nil
			}); err != nil {
				return err
			}
			rows, err = br.Query()
			if err != nil {
				return err
			}
			var p pair
			var st stateRow
			if _, err := pgx.ForEachRow(rows, []any{&p.offer, &p.stage, &st.version, &st.typeURL, &st.value}, func() error {
				states[p] = stateRow{st.version, st.typeURL, slices.Clone(st.value)}
				return nil
			}); err != nil {
				return err
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
			return br.QueryRow().Scan(&now)
		}()
		if err != nil {
			br.Close()
			return wrap("save: read", err)
		}
		if err := br.Close(); err != nil {
			return wrap("save: read", err)
		}

		w := &pgx.Batch{}
		var stIDs, stStages, stTypes []string
		var stVersions []int64
		var stValues [][]byte
		var obIDs []string
		var obRecords [][]byte
		var done []pair
		var timers []scheduler.Entry
		var asIDs, asStages []string
		marks, afters := false, map[string]bool{}
		for _, i := range todo {
			sv := saves[i]
			cur, found := offers[sv.OfferID]
			if !found {
				errs[i] = fmt.Errorf("%w: offer %q (deleted while stage %q ran)", scheduler.ErrNotFound, sv.OfferID, sv.Stage)
				continue
			}
			if sv.Patch == nil && cur.version != sv.ReadVersion {
				errs[i] = fmt.Errorf("%w: offer %q is at version %d; stage %q read version %d", scheduler.ErrConflict, sv.OfferID, cur.version, sv.Stage, sv.ReadVersion)
				continue
			}
			st, hasState := states[pair{sv.OfferID, sv.Stage}]
			if sv.State != nil && st.version != sv.StateVersion {
				errs[i] = fmt.Errorf("%w: state of stage %q of offer %q is at version %d, not %d", scheduler.ErrConflict, sv.Stage, sv.OfferID, st.version, sv.StateVersion)
				continue
			}
			newBody, fields := sv.Body, sv.Fields
			if sv.Patch != nil {
				var err error
				if newBody, err = scheduler.ApplyPatch(cur.body, sv.Patch); err != nil {
					errs[i] = err
					continue
				}
				if fields, err = scheduler.ChangedFields(cur.body, newBody); err != nil {
					errs[i] = err
					continue
				}
				if len(fields) == 0 {
					newBody = nil
				}
			}
			res := scheduler.Saved{OfferVersion: cur.version, StateVersion: sv.StateVersion}
			body := cur.body
			if newBody != nil && !bytes.Equal(newBody, cur.body) {
				w.Queue("UPDATE "+s.t("offers")+" SET version = version + 1, body = $3, chain = $4 WHERE shard = $1 AND offer_id = $2",
					l.Shard, sv.OfferID, newBody, sv.Chain)
				res.OfferVersion, res.Changed, body = cur.version+1, true, newBody
				source := sv.Stage
				if cur.version != sv.ReadVersion {
					source = "" // a patch on a newer offer: the stage too is asked about it
				}
				s.queueMark(w, l.Shard, sv.OfferID, source, fields, sv.Chain)
				marks = true
			}
			if sv.State != nil {
				res.StateVersion = st.version + 1
				stIDs, stStages, stVersions = append(stIDs, sv.OfferID), append(stStages, sv.Stage), append(stVersions, res.StateVersion)
				stTypes, stValues = append(stTypes, sv.State.GetTypeUrl()), append(stValues, nonNil(sv.State.GetValue()))
			}
			// A patch that changed nothing on a newer offer than the stage
			// read: the stage has not seen that offer and no mark will ask
			// it, so its entry stays due and it runs again.
			if rerun := sv.Patch != nil && cur.version != sv.ReadVersion && !res.Changed; !rerun {
				done = append(done, pair{sv.OfferID, sv.Stage})
				if !sv.Timer.IsZero() {
					timers = append(timers, scheduler.Entry{Shard: l.Shard, Stage: sv.Stage, OfferID: sv.OfferID, Due: sv.Timer, Timer: true})
				}
			}
			if sv.AfterSave {
				asIDs, asStages = append(asIDs, sv.OfferID), append(asStages, sv.Stage)
				afters[sv.Stage] = true
			}
			out[i] = res
			if !res.Changed && sv.State == nil {
				continue // nothing new to publish
			}
			r := scheduler.Record{OfferID: sv.OfferID, Shard: l.Shard, OfferVersion: res.OfferVersion, Body: body, Stage: sv.Stage, Time: now}
			if sv.State != nil {
				r.StateType, r.State, r.StateVersion = sv.State.GetTypeUrl(), sv.State.GetValue(), res.StateVersion
			} else if hasState {
				r.StateType, r.State, r.StateVersion = st.typeURL, st.value, st.version
			}
			rec, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("pgstore: encode the changelog record of %q: %w", r.OfferID, err)
			}
			obIDs, obRecords = append(obIDs, sv.OfferID), append(obRecords, rec)
		}
		if marks {
			s.queueNotify(w, l.Shard, "")
		}
		if len(stIDs) > 0 {
			w.Queue("INSERT INTO "+s.t("states")+" (shard, offer_id, stage_id, version, type_url, value)"+
				" SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[])"+
				" ON CONFLICT (shard, offer_id, stage_id) DO UPDATE SET version = EXCLUDED.version, type_url = EXCLUDED.type_url, value = EXCLUDED.value",
				l.Shard, stIDs, stStages, stVersions, stTypes, stValues)
		}
		s.queueDeleteEntries(w, l.Shard, done)
		s.queueInsertEntries(w, l.Shard, timers)
		if len(asIDs) > 0 {
			w.Queue("INSERT INTO "+s.t("aftersave")+" (shard, stage_id, offer_id, seq)"+
				" SELECT $1, stage_id, offer_id, nextval('"+s.t("seq")+"') FROM unnest($2::text[], $3::text[]) AS u(offer_id, stage_id)"+
				" ON CONFLICT (shard, stage_id, offer_id) DO UPDATE SET seq = EXCLUDED.seq", l.Shard, asIDs, asStages)
			for _, st := range slices.Sorted(maps.Keys(afters)) {
				s.queueNotify(w, l.Shard, st)
			}
		}
		s.queueOutbox(w, obIDs, obRecords)
		if w.Len() == 0 {
			return nil // nothing written: the transaction is rolled back
		}
		return tx.commit(ctx, w, "save: write")
	})
	if err != nil {
		return nil, nil, err
	}
	return out, errs, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// queueMark queues the making or merging of an offer's changed-offer mark
// (the caller queues the wake-up).
func (s *Store) queueMark(b *pgx.Batch, sh int, id, source string, fields []string, chain int) {
	all := fields == nil
	if all {
		fields = []string{}
	}
	b.Queue("INSERT INTO "+s.t("changed")+" AS c (shard, offer_id, seq, source, all_fields, fields, chain)"+
		" VALUES ($1, $2, nextval('"+s.t("seq")+"'), $3, $4, $5, $6)"+
		" ON CONFLICT (shard, offer_id) DO UPDATE SET seq = EXCLUDED.seq,"+
		" source = CASE WHEN c.source = EXCLUDED.source THEN c.source ELSE '' END,"+
		" all_fields = c.all_fields OR EXCLUDED.all_fields,"+
		" fields = ARRAY(SELECT DISTINCT f FROM unnest(c.fields || EXCLUDED.fields) AS f ORDER BY f),"+
		" chain = GREATEST(c.chain, EXCLUDED.chain)", sh, id, source, all, fields, chain)
}

// queueOutbox queues changelog records (in their order) and the relay's
// wake-up.
func (s *Store) queueOutbox(b *pgx.Batch, ids []string, records [][]byte) {
	if len(ids) == 0 {
		return
	}
	b.Queue("INSERT INTO "+s.t("outbox")+" (offer_id, record) SELECT * FROM unnest($1::text[], $2::bytea[])", ids, records)
	b.Queue("SELECT pg_notify($1, '')", s.outboxChannel)
}
