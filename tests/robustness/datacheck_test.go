package robustness

import (
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/storage"
)

// verifyData stops every instance (SIGTERM) and checks each one's
// database as it was left (replicaset.VerifyData): every bucket's counts
// against its tuples, nothing left of a bucket given away, tombstones
// only in a bucket being received, no event above its bucket's revision;
// and the members of a replicaset stopped at one applied index hold the
// same data (replicaset.DataDigest).
// A write counted twice, or a cleanup that left a row behind, shows here
// with the bucket and the instance, where Count shows only a total. It
// runs last: the instances do not come back.
func (c *cluster) verifyData() {
	t := c.t
	var wg sync.WaitGroup
	for _, inst := range c.insts {
		wg.Go(func() {
			if err := inst.Term(15 * time.Second); err != nil {
				t.Logf("data check: %v", err)
			}
		})
	}
	wg.Wait()
	checked := 0
	type replica struct {
		inst            string
		applied, digest uint64
	}
	replicas := map[uint64][]replica{} // by group
	for _, inst := range c.insts {
		db, err := storage.Open(filepath.Join(c.dataDirs[inst.Name], "db"), storage.Options{})
		if err != nil {
			t.Errorf("data check: open %s's database: %v", inst.Name, err)
			continue
		}
		groups, err := replicaset.DataGroups(db)
		if err != nil {
			t.Errorf("data check: %s's groups: %v", inst.Name, err)
		}
		for _, g := range groups {
			bad, err := replicaset.VerifyData(db, g)
			if err != nil {
				t.Errorf("data check: %s, group %d: %v", inst.Name, g, err)
			}
			for _, b := range bad {
				t.Errorf("data check: %s, group %d: %s", inst.Name, g, b)
			}
			checked++
			applied, err := multiraft.AppliedIndex(db, multiraft.GroupID(g))
			if err != nil {
				t.Errorf("data check: %s, group %d: %v", inst.Name, g, err)
				continue
			}
			digest, err := replicaset.DataDigest(db, g)
			if err != nil {
				t.Errorf("data check: %s, group %d: %v", inst.Name, g, err)
				continue
			}
			replicas[g] = append(replicas[g], replica{inst.Name, applied, digest})
		}
		if err := db.Close(); err != nil {
			t.Errorf("data check: close %s's database: %v", inst.Name, err)
		}
	}
	// Members stopped at one applied index hold the same data.
	for _, g := range slices.Sorted(maps.Keys(replicas)) {
		rs := replicas[g]
		same := true
		for _, r := range rs[1:] {
			if r.applied != rs[0].applied {
				same = false
			}
		}
		if !same {
			t.Logf("data check: group %d's members stopped at different indexes (%v): their data is not compared", g, rs)
			continue
		}
		for _, r := range rs[1:] {
			if r.digest != rs[0].digest {
				t.Errorf("data check: group %d: %s and %s both applied up to index %d, yet hold different data (digests %x and %x)", g, rs[0].inst, r.inst, r.applied, rs[0].digest, r.digest)
			}
		}
	}
	t.Logf("data check: %d replicas of a replicaset's data checked", checked)
}
