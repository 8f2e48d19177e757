// Package integration holds multi-process tests of the real shardkit
// binary: instances started on free loopback ports with their own data
// dirs, killed with SIGKILL, stopped with SIGTERM, restarted, and observed
// through `shardkit status --format json`.
//
// The binary is built once per test run (TestMain). Every process a test
// starts is killed when the test ends, and a failing test prints the tail
// of every instance's log.
package integration
