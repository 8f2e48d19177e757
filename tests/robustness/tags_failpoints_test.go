//go:build failpoints

package robustness

// failpoints says whether the binary under test is built with failpoints
// (the same tags as this test binary): the nemesis' network faults and
// the deliberate defects need them.
const failpoints = true
