package clusterstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/tuple"
)

func offerKey(sh int, id string) []tuple.Value { return []tuple.Value{shardKey(sh), tuple.String(id)} }

func stateKey(sh int, id, stage string) []tuple.Value {
	return []tuple.Value{shardKey(sh), tuple.String(id), tuple.String(stage)}
}

// Load implements scheduler.Store.
func (st *Store) Load(ctx context.Context, id, stage string) (scheduler.Offer, scheduler.State, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return scheduler.Offer{}, scheduler.State{}, err
	}
	sh := scheduler.ShardOf(id, st.shards)
	var off, sr client.Result
	reads := []read{{st.sp.offers, offerKey(sh, id), &off}}
	if stage != "" {
		reads = append(reads, read{st.sp.states, stateKey(sh, id, stage), &sr})
	}
	if err := st.getAll(ctx, reads...); err != nil {
		return scheduler.Offer{}, scheduler.State{}, err
	}
	return offerOf(id, off), stateOf(sr), nil
}

func offerOf(id string, r client.Result) scheduler.Offer {
	o := scheduler.Offer{ID: id}
	if r.Found {
		o.Version, o.Body, o.Chain = int64(uintAt(r.Tuple, 2)), []byte(strAt(r.Tuple, 3)), int(uintAt(r.Tuple, 4)) //nolint:gosec // written from int64 and int
	}
	return o
}

func stateOf(r client.Result) scheduler.State {
	if !r.Found {
		return scheduler.State{}
	}
	return scheduler.State{Version: int64(uintAt(r.Tuple, 3)), Value: &anypb.Any{TypeUrl: strAt(r.Tuple, 4), Value: bytesAt(r.Tuple, 5)}} //nolint:gosec // written from int64
}

func u64(n int64) tuple.Value { return tuple.Uint(uint64(n)) } //nolint:gosec // versions, chains and attempts are never negative

func offerTuple(sh int, id string, version int64, body []byte, chain int) tuple.Tuple {
	return tuple.Tuple{shardKey(sh), tuple.String(id), u64(version), tuple.String(string(body)), u64(int64(chain))}
}

func stateTuple(sh int, id, stage string, version int64, v *anypb.Any) tuple.Tuple {
	val := v.GetValue()
	if val == nil {
		val = []byte{}
	}
	return tuple.Tuple{shardKey(sh), tuple.String(id), tuple.String(stage), u64(version), tuple.String(v.GetTypeUrl()), tuple.Bytes(val)}
}

// markTuple is the changed-offer mark after a change at seq by source of
// fields (nil: every field), merged into old (a mark not yet acked).
func markTuple(sh int, id string, old client.Result, seq int64, source string, fields []string, chain int) (tuple.Tuple, error) {
	all := fields == nil
	if old.Found {
		if strAt(old.Tuple, 3) != source {
			source = ""
		}
		all = all || boolAt(old.Tuple, 4)
		var had []string
		if err := json.Unmarshal([]byte(strAt(old.Tuple, 5)), &had); err != nil {
			return nil, fmt.Errorf("clusterstore: the mark of offer %q has unreadable fields: %w", id, err)
		}
		fields = scheduler.MergeFields(fields, had)
		chain = max(chain, int(uintAt(old.Tuple, 6))) //nolint:gosec // written from int
	}
	if all || fields == nil {
		fields = []string{}
	}
	fj, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("clusterstore: encode the fields of offer %q: %w", id, err)
	}
	return tuple.Tuple{shardKey(sh), tuple.String(id), u64(seq), tuple.String(source), tuple.Bool(all), tuple.String(string(fj)), u64(int64(chain))}, nil
}

// changelog adds to b the replacement of the offer's changelog row by r.
func (st *Store) changelog(b *client.Batch, r scheduler.Record) error {
	rec, err := st.changelogRow(r)
	if err == nil {
		b.Replace(st.sp.changelog, rec)
	}
	return err
}

// changelogRow is the offer's changelog row holding r.
func (st *Store) changelogRow(r scheduler.Record) (tuple.Tuple, error) {
	r.Time = time.Now().UTC()
	v, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("clusterstore: encode the changelog record of %q: %w", r.OfferID, err)
	}
	return tuple.Tuple{shardKey(r.Shard), tuple.String(r.OfferID), tuple.String(string(v))}, nil
}

// Put implements scheduler.Store. A create (ifVersion 0) is one batch
// with no read, checked to find neither the offer nor a mark.
func (st *Store) Put(ctx context.Context, id string, body []byte, ifVersion int64) (int64, error) {
	p := scheduler.PutOffer{ID: id, Body: body, IfVersion: ifVersion}
	if err := p.Check(); err != nil {
		return 0, err
	}
	id, body = p.ID, p.Body
	if ifVersion == 0 {
		b := st.c.Batch()
		if err := st.addCreate(b, p); err != nil {
			return 0, err
		}
		if err := st.do(ctx, "create offer "+id, b, nil); !errors.Is(err, errRetry) {
			if err != nil {
				return 0, err
			}
			return 1, nil
		}
		// It exists (or has a mark): the read path below says how.
	}
	sh := scheduler.ShardOf(id, st.shards)
	var version int64
	err := retry("put offer "+id, func() error {
		var off, mk client.Result
		if err := st.getAll(ctx, read{st.sp.offers, offerKey(sh, id), &off}, read{st.sp.marks, offerKey(sh, id), &mk}); err != nil {
			return err
		}
		old := offerOf(id, off)
		version = old.Version
		if ifVersion != scheduler.AnyVersion && version != ifVersion {
			if version == 0 {
				return fmt.Errorf("%w: offer %q does not exist (asked to replace version %d)", scheduler.ErrConflict, id, ifVersion)
			}
			return fmt.Errorf("%w: offer %q is at version %d, not %d", scheduler.ErrConflict, id, version, ifVersion)
		}
		var fields []string
		if version != 0 {
			var err error
			if fields, err = scheduler.ChangedFields(old.Body, body); err != nil {
				return err
			}
			if len(fields) == 0 {
				return nil // the same body: no new version, no trigger
			}
		}
		mark, err := markTuple(sh, id, mk, version+1, "", fields, 0)
		if err != nil {
			return err
		}
		b := st.c.Batch().
			Check(st.sp.offers, offerKey(sh, id), client.VersionIs(off.Version)).
			Check(st.sp.marks, offerKey(sh, id), client.VersionIs(mk.Version)).
			Replace(st.sp.offers, offerTuple(sh, id, version+1, body, 0)).
			Replace(st.sp.marks, mark)
		if err := st.changelog(b, scheduler.Record{OfferID: id, Shard: sh, OfferVersion: version + 1, Body: body}); err != nil {
			return err
		}
		if err := st.do(ctx, "put offer "+id, b, nil); err != nil {
			return err
		}
		version++
		return nil
	})
	return version, err
}

// addCreate adds to b the creation of p's offer at version 1: its row,
// its mark (every field changed) and its changelog record, checked to
// find no offer and no mark.
func (st *Store) addCreate(b *client.Batch, p scheduler.PutOffer) error {
	sh := scheduler.ShardOf(p.ID, st.shards)
	mark, err := markTuple(sh, p.ID, client.Result{}, 1, "", nil, 0)
	if err != nil {
		return err
	}
	b.Check(st.sp.offers, offerKey(sh, p.ID), client.VersionIs(0)).
		Check(st.sp.marks, offerKey(sh, p.ID), client.VersionIs(0)).
		Replace(st.sp.offers, offerTuple(sh, p.ID, 1, p.Body, 0)).
		Replace(st.sp.marks, mark)
	return st.changelog(b, scheduler.Record{OfferID: p.ID, Shard: sh, OfferVersion: 1, Body: p.Body})
}

// createsPerBatch bounds the creates of one PutMany batch (5 operations
// each).
const createsPerBatch = 150

// PutMany writes offers from outside, each as Put writes it (a bulk load:
// the scheduler's benchmark puts its offers so). The creates (IfVersion 0)
// of one shard go in one batch, with no read; when one of them exists,
// that batch's offers are put one by one. versions[i] and errs[i] are
// offers[i]'s outcome: a refusal (ErrConflict, ErrInvalid; ErrInvalid too
// for an offer that is in offers twice) writes nothing of it and does not
// stop the others; err is the call's (a failure of the cluster), after
// which any of them may or may not be written.
func (st *Store) PutMany(ctx context.Context, offers []scheduler.PutOffer) (versions []int64, errs []error, err error) {
	offers = slices.Clone(offers) // Check fills in empty bodies
	todo, errs := scheduler.OncePerOffer("PutMany", len(offers),
		func(i int) error { return offers[i].Check() }, func(i int) string { return offers[i].ID })
	versions = make([]int64, len(offers))
	byShard := map[int][]int{}
	var others []int
	for _, i := range todo {
		if offers[i].IfVersion != 0 {
			others = append(others, i)
			continue
		}
		sh := scheduler.ShardOf(offers[i].ID, st.shards)
		byShard[sh] = append(byShard[sh], i)
	}
	var chunks [][]int
	for _, is := range byShard {
		for len(is) > 0 {
			n := min(len(is), createsPerBatch)
			chunks = append(chunks, is[:n])
			is = is[n:]
		}
	}
	one := func(i int) error {
		versions[i], errs[i] = st.Put(ctx, offers[i].ID, offers[i].Body, offers[i].IfVersion)
		if errs[i] != nil && !errors.Is(errs[i], scheduler.ErrConflict) && !errors.Is(errs[i], scheduler.ErrInvalid) {
			return errs[i]
		}
		return nil
	}
	err = parallel(len(chunks), func(j int) error {
		b := st.c.Batch()
		for _, i := range chunks[j] {
			if err := st.addCreate(b, offers[i]); err != nil {
				return err
			}
		}
		switch err := st.do(ctx, "create offers", b, nil); {
		case err == nil:
			for _, i := range chunks[j] {
				versions[i] = 1
			}
			return nil
		case !errors.Is(err, errRetry):
			return err
		}
		for _, i := range chunks[j] {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return versions, errs, err
	}
	return versions, errs, parallel(len(others), func(j int) error { return one(others[j]) })
}

// UpdateState implements scheduler.Store.
func (st *Store) UpdateState(ctx context.Context, id, stage string, state *anypb.Any, version int64) (bool, error) {
	if err := scheduler.CheckStateUpdate(id, stage, state); err != nil {
		return false, err
	}
	sh := scheduler.ShardOf(id, st.shards)
	ok := false
	err := retry("update a state of offer "+id, func() error {
		var off, sr client.Result
		if err := st.getAll(ctx, read{st.sp.offers, offerKey(sh, id), &off}, read{st.sp.states, stateKey(sh, id, stage), &sr}); err != nil {
			return err
		}
		if !off.Found {
			return fmt.Errorf("%w: offer %q", scheduler.ErrNotFound, id)
		}
		o, have := offerOf(id, off), stateOf(sr).Version
		if have != version {
			return nil
		}
		b := st.c.Batch().
			Check(st.sp.offers, offerKey(sh, id), client.VersionIs(off.Version)).
			Check(st.sp.states, stateKey(sh, id, stage), client.VersionIs(sr.Version)).
			Replace(st.sp.states, stateTuple(sh, id, stage, have+1, state))
		if err := st.changelog(b, scheduler.Record{OfferID: id, Shard: sh, OfferVersion: o.Version, Body: o.Body, Stage: stage,
			StateType: state.GetTypeUrl(), State: state.GetValue(), StateVersion: have + 1}); err != nil {
			return err
		}
		if err := st.do(ctx, "update a state of offer "+id, b, nil); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok, err
}

// Save implements scheduler.Store: one fenced batch with a check of every
// row it read.
func (st *Store) Save(ctx context.Context, l scheduler.Lease, sv scheduler.Save) (scheduler.Saved, error) {
	if err := st.checkSave(l, sv); err != nil {
		return scheduler.Saved{}, err
	}
	var out scheduler.Saved
	full := false // the first attempt reads only what it must
	err := retry("save offer "+sv.OfferID, func() error {
		var err error
		out, err = st.save(ctx, l, sv, full)
		full = true
		return err
	})
	if err != nil {
		return scheduler.Saved{}, err
	}
	return out, nil
}

func (st *Store) save(ctx context.Context, l scheduler.Lease, sv scheduler.Save, full bool) (scheduler.Saved, error) {
	rows, err := st.readSave(ctx, l, sv, full)
	if err != nil {
		return scheduler.Saved{}, err
	}
	b := st.fenced(l)
	out, err := st.buildSave(l, sv, rows, b)
	if errors.Is(err, errNeedMark) {
		if err := st.readMark(ctx, l, sv, &rows); err != nil {
			return out, err
		}
		b = st.fenced(l)
		out, err = st.buildSave(l, sv, rows, b)
	}
	if err != nil {
		return out, err
	}
	return out, st.do(ctx, "save offer "+sv.OfferID, b, &l)
}

// saveRows are the rows a save reads: the offer and the stage's queue
// entry always; the stage's state when the save keeps it (its record
// holds it) or after a failed check (full); the offer's mark when the
// save changes the offer's body.
type saveRows struct {
	off, sr, inv, mk    client.Result
	stateRead, markRead bool
}

// errNeedMark: the save changes the offer's body, and its mark was not
// read.
var errNeedMark = errors.New("clusterstore: the save changes the offer: read its mark")

func (st *Store) readSave(ctx context.Context, l scheduler.Lease, sv scheduler.Save, full bool) (saveRows, error) {
	sh, id := l.Shard, sv.OfferID
	r := saveRows{stateRead: full || sv.State == nil, markRead: full}
	reads := []read{{st.sp.offers, offerKey(sh, id), &r.off}, {st.sp.inverted, stateKey(sh, id, sv.Stage), &r.inv}}
	if r.stateRead {
		reads = append(reads, read{st.sp.states, stateKey(sh, id, sv.Stage), &r.sr})
	}
	if r.markRead {
		reads = append(reads, read{st.sp.marks, offerKey(sh, id), &r.mk})
	}
	err := st.getAll(ctx, reads...)
	return r, err
}

func (st *Store) readMark(ctx context.Context, l scheduler.Lease, sv scheduler.Save, r *saveRows) error {
	var err error
	r.mk, err = st.get(ctx, st.sp.marks, offerKey(l.Shard, sv.OfferID)...)
	r.markRead = err == nil
	return err
}

// buildSave adds to b (a batch carrying l's fence) the writes of sv over
// the rows read, each checked to be still as read; a refusal of sv adds
// nothing.
func (st *Store) buildSave(l scheduler.Lease, sv scheduler.Save, rows saveRows, b *client.Batch) (scheduler.Saved, error) {
	sh, id := l.Shard, sv.OfferID
	off, sr, inv, mk := rows.off, rows.sr, rows.inv, rows.mk
	if !off.Found {
		return scheduler.Saved{}, fmt.Errorf("%w: offer %q (deleted while stage %q ran)", scheduler.ErrNotFound, id, sv.Stage)
	}
	o := offerOf(id, off)
	if sv.Patch == nil && o.Version != sv.ReadVersion {
		return scheduler.Saved{}, fmt.Errorf("%w: offer %q is at version %d; stage %q read version %d", scheduler.ErrConflict, id, o.Version, sv.Stage, sv.ReadVersion)
	}
	out := scheduler.Saved{OfferVersion: o.Version}
	newBody, fields := sv.Body, sv.Fields
	if sv.Patch != nil {
		var err error
		if newBody, err = scheduler.ApplyPatch(o.Body, sv.Patch); err != nil {
			return out, err
		}
		if fields, err = scheduler.ChangedFields(o.Body, newBody); err != nil {
			return out, err
		}
		if len(fields) == 0 {
			newBody = nil
		}
	}
	var ops []func(*client.Batch)
	add := func(f func(*client.Batch)) { ops = append(ops, f) }
	add(func(b *client.Batch) { b.Check(st.sp.offers, offerKey(sh, id), client.VersionIs(off.Version)) })
	body := o.Body
	if newBody != nil && !bytes.Equal(newBody, o.Body) {
		if !rows.markRead {
			return out, errNeedMark
		}
		source := sv.Stage
		if o.Version != sv.ReadVersion {
			source = "" // a patch on a newer offer: the stage too is asked about it
		}
		mark, err := markTuple(sh, id, mk, o.Version+1, source, fields, sv.Chain)
		if err != nil {
			return out, err
		}
		add(func(b *client.Batch) {
			b.Check(st.sp.marks, offerKey(sh, id), client.VersionIs(mk.Version)).
				Replace(st.sp.offers, offerTuple(sh, id, o.Version+1, newBody, sv.Chain)).
				Replace(st.sp.marks, mark)
		})
		out.OfferVersion, out.Changed, body = o.Version+1, true, newBody
	}
	state := stateOf(sr)
	switch {
	case sv.State != nil && !rows.stateRead:
		// Not read: the batch checks the version the stage read.
		out.StateVersion = sv.StateVersion + 1
		sv2, cond := out.StateVersion, client.VersionIs(0)
		if sv.StateVersion > 0 {
			cond = client.Where("version", client.EQ, u64(sv.StateVersion))
		}
		add(func(b *client.Batch) {
			b.Check(st.sp.states, stateKey(sh, id, sv.Stage), cond).
				Replace(st.sp.states, stateTuple(sh, id, sv.Stage, sv2, sv.State))
		})
		state = scheduler.State{Value: sv.State, Version: out.StateVersion}
	case sv.State != nil:
		if state.Version != sv.StateVersion {
			return out, fmt.Errorf("%w: state of stage %q of offer %q is at version %d, not %d", scheduler.ErrConflict, sv.Stage, id, state.Version, sv.StateVersion)
		}
		out.StateVersion = state.Version + 1
		sv2 := out.StateVersion
		add(func(b *client.Batch) {
			b.Check(st.sp.states, stateKey(sh, id, sv.Stage), client.VersionIs(sr.Version)).
				Replace(st.sp.states, stateTuple(sh, id, sv.Stage, sv2, sv.State))
		})
		state = scheduler.State{Value: sv.State, Version: out.StateVersion}
	default:
		out.StateVersion = sv.StateVersion
	}
	// A patch that changed nothing on a newer offer than the stage read:
	// the stage has not seen that offer and no mark will ask it, so its
	// entry stays due and it runs again.
	rerun := sv.Patch != nil && o.Version != sv.ReadVersion && !out.Changed
	if !rerun {
		add(func(b *client.Batch) {
			b.Check(st.sp.inverted, stateKey(sh, id, sv.Stage), client.VersionIs(inv.Version))
			if inv.Found {
				st.deleteEntry(b, entryOf(inv.Tuple))
			}
			if !sv.Timer.IsZero() {
				st.insertEntry(b, scheduler.Entry{Shard: sh, Stage: sv.Stage, OfferID: id, Due: sv.Timer, Timer: true})
			}
		})
	}
	if sv.AfterSave {
		seq := st.nextSeq(l)
		add(func(b *client.Batch) {
			b.Replace(st.sp.after, tuple.Tuple{shardKey(sh), tuple.String(sv.Stage), tuple.String(id), tuple.Uint(seq)})
		})
	}
	if out.Changed || sv.State != nil {
		r := scheduler.Record{OfferID: id, Shard: sh, OfferVersion: out.OfferVersion, Body: body, Stage: sv.Stage}
		if state.Value != nil {
			r.StateType, r.State, r.StateVersion = state.Value.GetTypeUrl(), state.Value.GetValue(), state.Version
		}
		rec, err := st.changelogRow(r)
		if err != nil {
			return out, err
		}
		add(func(b *client.Batch) { b.Replace(st.sp.changelog, rec) })
	}
	for _, f := range ops {
		f(b)
	}
	return out, nil
}

// nextSeq numbers an AfterSave record of l's holder: higher than any of
// an older holder (its epoch above) and than its own before.
func (st *Store) nextSeq(l scheduler.Lease) uint64 {
	return uint64(l.Epoch)<<40 | st.seq.Add(1)&(1<<40-1) //nolint:gosec // epochs are tickets
}
