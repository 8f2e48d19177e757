package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// FatalError is a failure Pebble cannot go on from, reported through its
// logger's Fatalf: for example a write-ahead log that cannot be written or
// synced because the disk is full. Pebble must never continue past one (its
// commit path would treat the batch as committed), so the logger of a
// database opened by Open panics with a *FatalError, and Commit turns that
// panic back into an error. After it the database may only be closed.
type FatalError struct {
	Msg string
	Err error // the first error among Fatalf's arguments, if any
}

func (e *FatalError) Error() string { return e.Msg }
func (e *FatalError) Unwrap() error { return e.Err }

func newFatalError(format string, args ...any) *FatalError {
	fe := &FatalError{Msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fe.Err = err
			break
		}
	}
	return fe
}

// Commit commits b with opts and returns Pebble's fatal failure as a
// *FatalError instead of letting it panic through the caller. Any other
// panic is not ours to handle and goes on.
func Commit(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*FatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return b.Commit(opts)
}
