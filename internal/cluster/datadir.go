package cluster

import (
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// A damaged data dir (corrupt or missing files, a raft log that lost
// entries it had acknowledged) is not a crash: a restart finds the same
// damage. The instance refuses to go on, in one line that says what is
// damaged and how to recover: expel the instance, empty the data dir and
// start it again, so that it joins as a new instance and catches up from
// the others. It never wipes the data dir itself (docs/operations.md,
// "Decisions").

// isDamaged reports whether err says that this instance's data dir is
// corrupt or lost (as opposed to a failure to write, or a crash).
func isDamaged(err error) bool {
	return multiraft.IsCorrupt(err) || storage.IsDamaged(err) || errors.Is(err, ErrCorruptIdentity)
}

// damagedRefusal is the refusal for a damaged data dir. instanceID and
// raftID name the instance when known (0 and "" when not).
func damagedRefusal(dataDir, instanceID string, raftID uint64, err error) *RefusedError {
	who, id := "this instance", "INSTANCE_ID"
	switch {
	case instanceID != "" && raftID != 0:
		who, id = fmt.Sprintf("this instance (%s, raft_id %d)", instanceID, raftID), instanceID
	case instanceID != "":
		who, id = fmt.Sprintf("this instance (%s)", instanceID), instanceID
	}
	find := ""
	if id == "INSTANCE_ID" {
		find = " (find its id with shardkit status)"
	}
	return &RefusedError{Err: &damageError{msg: fmt.Sprintf("data dir %s is damaged: %s; %s cannot go on with it and restarting will not help. "+
		"To recover, expel it from a running instance (shardkit expel --peer ADDR --force %s)%s, "+
		"empty the data dir and start it again: it joins as a new instance and catches up from the others",
		dataDir, storage.DescribeDamage(err), who, id, find), err: err}}
}

// damageError is the refusal's one line, wrapping what found the damage.
type damageError struct {
	msg string
	err error
}

func (e *damageError) Error() string { return e.msg }
func (e *damageError) Unwrap() error { return e.err }

// damaged turns an error that ends the node into the refusal when it says
// the data dir is damaged; any other error is returned as it is.
func (n *Node) damaged(err error) error {
	if err == nil || !isDamaged(err) {
		return err
	}
	var ref *RefusedError
	if errors.As(err, &ref) && !isDamaged(ref.Err) {
		return err
	}
	instanceID, raftID := n.cfg.InstanceID, uint64(0)
	if id := n.Identity(); id != nil {
		instanceID, raftID = id.InstanceID, id.RaftID
	}
	return damagedRefusal(n.cfg.DataDir, instanceID, raftID, err)
}

// OpenRefusal is the refusal for a database that cannot be opened in
// dataDir: in use by another process, damaged, or another failure.
// instanceID is the configured one ("" when the leader assigns it).
func OpenRefusal(dataDir, instanceID string, err error) *RefusedError {
	switch {
	case errors.Is(err, storage.ErrLocked):
		return &RefusedError{Err: fmt.Errorf("cannot open the database in %s: another process has it open "+
			"(is another instance using this data dir?); stop it, or give this instance a data dir of its own: %w", dataDir, err)}
	case storage.IsDamaged(err):
		return damagedRefusal(dataDir, instanceID, 0, err)
	}
	return &RefusedError{Err: fmt.Errorf("cannot open the database in %s: %w", dataDir, err)}
}
