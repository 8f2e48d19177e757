package numerator

import (
	"errors"
	"fmt"
	"math"
)

// shardParams are a run's rules for one shard.
type shardParams struct {
	shard     uint32
	run       uint64 // this run's number; seen keys get last_seen_run = run
	ttl       uint64 // a key unseen for more than ttl runs expires
	force     bool   // rebuild unconditionally
	threshold float64
	minDocs   int64 // shards smaller than this never rebuild automatically
	progress  *tracker
}

// ShardStats describes one shard of a run's output.
type ShardStats struct {
	Shard    uint32
	Offers   int64 // distinct input offers placed on the shard
	Docs     int64 // rows of the output state
	MaxDocID int64 // -1 when the shard is empty
	Holes    int64 // ids in [0, MaxDocID] held by nobody
	New      int64 // keys that got an id this run
	Reused   int64 // of New, those that took a freed id
	Expired  int64 // keys dropped from the state (TTL, or absent at a rebuild)
	Rebuilt  bool
}

// HoleRatio is Holes / (MaxDocID+1): the share of the shard's id range that
// the index pays for and nobody uses.
func (s ShardStats) HoleRatio() float64 {
	if s.MaxDocID < 0 {
		return 0
	}
	return float64(s.Holes) / float64(s.MaxDocID+1)
}

// shardSink receives a shard's output rows, each in (hash, key) order.
type shardSink interface {
	state(r *record) error   // a row of the output state (shard, doc, lastSeen set)
	newDoc(r *record) error  // a key that got an id this run
	expired(r *record) error // a state row dropped, with its old shard and doc
}

// A shard is processed in two passes over its sorted state and offers:
// planShard works out what a plain run would do (which ids stay, how many
// keys are new) so that the run can decide on an automatic rebuild and fix
// the new version before anything is written; then emitPlain or emitRebuild
// writes the shard's rows (N1–N4).

// plan is what a plain run of a shard would do.
type plan struct {
	used    bitset // doc_ids kept
	kept    int64  // state rows kept
	maxKept int64  // -1 when none is kept
	newKeys int64
	offers  int64
	expired int64
	size    int64 // max id + 1 after the plain run
	holes   int64 // holes after the plain run
	// trace records the join's steps, so that emitting replays it without
	// comparing keys again.
	trace []byte
	drops dropCounts
}

// dropCounts measure what a run's offers lack of its input state.
type dropCounts struct {
	rows    int64 // state rows
	absent  int64 // state rows without an offer
	live    int64 // state rows the previous generation had (last_seen_run = run-1)
	dropped int64 // of live, those without an offer
}

func (d *dropCounts) add(p shardParams, s, o *record) {
	if s == nil {
		return
	}
	d.rows++
	live := s.lastSeen+1 == p.run
	if live {
		d.live++
	}
	if o == nil {
		d.absent++
		if live {
			d.dropped++
		}
	}
}

func (d *dropCounts) merge(e dropCounts) {
	d.rows += e.rows
	d.absent += e.absent
	d.live += e.live
	d.dropped += e.dropped
}

// countDrops joins a shard's state and offers only to count what the
// offers lack (a forced rebuild plans nothing).
func countDrops(p shardParams, state, offers sortedSource) (dropCounts, error) {
	var d dropCounts
	rows := rowCounter{t: p.progress}
	defer rows.flush()
	err := joinSources(p.shard, state, offers, func() { rows.add(1) }, func(s, o *record) error {
		rows.add(weight(s, o))
		d.add(p, s, o)
		return nil
	})
	return d, err
}

// Steps of a join trace.
const (
	stepState    byte = 1 // a state row without offer
	stepOffer    byte = 2 // an offer without state row
	stepBoth     byte = 3 // a state row and its offer
	stepDupOffer byte = 4 // a duplicate offer, dropped
)

func (pl *plan) holeRatio() float64 {
	if pl.size == 0 {
		return 0
	}
	return float64(pl.holes) / float64(pl.size)
}

// wantsRebuild: the shard's hole ratio after the plain run would pass the
// threshold. Holes are counted after new keys took the freed ids, so a shard
// whose churn refills its holes never rebuilds; shards below minDocs never
// do. Right after a rebuild every row has last_seen_run = that run, so no id
// can be freed, and no rebuild triggered, for the next TTL runs.
func (pl *plan) wantsRebuild(p shardParams) bool {
	return pl.size > 0 && pl.size >= p.minDocs && pl.holeRatio() > p.threshold
}

func expires(p shardParams, lastSeen uint64) bool {
	return lastSeen < p.run && p.run-lastSeen > p.ttl
}

func planShard(p shardParams, state, offers sortedSource) (*plan, error) {
	pl := &plan{maxKept: -1, trace: make([]byte, 0, state.count()+offers.count())}
	rows := rowCounter{t: p.progress}
	defer rows.flush()
	onDup := func() { pl.trace = append(pl.trace, stepDupOffer); rows.add(1) }
	err := joinSources(p.shard, state, offers, onDup, func(s, o *record) error {
		rows.add(weight(s, o))
		pl.drops.add(p, s, o)
		switch {
		case s == nil:
			pl.trace = append(pl.trace, stepOffer)
		case o == nil:
			pl.trace = append(pl.trace, stepState)
		default:
			pl.trace = append(pl.trace, stepBoth)
		}
		if o != nil {
			pl.offers++
		}
		switch {
		case s == nil:
			pl.newKeys++
			return nil
		case o == nil && expires(p, s.lastSeen):
			pl.expired++
			return nil
		}
		if pl.used.set(s.doc) {
			return fmt.Errorf("%w: shard %d: doc_id %d is held by two keys (one is %+v); the state is corrupt, rebuild it with --rebuild-state-force",
				ErrBadState, p.shard, s.doc, s.key)
		}
		pl.kept++
		pl.maxKept = max(pl.maxKept, int64(s.doc))
		return nil
	})
	if err != nil {
		return nil, err
	}
	free := pl.maxKept + 1 - pl.kept
	if pl.newKeys <= free {
		pl.size, pl.holes = pl.maxKept+1, free-pl.newKeys
	} else {
		pl.size, pl.holes = pl.kept+pl.newKeys, 0
	}
	if pl.size > math.MaxUint32+1 {
		return nil, fmt.Errorf("%w: shard %d would need %d doc_ids, more than uint32 holds; use a scheme with more shards", ErrBadInput, p.shard, pl.size)
	}
	return pl, nil
}

func emitPlain(p shardParams, state, offers sortedSource, pl *plan, sink shardSink) (ShardStats, error) {
	st := ShardStats{Shard: p.shard, Offers: pl.offers, MaxDocID: pl.size - 1, Holes: pl.holes}
	nextFree := pl.used.nextClear(0)
	top := uint64(pl.maxKept + 1) // ids from here up were never held by a kept key
	si, err := state.open()
	if err != nil {
		return st, err
	}
	defer si.close()
	oi, err := offers.open()
	if err != nil {
		return st, err
	}
	defer oi.close()
	var s, o record
	rows := rowCounter{t: p.progress}
	defer rows.flush()
	for _, step := range pl.trace {
		rows.add(int64(step&1 + step>>1&1 + step>>2&1)) // the rows the step reads
		var sok, ook bool
		if step&stepState != 0 {
			s, sok = si.next()
		}
		if step&stepOffer != 0 {
			o, ook = oi.next()
		}
		if sok != (step&stepState != 0) || ook != (step&stepOffer != 0) {
			return st, replayError(p.shard, si, oi)
		}
		switch step {
		case stepDupOffer:
			if _, ok := oi.next(); !ok {
				return st, replayError(p.shard, si, oi)
			}
		case stepOffer: // a new key: lowest freed id first, then max+1
			r := o
			r.shard = p.shard
			if nextFree < top {
				st.Reused++
			}
			r.doc = uint32(nextFree)
			nextFree = pl.used.nextClear(nextFree + 1) // above top every id is clear
			r.lastSeen = p.run
			st.New++
			st.Docs++
			if err := sink.state(&r); err != nil {
				return st, err
			}
			if err := sink.newDoc(&r); err != nil {
				return st, err
			}
		case stepState:
			if expires(p, s.lastSeen) {
				st.Expired++
				if err := sink.expired(&s); err != nil {
					return st, err
				}
				continue
			}
			s.shard = p.shard
			st.Docs++
			if err := sink.state(&s); err != nil {
				return st, err
			}
		case stepBoth:
			s.shard, s.lastSeen = p.shard, p.run
			st.Docs++
			if err := sink.state(&s); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// replayError reports sources that changed between the plan and the emit.
func replayError(shard uint32, si, oi recordIter) error {
	if err := errors.Join(si.err(), oi.err()); err != nil {
		return fmt.Errorf("shard %d: %w", shard, err)
	}
	return fmt.Errorf("numerator: internal error: shard %d changed between plan and emit", shard)
}

// emitRebuild numbers the shard's input offers 0..n-1 in (hash, key) order;
// every state key absent from the input is dropped (N4).
func emitRebuild(p shardParams, state, offers sortedSource, sink shardSink) (ShardStats, error) {
	st := ShardStats{Shard: p.shard, Rebuilt: true}
	var next uint32
	rows := rowCounter{t: p.progress}
	defer rows.flush()
	err := joinSources(p.shard, state, offers, func() { rows.add(1) }, func(s, o *record) error {
		rows.add(weight(s, o))
		if o == nil {
			st.Expired++
			return sink.expired(s)
		}
		r := *o
		r.shard, r.doc, r.lastSeen = p.shard, next, p.run
		next++
		st.Offers++
		st.Docs++
		st.New++
		if err := sink.state(&r); err != nil {
			return err
		}
		return sink.newDoc(&r)
	})
	st.MaxDocID = st.Docs - 1
	return st, err
}

// weight is how many input rows a join step read.
func weight(s, o *record) int64 {
	var n int64
	if s != nil {
		n++
	}
	if o != nil {
		n++
	}
	return n
}

// joinSources walks a shard's state and offers together in (hash, key) order
// and calls fn with (state, offer), (state, nil) or (nil, offer) for each
// distinct key. Duplicate offers are merged; a duplicate or out-of-order
// state row, or out-of-order offers, are errors.
// onDup, if set, is called for each dropped duplicate offer.
func joinSources(shard uint32, state, offers sortedSource, onDup func(), fn func(s, o *record) error) error {
	si, err := state.open()
	if err != nil {
		return err
	}
	defer si.close()
	oi, err := offers.open()
	if err != nil {
		return err
	}
	defer oi.close()
	ss := orderedIter{it: si, what: "state", shard: shard}
	os := orderedIter{it: oi, what: "offers", shard: shard, dedupe: true, onDup: onDup}
	s, sok, err := ss.next()
	if err != nil {
		return err
	}
	o, ook, err := os.next()
	if err != nil {
		return err
	}
	for sok || ook {
		c := 0
		switch {
		case !sok:
			c = 1
		case !ook:
			c = -1
		default:
			c = compareRecords(&s, &o)
		}
		switch {
		case c < 0:
			err = fn(&s, nil)
		case c > 0:
			err = fn(nil, &o)
		default:
			err = fn(&s, &o)
		}
		if err != nil {
			return err
		}
		if c <= 0 {
			if s, sok, err = ss.next(); err != nil {
				return err
			}
		}
		if c >= 0 {
			if o, ook, err = os.next(); err != nil {
				return err
			}
		}
	}
	return nil
}

// orderedIter checks that an iterator's records strictly increase, merging
// equal neighbours when dedupe is set.
type orderedIter struct {
	it     recordIter
	what   string
	shard  uint32
	dedupe bool
	onDup  func()
	prev   record
	have   bool
}

func (o *orderedIter) next() (record, bool, error) {
	for {
		r, ok := o.it.next()
		if !ok {
			if err := o.it.err(); err != nil {
				return record{}, false, fmt.Errorf("shard %d %s: %w", o.shard, o.what, err)
			}
			return record{}, false, nil
		}
		if o.have {
			switch c := compareRecords(&o.prev, &r); {
			case c == 0 && o.dedupe:
				if o.onDup != nil {
					o.onDup()
				}
				continue
			case c == 0:
				return record{}, false, fmt.Errorf("%w: shard %d holds key %+v twice; the state is corrupt, rebuild it with --rebuild-state-force",
					ErrBadState, o.shard, r.key)
			case c > 0:
				return record{}, false, fmt.Errorf("%w: shard %d %s out of order at key %+v; a state part must hold its rows as this numerator wrote them, or be rebuilt with --rebuild-state-force",
					ErrBadState, o.shard, o.what, r.key)
			}
		}
		o.prev, o.have = r, true
		return r, true, nil
	}
}
