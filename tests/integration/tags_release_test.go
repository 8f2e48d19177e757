//go:build !failpoints

package integration

const buildTags = ""
