//go:build !failpoints

package failpoint

// Points is empty in release builds: every failpoint is a no-op. Build
// with -tags failpoints to get the test hooks.
type Points struct{}

// Enabled reports whether failpoints are compiled in.
func (*Points) Enabled() bool { return false }

// Set does nothing in release builds.
func (*Points) Set(string, func() error) {}

// Eval does nothing in release builds.
func (*Points) Eval(string) error { return nil }

// Kill does nothing in release builds.
func Kill() error { return nil }
