package numerator

import "errors"

// Errors of this package. Every error a run returns wraps one of them.
var (
	// ErrBadVersion: a state version that is not T.S.V.G.
	ErrBadVersion = errors.New("numerator: bad state version")
	// ErrBadInput: an input table is missing, unreadable, truncated, has
	// missing columns or columns of the wrong type, or holds invalid rows.
	ErrBadInput = errors.New("numerator: bad input")
	// ErrBadState: the input state's metadata is missing or inconsistent.
	ErrBadState = errors.New("numerator: bad input state")
	// ErrIncompatibleState: the input state has another type or sharding
	// scheme than the run was asked for and the run does not rebuild.
	ErrIncompatibleState = errors.New("numerator: incompatible input state")
	// ErrOutputExists: an output location already exists; a run never
	// overwrites.
	ErrOutputExists = errors.New("numerator: output exists")
	// ErrEmptyInput: the input offers have no rows (and the run does not
	// allow it).
	ErrEmptyInput = errors.New("numerator: input offers are empty")
	// ErrTooManyDropped: the input offers lack more of the live docs than
	// the run allows.
	ErrTooManyDropped = errors.New("numerator: input drops too many docs")
	// ErrBadOptions: invalid run options.
	ErrBadOptions = errors.New("numerator: bad options")
)
