// Package replicaset is the state machine of one replicaset's Raft group:
// the replicaset's own data, replicated to every member. Its leader is the
// replicaset's read-write instance; the other members are replicas.
//
// Today it holds barriers only (the governor appends one to learn the
// commit index a new member must reach, K12 step 4); the data layer (spaces
// of tuples, bucket states and tombstones) extends it under the same key
// prefix. It must never reach outside its group's keys "d/<group>/...".
package replicaset
