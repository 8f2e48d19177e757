// Package cluster makes independently started instances one cluster
// (seed 004): discovery, boot, join, the identity an instance keeps across
// restarts, grades and the governor that drives them, the sentinel,
// graceful shutdown, expel, leases, and the ClusterService that serves all
// of it over gRPC. It also says, in one line, what an instance whose data
// dir is damaged must do (it refuses to go on; see datadir.go).
//
// Two types split it by concern: Node is the instance (its lifecycle,
// group 0 and the replicaset group, the governor, the sentinel), and
// Service (Node.Service) is its RPC surface, the ClusterService methods,
// each in the file of its concern (join.go, expel.go, leases.go,
// users.go, status.go, service.go), which check and convert a request and
// ask the Node.
//
// It owns the decisions: which instance bootstraps, where a joiner goes,
// which instances vote, when a grade may advance. It keeps its state in
// group 0 (through internal/meta) and runs groups through
// internal/multiraft. It must never touch a state machine's keys directly,
// and never decide anything on a follower that only the leader may decide:
// every change goes through group 0's log.
package cluster
