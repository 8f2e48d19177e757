// Package cache is the seed-000 template for sharded, replicated cache
// services (SPEC C1–C10): a typed fan-out Client whose only method is
// Get(keys), and a server-side Handler that answers only for the shard its
// server holds and proves that shard in every answer.
//
// A service describes itself with a Description: its key, entry id and value
// types, its gRPC method and Request/Response messages, and the functions
// ShardingKey, EntryID, Serialize and Deserialize. No code is generated
// beyond the service's own .proto; the client calls the method through
// grpc.ClientConn.Invoke.
//
// The Client keeps a shard map per datacenter, updated from every answer
// when it is newer (a higher lease epoch for the same range, never a wall
// clock), refreshes its hosts through a Resolver every PingPeriod and pings
// them with an empty Get. Get sends each host the keys of its shard (every
// replica in every datacenter at once, or the nearest first when HedgeDelay
// is set), returns as soon as every key is in and cancels the rest.
//
// Shard ownership comes from package lease; LeaseShards adapts a
// lease.Keeper to the Handler. Metrics go to the prometheus.Registerer the
// caller passes, never to a global registry.
//
// This package must never retry a whole fan-out, never compare wall clocks
// to decide which shard information is newer, never answer for a shard the
// server does not hold, and never import internal/ packages.
package cache
