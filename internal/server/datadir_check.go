package server

import (
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/storage"
)

// GroupCheck is what CheckDataDir found of one Raft group's state: group
// 0's (the cluster's) or a replicaset's data.
type GroupCheck struct {
	// Group is the Raft group: 0 for the cluster's own state, else a
	// replicaset's.
	Group uint64 `json:"group"`
	// Applied is the index of the last entry of its log the instance
	// applied.
	Applied uint64 `json:"applied_index"`
	// LastCommand is the index of the last entry at or below Applied that
	// reached the group's state machine
	// (multiraft.LastCommandIndex): the entries above it, a new leader's
	// empty entry or a configuration change, changed none of its data.
	// Members stopped at applied indexes a <= b hold the same data when
	// the one at b has its last command at or below a.
	LastCommand uint64 `json:"last_command_index"`
	// Digest is a digest of its every key and value (storage.Digest of
	// its keyspace): members
	// stopped at one applied index have one digest, and so do members
	// stopped on either side of entries that changed no data
	// (LastCommand).
	Digest string `json:"digest"`
	// Problems are the rules of a replicaset's data that it breaks, one a
	// bucket (replicaset.VerifyData); none when it is sound, and none
	// checked of group 0.
	Problems []string `json:"problems"`
}

// CheckDataDir checks the data of a stopped instance in dataDir (its
// --data-dir), read only: group 0's state (the cluster's), then each
// replicaset's data against the rules its state machine keeps, each with
// its applied index and a digest to compare with the other members'. An
// instance still running holds the database's lock: that is an error, as
// is a directory with no database.
func CheckDataDir(dataDir string) ([]GroupCheck, error) {
	db, err := storage.Open(filepath.Join(dataDir, "db"), storage.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open the database of %s (an instance using it must be stopped first): %w", dataDir, err)
	}
	defer db.Close()
	groups, err := replicaset.DataGroups(db)
	if err != nil {
		return nil, err
	}
	out := make([]GroupCheck, 0, 1+len(groups))
	// Group 0, the cluster's own state (every instance is a member): its
	// digest alone, as its state machine keeps no rules to check here.
	zero, err := checkGroup(db, cluster.GroupMeta, []byte(storage.PrefixMeta), nil)
	if err != nil {
		return nil, err
	}
	if zero.Applied > 0 {
		out = append(out, zero)
	}
	for _, g := range groups {
		c, err := checkGroup(db, multiraft.GroupID(g), storage.GroupPrefix(storage.PrefixData, g), func() ([]string, error) { return replicaset.VerifyData(db, g) })
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// checkGroup reads what CheckDataDir tells of group g, whose state
// machine keeps its keys under prefix: its applied index, last command
// and digest, and the problems verify finds (nil: none checked).
func checkGroup(db *pebble.DB, g multiraft.GroupID, prefix []byte, verify func() ([]string, error)) (GroupCheck, error) {
	c := GroupCheck{Group: uint64(g), Problems: []string{}}
	var err error
	if c.Applied, err = multiraft.AppliedIndex(db, g); err != nil {
		return c, err
	}
	if c.LastCommand, err = multiraft.LastCommandIndex(db, g, c.Applied); err != nil {
		return c, err
	}
	d, err := storage.Digest(db, prefix)
	if err != nil {
		return c, fmt.Errorf("group %d: %w", g, err)
	}
	c.Digest = fmt.Sprintf("%016x", d)
	if verify != nil {
		bad, err := verify()
		if err != nil {
			return c, fmt.Errorf("group %d: %w", g, err)
		}
		c.Problems = append(c.Problems, bad...)
	}
	return c, nil
}
