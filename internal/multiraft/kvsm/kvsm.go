package kvsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// Op is a command kind.
type Op byte

// Commands.
const (
	OpPut    Op = 1 // set key to value; result: previous value
	OpAppend Op = 2 // append value to key; result: new value
	OpGet    Op = 3 // read key through the log; result: value
	OpDelete Op = 4 // delete key; result: previous value
	OpSet    Op = 5 // set key to value without reading it first; result: none
)

// ErrBadCommand is returned for a command that cannot be decoded.
var ErrBadCommand = errors.New("kvsm: bad command")

// Command is one decoded command.
type Command struct {
	Op    Op
	Key   []byte
	Value []byte
}

// Encode returns the command's wire form.
func (c Command) Encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen32+len(c.Key)+len(c.Value))
	b = append(b, byte(c.Op))
	b = binary.AppendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	return append(b, c.Value...)
}

// Decode parses a command.
func Decode(b []byte) (Command, error) {
	if len(b) == 0 {
		return Command{}, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	op := Op(b[0])
	if op < OpPut || op > OpSet {
		return Command{}, fmt.Errorf("%w: unknown op %d", ErrBadCommand, b[0])
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return Command{}, fmt.Errorf("%w: bad key length", ErrBadCommand)
	}
	rest := b[1+k:]
	return Command{Op: op, Key: rest[:n], Value: rest[n:]}, nil
}

// Result is what Apply returns for each command.
type Result struct {
	Value []byte
	Found bool
	Err   error // a command that could not be decoded
}

// SM is the state machine of one group.
type SM struct {
	group  multiraft.GroupID
	prefix []byte
}

var _ multiraft.StateMachine = (*SM)(nil)

// New returns the state machine of group g.
func New(g multiraft.GroupID) *SM {
	return &SM{group: g, prefix: storage.GroupPrefix(storage.PrefixKV, uint64(g))}
}

func (s *SM) key(k []byte) []byte {
	return append(append(make([]byte, 0, len(s.prefix)+len(k)), s.prefix...), k...)
}

func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, c.Close()
}

// Apply implements multiraft.StateMachine.
func (s *SM) Apply(b *pebble.Batch, entries []multiraft.Entry) ([]any, error) {
	out := make([]any, len(entries))
	for i, e := range entries {
		c, err := Decode(e.Cmd)
		if err != nil {
			out[i] = Result{Err: err}
			continue
		}
		k := s.key(c.Key)
		if c.Op == OpSet {
			if err := b.Set(k, c.Value, nil); err != nil {
				return nil, err
			}
			out[i] = Result{}
			continue
		}
		old, found, err := get(b, k)
		if err != nil {
			return nil, err
		}
		switch c.Op {
		case OpPut:
			err = b.Set(k, c.Value, nil)
			out[i] = Result{Value: old, Found: found}
		case OpAppend:
			nv := append(old, c.Value...)
			err = b.Set(k, nv, nil)
			out[i] = Result{Value: nv, Found: true}
		case OpGet:
			out[i] = Result{Value: old, Found: found}
		case OpDelete:
			err = b.Delete(k, nil)
			out[i] = Result{Value: old, Found: found}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Read reads a key locally (call Group.ReadIndex first for a linearizable read).
func (s *SM) Read(db pebble.Reader, key []byte) ([]byte, bool, error) {
	return get(db, s.key(key))
}

// Snapshot implements multiraft.StateMachine.
func (s *SM) Snapshot(ctx context.Context, r pebble.Reader, w io.Writer) error {
	return storage.WritePrefixSnapshot(ctx, r, s.prefix, w)
}

// Restore implements multiraft.StateMachine.
func (s *SM) Restore(ctx context.Context, db *pebble.DB, r io.Reader) error {
	return storage.RestorePrefixSnapshot(ctx, db, s.prefix, r)
}
