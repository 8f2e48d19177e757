// Package goals is the example cache service of seed 000, a goals matcher
// built on package cache: a key is a hit (counter_id, watch_id, url), the
// sharding key is the counter id, the entry id the watch id, and the value
// the ids of the goals whose URL rule the hit's URL matches.
//
// It owns the goal rules (Rules, loaded from a SQL table by a sequential
// scan of the shard's counter range), the server side (Service, on
// cache.Handler and a lease.Keeper) and the client Description. The
// commands goals-server and goals-client live under cmd/.
//
// It must never answer for counters outside the shard it holds, nor import
// shardkit's internal packages: it uses the public libraries as any
// service would.
package goals
