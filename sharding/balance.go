package sharding

import (
	"cmp"
	"math"
	"slices"
)

// Balance is the bucket balance of a set of replicasets by weight (the
// arithmetic of vshard's rebalancer, `calculate_etalon_balance`): the
// cluster's status shows it, the rebalancer acts on it.

// Group is one replicaset as the balance sees it.
type Group struct {
	ID string
	// Weight is its share relative to the others; 0 takes no buckets
	// (drains).
	Weight uint32
	// Buckets it holds now, and how many of them are pinned (never moved).
	Buckets int
	Pinned  int
}

// Targets returns how many of total buckets each group should hold: the
// ceiling of its weighted share, the rounding surplus trimmed from the
// groups with the largest rounding (ties by id), and a group with more
// pinned buckets than its share frozen at its pinned count, the rest
// shared among the others. With every weight 0 nothing can be placed and
// the result is every group's current count.
func Targets(groups []Group, total int) map[string]int {
	out := map[string]int{}
	frozen := map[string]bool{}
	for {
		remaining := total
		var sum uint64
		for _, g := range groups {
			if frozen[g.ID] {
				remaining -= g.Pinned
				continue
			}
			sum += uint64(g.Weight)
		}
		if sum == 0 {
			for _, g := range groups {
				if !frozen[g.ID] {
					out[g.ID] = g.Buckets
				}
			}
			return out
		}
		remaining = max(remaining, 0)
		type share struct {
			id   string
			frac float64
		}
		var shares []share
		given := 0
		for _, g := range groups {
			if frozen[g.ID] {
				out[g.ID] = g.Pinned
				continue
			}
			exact := float64(remaining) * float64(g.Weight) / float64(sum)
			n := int(math.Ceil(exact - 1e-9))
			out[g.ID] = n
			given += n
			if float64(n) > exact+1e-9 {
				shares = append(shares, share{g.ID, exact - math.Floor(exact)})
			}
		}
		// Trim the surplus of the ceilings, from the smallest fractions
		// (the groups that gained the most by rounding up).
		slices.SortStableFunc(shares, func(a, b share) int {
			if c := cmp.Compare(a.frac, b.frac); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		for i := 0; given > remaining && i < len(shares); i++ {
			out[shares[i].id]--
			given--
		}
		again := false
		for _, g := range groups {
			if !frozen[g.ID] && g.Pinned > out[g.ID] {
				frozen[g.ID] = true
				again = true
			}
		}
		if !again {
			return out
		}
	}
}

// Disbalance is how far a group is from its target, in percent of the
// target: |target - actual| / target * 100, +Inf when the target is 0 and
// the group still holds buckets.
func Disbalance(actual, target int) float64 {
	switch {
	case target == 0 && actual == 0:
		return 0
	case target == 0:
		return math.Inf(1)
	}
	return math.Abs(float64(target-actual)) / float64(target) * 100
}

// Route is a number of buckets to move from one group to another.
type Route struct {
	From, To string
	Count    int
}

// Routes plans the moves from the groups above their targets to those
// below, greedily, the largest surpluses and deficits first (ties by id).
func Routes(groups []Group, targets map[string]int) []Route {
	type gap struct {
		id string
		n  int
	}
	var over, under []gap
	for _, g := range groups {
		d := g.Buckets - targets[g.ID]
		switch {
		case d > 0:
			over = append(over, gap{g.ID, min(d, g.Buckets-g.Pinned)})
		case d < 0:
			under = append(under, gap{g.ID, -d})
		}
	}
	byGap := func(a, b gap) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	}
	slices.SortFunc(over, byGap)
	slices.SortFunc(under, byGap)
	var out []Route
	for i, j := 0, 0; i < len(over) && j < len(under); {
		n := min(over[i].n, under[j].n)
		if n > 0 {
			out = append(out, Route{From: over[i].id, To: under[j].id, Count: n})
		}
		over[i].n -= n
		under[j].n -= n
		if over[i].n == 0 {
			i++
		}
		if under[j].n == 0 {
			j++
		}
	}
	return out
}
