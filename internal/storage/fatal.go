package storage

import "fmt"

// FatalError is a failure Pebble cannot go on from, reported through its
// logger's Fatalf: for example a write-ahead log that cannot be written or
// synced because the disk is full. Pebble must never continue past one (its
// commit path would treat the batch as committed), so the logger of a
// database opened by Open panics with a *FatalError, and RecoverFatal turns
// that panic back into an error. After it the database may only be closed.
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

// RecoverFatal turns a panic with Pebble's fatal failure into an error.
// Defer it directly (defer storage.RecoverFatal(&err)) around work that
// writes to a database opened by Open; it stores the *FatalError in *errp.
// Any other panic is not ours to handle and goes on.
func RecoverFatal(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	fe, ok := r.(*FatalError)
	if !ok {
		panic(r)
	}
	*errp = fe
}
