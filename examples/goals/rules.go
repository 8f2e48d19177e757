package goals

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/shardkit/shardkit/cache/lease"
)

// Rule kinds: how a goal's pattern is matched against a hit's URL.
const (
	KindContains = "contains"
	KindPrefix   = "prefix"
	KindExact    = "exact"
	KindRegexp   = "regexp"
)

// ErrBadRule: a goal row cannot be used.
var ErrBadRule = errors.New("goals: bad goal rule")

// Goal is one rule of a counter.
type Goal struct {
	CounterID uint64
	GoalID    uint64
	Kind      string
	Pattern   string
}

type compiled struct {
	id      uint64
	kind    string
	pattern string
	re      *regexp.Regexp
}

// Rules are the goals of the counters of one shard.
type Rules struct {
	byCounter map[uint64][]compiled
	count     int
}

// NewRules compiles goals; a bad kind or regexp is an error naming the goal.
func NewRules(goals []Goal) (*Rules, error) {
	r := &Rules{byCounter: map[uint64][]compiled{}}
	for _, g := range goals {
		c := compiled{id: g.GoalID, kind: g.Kind, pattern: g.Pattern}
		switch g.Kind {
		case KindContains, KindPrefix, KindExact:
		case KindRegexp:
			re, err := regexp.Compile(g.Pattern)
			if err != nil {
				return nil, fmt.Errorf("%w: goal %d of counter %d: %w", ErrBadRule, g.GoalID, g.CounterID, err)
			}
			c.re = re
		default:
			return nil, fmt.Errorf("%w: goal %d of counter %d has kind %q; use contains, prefix, exact or regexp",
				ErrBadRule, g.GoalID, g.CounterID, g.Kind)
		}
		r.byCounter[g.CounterID] = append(r.byCounter[g.CounterID], c)
		r.count++
	}
	for _, cs := range r.byCounter {
		slices.SortFunc(cs, func(a, b compiled) int { return cmp.Compare(a.id, b.id) })
	}
	return r, nil
}

// Len is the number of goals.
func (r *Rules) Len() int { return r.count }

// Match returns the ids of the counter's goals that url reaches, ascending.
func (r *Rules) Match(counterID uint64, url string) []uint64 {
	var out []uint64
	for _, c := range r.byCounter[counterID] {
		var ok bool
		switch c.kind {
		case KindContains:
			ok = strings.Contains(url, c.pattern)
		case KindPrefix:
			ok = strings.HasPrefix(url, c.pattern)
		case KindExact:
			ok = url == c.pattern
		case KindRegexp:
			ok = c.re.MatchString(url)
		}
		if ok {
			out = append(out, c.id)
		}
	}
	return out
}

// GoalsTableSQL creates the goals table (any of the three SQL dialects).
func GoalsTableSQL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + table +
		" (counter_id BIGINT NOT NULL, goal_id BIGINT NOT NULL, kind VARCHAR(16) NOT NULL, pattern VARCHAR(1024) NOT NULL, PRIMARY KEY (counter_id, goal_id))"
}

// LoadRules reads the goals of the counters in r by a sequential scan of
// table (the seed's way: one pass over the table, rows outside the range
// skipped). Counter ids are stored as signed 64-bit integers, so they must
// be below 2^63.
func LoadRules(ctx context.Context, db *sql.DB, table string, r lease.Range) (*Rules, error) {
	if !lease.ValidTableName(table) {
		return nil, fmt.Errorf("%w: table name %q", ErrBadRule, table)
	}
	rows, err := db.QueryContext(ctx, "SELECT counter_id, goal_id, kind, pattern FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("goals: scan %s: %w", table, err)
	}
	defer rows.Close()
	var goals []Goal
	for rows.Next() {
		var (
			counter, goal int64
			g             Goal
		)
		if err := rows.Scan(&counter, &goal, &g.Kind, &g.Pattern); err != nil {
			return nil, fmt.Errorf("goals: scan %s: %w", table, err)
		}
		if counter < 0 || goal < 0 {
			return nil, fmt.Errorf("%w: negative counter %d or goal %d", ErrBadRule, counter, goal)
		}
		g.CounterID, g.GoalID = uint64(counter), uint64(goal)
		if r.Contains(g.CounterID) {
			goals = append(goals, g)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("goals: scan %s: %w", table, err)
	}
	return NewRules(goals)
}

// Demo data: counters 1..n, each with perCounter goals of every kind. Hits
// made by DemoHit reach some of them; tests and benchmarks check answers
// against NewRules(DemoGoals(...)).

// DemoGoals returns the demo goals of counters 1..counters.
func DemoGoals(counters, perCounter int) []Goal {
	kinds := []string{KindContains, KindPrefix, KindExact, KindRegexp}
	var out []Goal
	for c := 1; c <= counters; c++ {
		for j := range perCounter {
			g := Goal{CounterID: DemoCounterID(c), GoalID: uint64(c*1000 + j), Kind: kinds[j%len(kinds)]}
			switch g.Kind {
			case KindContains:
				g.Pattern = fmt.Sprintf("/page/%d", j)
			case KindPrefix:
				g.Pattern = fmt.Sprintf("https://site%d.example/page/%d", c, j)
			case KindExact:
				g.Pattern = fmt.Sprintf("https://site%d.example/page/%d?thanks", c, j)
			case KindRegexp:
				g.Pattern = fmt.Sprintf(`/page/%d(\?|$)`, j)
			}
			out = append(out, g)
		}
	}
	return out
}

// DemoCounterID returns the id of demo counter c (1-based): c itself.
// Counter ids are small numbers, so shards of a goals service split the
// counter range (DemoRanges), not the whole uint64 space.
func DemoCounterID(c int) uint64 { return uint64(c) } //nolint:gosec // c >= 1

// DemoRanges splits demo counters 1..counters into shards ranges of about
// equal size; the last one runs to the end of the space.
func DemoRanges(counters, shards int) ([]lease.Range, error) {
	if shards < 1 || counters < shards {
		return nil, fmt.Errorf("%w: %d counters cannot fill %d shards", ErrBadRule, counters, shards)
	}
	out := make([]lease.Range, shards)
	for i := range out {
		if i > 0 {
			out[i].Begin = out[i-1].End
		}
		if i < shards-1 {
			out[i].End = uint64(1 + counters*(i+1)/shards) //nolint:gosec // small positive
		}
	}
	return out, nil
}

// SeedDemo creates table in db and fills it with DemoGoals.
func SeedDemo(ctx context.Context, db *sql.DB, table string, counters, perCounter int, placeholder func(int) string) error {
	if !lease.ValidTableName(table) {
		return fmt.Errorf("%w: table name %q", ErrBadRule, table)
	}
	if _, err := db.ExecContext(ctx, GoalsTableSQL(table)); err != nil {
		return fmt.Errorf("goals: create %s: %w", table, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("goals: seed %s: %w", table, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
		return fmt.Errorf("goals: seed %s: %w", table, err)
	}
	ins := fmt.Sprintf("INSERT INTO %s (counter_id, goal_id, kind, pattern) VALUES (%s, %s, %s, %s)",
		table, placeholder(1), placeholder(2), placeholder(3), placeholder(4))
	for _, g := range DemoGoals(counters, perCounter) {
		if _, err := tx.ExecContext(ctx, ins, int64(g.CounterID), int64(g.GoalID), g.Kind, g.Pattern); err != nil { //nolint:gosec // demo ids < 2^63
			return fmt.Errorf("goals: seed %s: %w", table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("goals: seed %s: %w", table, err)
	}
	return nil
}
