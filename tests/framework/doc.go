// Package framework is what the multi-process test suites share
// (tests/integration, tests/robustness): building the shardkit binary
// once, free loopback ports, and Instance, one `shardkit run` process tree
// (the supervisor, in a process group of its own, and the worker it
// starts) that a test starts, signals, stops, kills and restarts, with its
// output appended to one log file.
//
// It drives the binary from outside, as an operator does, and imports
// nothing of the instance's own packages. Each suite keeps what is its
// own: its cluster (how instances are laid out and configured, and how it
// tells that the cluster is whole) and its checks.
package framework
