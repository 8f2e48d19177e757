package clusterstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/tuple"
)

// leaseName is shard sh's lease.
func (st *Store) leaseName(sh int) string { return st.prefix + "/shard/" + strconv.Itoa(sh) }

func (st *Store) runnerLease(owner string) string { return st.prefix + "/runner/" + owner }

func checkOwner(owner string, ttl time.Duration, what string) error {
	if owner == "" || len(owner) > scheduler.MaxIDLen {
		return fmt.Errorf("%w: owner %q must have 1..%d bytes", scheduler.ErrInvalid, owner, scheduler.MaxIDLen)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %s TTL %v is below 1ms", scheduler.ErrInvalid, what, ttl)
	}
	return nil
}

// parallel runs f(0..n-1), at most 16 at a time, and joins their errors.
func parallel(n int, f func(j int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for j := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[j] = f(j)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Claim implements scheduler.Store: each shard's lease is acquired, and
// its ticket written into the shard's fence at once, so that the previous
// holder writes nothing from then on. A shard the owner holds already
// keeps its epoch (the cluster's lease keeps its ticket for its holder).
func (st *Store) Claim(ctx context.Context, owner string, shards []int, ttl time.Duration) ([]scheduler.Lease, error) {
	if err := checkOwner(owner, ttl, "lease"); err != nil {
		return nil, err
	}
	for _, sh := range shards {
		if sh < 0 || sh >= st.shards {
			return nil, fmt.Errorf("%w: shard %d: the store has shards 0..%d", scheduler.ErrInvalid, sh, st.shards-1)
		}
	}
	got := make([]*scheduler.Lease, len(shards))
	err := parallel(len(shards), func(j int) error {
		sh := shards[j]
		cl, granted, err := st.c.Leases().Acquire(ctx, st.leaseName(sh), owner, ttl)
		if err != nil {
			return fmt.Errorf("clusterstore: claim shard %d: %w", sh, err)
		}
		if !granted {
			return nil
		}
		l := scheduler.Lease{Shard: sh, Owner: owner, Epoch: int64(cl.Ticket)} //nolint:gosec // tickets count grants
		// The fence row is made by the first claim (the upsert), then
		// raised to the ticket; a newer holder's higher ticket refuses it.
		b := st.c.Batch().Upsert(st.sp.fences, tuple.Tuple{shardKey(sh), tuple.Uint(cl.Ticket)},
			[]tuple.Op{{Code: tuple.OpMax, Field: tuple.FieldRef{Name: "ticket"}, Arg: tuple.Uint(cl.Ticket)}})
		if _, err := b.Fence(st.fence(sh, l.Epoch)).Do(ctx); err != nil {
			if errors.Is(err, client.ErrConditionFailed) {
				return nil // taken over meanwhile
			}
			return fmt.Errorf("clusterstore: claim shard %d: write its fence: %w", sh, err)
		}
		got[j] = &l
		return nil
	})
	var out []scheduler.Lease
	for _, l := range got {
		if l != nil {
			out = append(out, *l)
		}
	}
	return out, err
}

// Renew implements scheduler.Store.
func (st *Store) Renew(ctx context.Context, l scheduler.Lease, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: lease TTL %v is below 1ms", scheduler.ErrInvalid, ttl)
	}
	cur, ok, err := st.c.Leases().Renew(ctx, st.leaseName(l.Shard), l.Owner, uint64(l.Epoch), ttl) //nolint:gosec // epochs are tickets
	if err != nil {
		return fmt.Errorf("clusterstore: renew %v: %w", l, err)
	}
	if !ok {
		return lost(l, cur)
	}
	return nil
}

func lost(l scheduler.Lease, cur client.Lease) error {
	switch {
	case cur.Holder == "":
		return fmt.Errorf("%w: %v: the shard is free now (at ticket %d)", scheduler.ErrFenced, l, cur.Ticket)
	case cur.Holder != l.Owner || cur.Ticket != uint64(l.Epoch): //nolint:gosec // epochs are tickets
		return fmt.Errorf("%w: %v: the shard is held by %q at epoch %d now", scheduler.ErrFenced, l, cur.Holder, cur.Ticket)
	}
	return fmt.Errorf("%w: %v: the lease expired at %v", scheduler.ErrFenced, l, cur.Expires)
}

// Release implements scheduler.Store: the fence is raised past l's epoch
// first (so l writes nothing after), then the lease is freed.
func (st *Store) Release(ctx context.Context, l scheduler.Lease) error {
	b := st.fenced(l).Update(st.sp.fences, []tuple.Value{shardKey(l.Shard)},
		[]tuple.Op{{Code: tuple.OpMax, Field: tuple.FieldRef{Name: "ticket"}, Arg: tuple.Uint(uint64(l.Epoch) + 1)}}) //nolint:gosec // epochs are tickets
	if err := st.do(ctx, "release "+l.String(), b, &l); err != nil {
		if errors.Is(err, errRetry) {
			err = fmt.Errorf("%w: %v: the shard has no fence row", scheduler.ErrFenced, l)
		}
		return err
	}
	ok, err := st.c.Leases().Release(ctx, st.leaseName(l.Shard), l.Owner, uint64(l.Epoch)) //nolint:gosec // epochs are tickets
	if err != nil {
		return fmt.Errorf("clusterstore: release %v: %w", l, err)
	}
	if !ok {
		cur, _, _ := st.c.Leases().Get(ctx, st.leaseName(l.Shard))
		return lost(l, cur)
	}
	return nil
}

// Leases implements scheduler.Store.
func (st *Store) Leases(ctx context.Context) ([]scheduler.LeaseInfo, error) {
	out := make([]scheduler.LeaseInfo, st.shards)
	err := parallel(st.shards, func(sh int) error {
		cl, held, err := st.c.Leases().Get(ctx, st.leaseName(sh))
		out[sh] = scheduler.LeaseInfo{Shard: sh, Expired: true}
		switch {
		case errors.Is(err, client.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("clusterstore: read the lease of shard %d: %w", sh, err)
		}
		out[sh] = scheduler.LeaseInfo{Shard: sh, Owner: cl.Holder, Epoch: int64(cl.Ticket), Expired: !held} //nolint:gosec // tickets count grants
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Announce implements scheduler.Store: the owner's lease "<p>/runner/<owner>"
// for ttl, and its row in <p>_runners (written each time, so that a
// Runners that read the lease just expired and deletes the row loses the
// race with the announcement).
func (st *Store) Announce(ctx context.Context, owner string, ttl time.Duration) error {
	if err := checkOwner(owner, ttl, "announcement"); err != nil {
		return err
	}
	if _, _, err := st.c.Leases().Acquire(ctx, st.runnerLease(owner), owner, ttl); err != nil {
		return fmt.Errorf("clusterstore: announce %s: %w", owner, err)
	}
	if _, err := st.c.Space(st.sp.runners).Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.String(owner)}); err != nil {
		return fmt.Errorf("clusterstore: announce %s: %w", owner, err)
	}
	return nil
}

// Runners implements scheduler.Store. Rows of expired announcements are
// deleted on the way, unless announced again since they were read.
func (st *Store) Runners(ctx context.Context) ([]string, error) {
	bk, err := st.c.Space(st.sp.config).Bucket(ctx, tuple.Uint(0))
	if err != nil {
		return nil, fmt.Errorf("clusterstore: list runners: %w", err)
	}
	var rows []client.Versioned
	o := client.RangeOptions{Bucket: bk, Prefix: []tuple.Value{tuple.Uint(0)}, Limit: 10000}
	for {
		page, more, err := st.c.Space(st.sp.runners).Range(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("clusterstore: list runners: %w", err)
		}
		rows = append(rows, page...)
		if !more || len(page) == 0 {
			break
		}
		o.After = []tuple.Value{tuple.Uint(0), page[len(page)-1].Tuple[1]}
	}
	live := make([]bool, len(rows))
	err = parallel(len(rows), func(j int) error {
		owner := strAt(rows[j].Tuple, 1)
		cl, held, err := st.c.Leases().Get(ctx, st.runnerLease(owner))
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("clusterstore: list runners: %w", err)
		}
		if held && cl.Holder == owner {
			live[j] = true
			return nil
		}
		_, err = st.c.Space(st.sp.runners).Delete(ctx, []tuple.Value{tuple.Uint(0), tuple.String(owner)}, client.IfVersion(rows[j].Version))
		if err != nil && !errors.Is(err, client.ErrConditionFailed) {
			return fmt.Errorf("clusterstore: forget runner %s: %w", owner, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for j, r := range rows {
		if live[j] {
			out = append(out, strAt(r.Tuple, 1))
		}
	}
	return out, nil
}
