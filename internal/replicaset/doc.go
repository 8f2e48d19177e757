// Package replicaset is the state machine of one replicaset's Raft group:
// the replicaset's own data, replicated to every member. Its leader is the
// replicaset's read-write instance; the other members are replicas.
//
// The cluster opens the group through the factory the server hands it
// (cluster.Config.NewReplicasetSM) and never imports this package. The
// data layer (spaces of tuples, bucket states, tombstones, request ids)
// lives here under the group's own prefix, laid out as internal/storage's
// keyspace list says. It must never reach outside its group's keys
// "d/<group>/...".
package replicaset
