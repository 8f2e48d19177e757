// Package lease owns shard leases for cache servers (SPEC C11–C12): which
// server of a datacenter holds which shard of the uint64 sharding-key space,
// and the epoch (fencing number) of that holding.
//
// A Store keeps one row per (dc, shard): its half-open key Range, the holding
// host, when it was locked and last pinged, the holder's TTL and the epoch,
// which grows by one on every claim and never goes back. SQL stores (SQLite,
// MySQL/MariaDB, PostgreSQL) judge expiry with database time only; a Keeper
// claims a shard (the one held before, else an expired or free one, else it
// waits), pings it, and tells its server when to stop answering: before the
// lease could have expired in the store, by the server's own monotonic clock
// with a margin. A lost lease is reported once, through a callback and the
// error of Keeper.Run.
//
// Every backend passes the same conformance suite, leasetest.Run: the SQL
// stores and ClusterStore, which keeps the leases on the shardkit cluster's
// own leases with fencing tickets (group 0).
//
// This package must never hold a database transaction open for the life of
// a lease (the lease lives in the row's data), never compare a wall clock of
// this process with a database time, and never decide "newer" by anything
// but the epoch.
package lease
