package cache

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the package; test with errors.Is.
var (
	// ErrMissingKeys: Get could not get an answer for some keys before every
	// replica failed or the deadline passed. The error is a *MissingKeysError.
	ErrMissingKeys = errors.New("cache: keys without an answer")
	// ErrBadAnswer: a server's answer could not be used (no shard, a
	// Deserialize error).
	ErrBadAnswer = errors.New("cache: unusable answer")
	// ErrNoShard: the server holds no shard lease right now (servers answer
	// gRPC FailedPrecondition with this message).
	ErrNoShard = errors.New("cache: this server holds no shard lease; ask another replica")
	// ErrInvalid: a bad Description or Options.
	ErrInvalid = errors.New("cache: invalid configuration")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("cache: client closed")
)

// MissingKeysError names the entry ids Get has no answer for and why.
type MissingKeysError[ID comparable] struct {
	IDs []ID
	// Unrouted ids had no known shard until the deadline.
	Unrouted []ID
	// Causes are the last errors of the hosts that were asked, by address.
	Causes map[string]error
	// Deadline is set when the caller's deadline ended the wait.
	Deadline error
}

func (e *MissingKeysError[ID]) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cache: no answer for %d keys (ids %v)", len(e.IDs), head(e.IDs, 10))
	if len(e.Unrouted) > 0 {
		fmt.Fprintf(&b, "; %d had no known shard (ids %v): are servers of that range up and holding leases?", len(e.Unrouted), head(e.Unrouted, 10))
	}
	if e.Deadline != nil {
		fmt.Fprintf(&b, "; %v", e.Deadline)
	}
	n := 0
	for addr, err := range e.Causes {
		if n == 3 {
			fmt.Fprintf(&b, "; and %d more hosts failed", len(e.Causes)-n)
			break
		}
		fmt.Fprintf(&b, "; %s: %v", addr, err)
		n++
	}
	return b.String()
}

func (e *MissingKeysError[ID]) Is(target error) bool { return target == ErrMissingKeys }

func (e *MissingKeysError[ID]) Unwrap() error { return e.Deadline }

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}
