// Package failpoint holds test hooks at named points of the code: a crash
// at a durability boundary, a slow disk, a process killed in the middle of
// a bucket move. A Points is handed to the rooms that have points (the
// raft engine, the mover, the replicaset's state machine); a test sets
// hooks on it, in process or (for a real binary) through the instance's
// /debug/failpoints HTTP endpoint.
//
// Hooks exist only in binaries built with the "failpoints" tag; in release
// builds every method is a no-op the compiler removes. It keeps no
// package-level state.
package failpoint
