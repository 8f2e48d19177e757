// Package server wires one shardkit instance together: storage, the raft
// host and transport, the cluster node, the replicaset storage, the router
// and the mover, the gRPC interceptors (metrics, access checks,
// forwarding) and the HTTP endpoints. It is the only package that knows
// every room; nothing imports it but the CLI (and its test helper,
// servertest).
//
// Beside wiring, start-up order and shutdown order, it holds one kind of
// logic: adapting group 0's state to what each room needs of it. Each
// room names its view of group 0 GroupZero (router.GroupZero,
// replicaset.GroupZero, mover.GroupZero); data.go implements them
// (routerGroupZero, which also compiles the spaces once per schema
// version, storageGroupZero, moverGroupZero), so that the rooms never
// import each other. It must never hold
// a room's behaviour: deciding, storing, routing and moving live in the
// rooms it connects.
package server
