package framework

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// dataCheck is `shardkit check-data --format json`'s answer.
type dataCheck struct {
	Groups []struct {
		Group       uint64   `json:"group"`
		Applied     uint64   `json:"applied_index"`
		LastCommand uint64   `json:"last_command_index"`
		Digest      string   `json:"digest"`
		Problems    []string `json:"problems"`
	} `json:"groups"`
}

// CheckData stops every instance (SIGTERM, in parallel) and checks each
// one's data dir with `shardkit check-data`, as an operator would: each
// problem it names fails the test, with the instance and the replicaset's
// group, and so do two members of a group (a replicaset's, or group 0,
// the cluster's own, which every instance holds) that hold different
// digests where they must hold the same state: stopped at one applied
// index, or a few entries apart where those entries changed no data (a
// new leader's empty entry: the last command of the one further on is at
// or below the other's applied index). The instances do not come back.
// It returns how many replicas of a replicaset's data it checked.
func CheckData(tb testing.TB, insts []*Instance) int {
	tb.Helper()
	var wg sync.WaitGroup
	for _, inst := range insts {
		wg.Go(func() {
			if err := inst.Term(15 * time.Second); err != nil {
				tb.Logf("data check: %v", err)
			}
		})
	}
	wg.Wait()
	type replica struct {
		inst                 string
		applied, lastCommand uint64
		digest               string
	}
	byGroup := map[uint64][]replica{}
	checked := 0
	for _, inst := range insts {
		dir := inst.DataDir()
		if dir == "" {
			tb.Errorf("data check: %s was run without --data-dir", inst.Name)
			continue
		}
		out, err := exec.Command(inst.Binary, "check-data", "--data-dir", dir, "--format", "json").Output()
		var dc dataCheck
		if jerr := json.Unmarshal(out, &dc); jerr != nil {
			msg := ""
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				msg = string(ee.Stderr)
			}
			tb.Errorf("data check: %s: shardkit check-data: %v %s (output %q)", inst.Name, err, msg, out)
			continue
		}
		for _, g := range dc.Groups {
			for _, p := range g.Problems {
				tb.Errorf("data check: %s, group %d: %s", inst.Name, g.Group, p)
			}
			byGroup[g.Group] = append(byGroup[g.Group], replica{inst.Name, g.Applied, g.LastCommand, g.Digest})
			if g.Group != 0 { // group 0, the cluster's state, every instance holds
				checked++
			}
		}
	}
	// Members stopped at one applied index hold the same data, and so do
	// members stopped a few entries apart (the last leader's, or a new
	// leader's empty entry, not applied by a member that stopped first)
	// where those entries changed no data.
	compared, across, apart := 0, 0, 0
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		rs := byGroup[g]
		slices.SortFunc(rs, func(a, b replica) int { return cmp.Compare(a.applied, b.applied) })
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if b.lastCommand > a.applied {
					apart++ // b applied a command a had not
					continue
				}
				compared++
				if a.applied != b.applied {
					across++
				}
				if a.digest != b.digest {
					tb.Errorf("data check: group %d: %s (applied up to index %d) and %s (up to %d, its last command at %d) hold different data (digests %s and %s)",
						g, a.inst, a.applied, b.inst, b.applied, b.lastCommand, a.digest, b.digest)
				}
			}
		}
	}
	tb.Logf("data check: %d replicas of a replicaset's data and %d of group 0's state checked; %d pairs of members compared (%d of them at different applied indexes, no command between), %d left apart (one applied a command the other had not)", checked, len(byGroup[0]), compared, across, apart)
	return checked
}

// DataDir is the instance's --data-dir ("" when Args has none).
func (inst *Instance) DataDir() string {
	for i, a := range inst.Args {
		if a == "--data-dir" && i+1 < len(inst.Args) {
			return inst.Args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			return v
		}
	}
	return ""
}
