// Package router is the router side of the data layer (vshard's router):
// it serves DataService on every instance, finds the bucket of each call's
// key, the replicaset that holds the bucket (group 0's bucket map) and the
// member that must serve it (the leader for writes and rw reads, the
// nearest member by failure domain for ro reads), and sends the call
// there: to this instance's own storage when it is that member, else over
// gRPC to that instance's DataService, marked as forwarded so that the
// other side serves it or answers with a redirect and never forwards it
// again. It follows a redirect (not the leader, not the bucket's
// replicaset) a bounded number of times, learning leaders as it goes. It
// also runs map-calls (one call per replicaset) and the data layer's DDL
// on the group-0 leader.
//
// It owns the routing decisions and the retries they allow. It must never
// read or write a replicaset's data itself: it reaches storage only
// through the Local interface (this instance's storage, wired by the
// server) or over RPC, and it never imports internal/replicaset (depguard
// enforces it). It never decides where a bucket is: group 0 does.
//
// Its files, by concern: router.go (the Router, its config, its views of
// group 0 and of this instance's storage, the leaders it learned),
// place.go (a call's space, key and bucket, by the compiled schema.Space),
// route.go (which member serves a bucket, forwarding, redirects, the wait
// for a switch), serve.go (the DataService calls: write, get, multi,
// range, call, map-call), spaces.go (the routing table, DDL, the
// cluster-wide count), stream.go (the data stream) and workers.go (its
// goroutines).
package router
