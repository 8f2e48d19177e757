package replicaset

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// Command kinds.
const (
	// OpBarrier does nothing but take a place in the log: once a member has
	// applied it, it has every entry committed before it.
	OpBarrier byte = 1
)

// ErrBadCommand: a command this state machine cannot decode.
var ErrBadCommand = errors.New("replicaset: bad command")

// BarrierCommand returns the encoded barrier.
func BarrierCommand() []byte { return []byte{OpBarrier} }

// BarrierResult is the result of a barrier: its log index.
type BarrierResult struct{ Index uint64 }

// SM is one replicaset group's state machine.
type SM struct {
	prefix []byte
}

var _ multiraft.StateMachine = (*SM)(nil)

// New returns the state machine of the replicaset group g.
func New(g multiraft.GroupID) *SM {
	return &SM{prefix: storage.GroupPrefix(storage.PrefixData, uint64(g))}
}

// Apply implements multiraft.StateMachine.
func (s *SM) Apply(_ *pebble.Batch, entries []multiraft.Entry) ([]any, error) {
	out := make([]any, len(entries))
	for i, e := range entries {
		switch {
		case len(e.Cmd) == 1 && e.Cmd[0] == OpBarrier:
			out[i] = BarrierResult{Index: e.Index}
		default:
			out[i] = fmt.Errorf("%w at index %d", ErrBadCommand, e.Index)
		}
	}
	return out, nil
}

// Snapshot implements multiraft.StateMachine.
func (s *SM) Snapshot(ctx context.Context, r pebble.Reader, w io.Writer) error {
	return storage.WritePrefixSnapshot(ctx, r, s.prefix, w)
}

// Restore implements multiraft.StateMachine.
func (s *SM) Restore(ctx context.Context, db *pebble.DB, r io.Reader) error {
	return storage.RestorePrefixSnapshot(ctx, db, s.prefix, r)
}
