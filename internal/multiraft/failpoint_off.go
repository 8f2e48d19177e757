//go:build !failpoints

package multiraft

// Failpoints is empty in release builds: every failpoint is a no-op the
// compiler removes. Build with -tags failpoints to get the test hooks.
type Failpoints struct{}

// Enabled reports whether failpoints are compiled in.
func (*Failpoints) Enabled() bool { return false }

// Set does nothing in release builds.
func (*Failpoints) Set(string, func() error) {}

func (*Failpoints) eval(string) error { return nil }
