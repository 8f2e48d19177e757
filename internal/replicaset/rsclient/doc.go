// Package rsclient is how other rooms call a replicaset's BucketService:
// OnLeader finds the replicaset's leader (the one group 0 recorded, then
// whoever a NOT_LEADER answer names, then every member) and runs the call
// there, on the one retry policy (package retry). The mover and a
// replicaset reading a moving bucket's source use it.
//
// It owns only that loop; it holds no state and never imports the
// replicaset's storage (package replicaset), so that a room reaching a
// replicaset over RPC does not depend on its state machine.
package rsclient
