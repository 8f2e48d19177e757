// Package meta is the state machine of group 0, the cluster's metadata
// log that every instance follows: cluster properties, instances with their
// grades, replicasets, the bucket-to-replicaset map and leases with fencing
// tickets.
//
// It owns the meaning of every group-0 command and validates each one when
// it is applied, the same way on every member, so two commands proposed
// from the same stale view cannot both take effect. It keeps an immutable
// in-memory copy of the state for readers, replaced after every applied
// run. It must never do I/O beyond its Pebble keys ("m/..."), never read a
// clock (time comes stamped in the commands) and never talk to the network.
package meta
