//go:build failpoints

package integration

// buildTags are the tags the binary under test is built with: the same as
// this test binary's, so a failpoints run tests a binary with failpoints.
const buildTags = "failpoints"
