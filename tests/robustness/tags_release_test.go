//go:build !failpoints

package robustness

const failpoints = false
