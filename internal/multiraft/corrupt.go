package multiraft

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardkit/shardkit/internal/storage"
)

// raftPanic is what raft panics with through the engine's logger: an
// invariant of its log does not hold.
type raftPanic struct {
	group GroupID
	msg   string
	err   error // the first error among the arguments, if any
}

func newRaftPanic(g GroupID, msg string, args []any) *raftPanic {
	p := &raftPanic{group: g, msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			p.err = err
			break
		}
	}
	return p
}

func (p *raftPanic) Error() string { return fmt.Sprintf("group %d: raft: %s", p.group, p.msg) }
func (p *raftPanic) Unwrap() error { return p.err }

// lostLog reports whether raft found that this member's stored log is
// shorter than, or different from, what it acknowledged before: entries
// it had persisted are gone (a truncated write-ahead log, a lost file). A
// restart finds the same state, so it is corruption, not a crash.
func (p *raftPanic) lostLog() bool {
	return storage.IsDamaged(p.err) ||
		strings.Contains(p.msg, "Was the raft log corrupted, truncated, or lost?") || // a commit index beyond the log
		strings.Contains(p.msg, "conflict with committed entry") || // a committed entry replaced
		strings.Contains(p.msg, "state.commit") && strings.Contains(p.msg, "is out of range") // the hard state's commit beyond the log
}

// recoverRound turns the failures that stop a host, raised as panics in
// the middle of a round or of opening a group, into an error: Pebble's
// fatal failure (storage.FatalError), raft's panic at a log that lost
// entries, and raft's panic at a read of the log that found corruption
// (Pebble's, or the log's own ErrCorruptState).
// Those two are ErrCorruptState. Defer it directly around work that calls
// raft or writes to the database; any other panic is a bug and goes on.
func recoverRound(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	switch v := r.(type) {
	case *storage.FatalError:
		*errp = v
		return
	case *raftPanic:
		if v.lostLog() {
			*errp = fmt.Errorf("%w: %w", ErrCorruptState, v)
			return
		}
	case error:
		// raft panics with its Storage's unexpected errors as they are:
		// Pebble's corruption, or the log's own (a value that does not
		// decode, a sideloaded entry's file lost or damaged).
		if errors.Is(v, ErrCorruptState) {
			*errp = v
			return
		}
		if storage.IsDamaged(v) {
			*errp = fmt.Errorf("%w: reading the raft log: %w", ErrCorruptState, v)
			return
		}
	}
	panic(r)
}

// IsCorrupt reports whether err (a host's failure, or an error of a call
// that reads the database) says that the stored state is corrupt or lost:
// the member cannot go on with it, and a restart finds the same state.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorruptState) || storage.IsDamaged(err) }
