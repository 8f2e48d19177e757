// Package pgstore is the scheduler's Store on PostgreSQL (pgx v5): the
// seed's tables in one schema, every write one transaction, shard leases
// with fencing epochs, wake-ups through LISTEN/NOTIFY, and the changelog
// through an outbox table written in the save's transaction and sent to
// Kafka by a Relay (docs/scheduler.md, "PostgreSQL").
//
// Tables (schema Options.Schema):
//
//	shards(shard, owner, epoch, last_ping, ttl_us)           the leases
//	runners(owner, last_ping, ttl_us)                        live runners' announcements
//	offers(shard, offer_id, version, body, chain)
//	states(shard, offer_id, stage_id, version, type_url, value)
//	queue(shard_id, stage_id, ts, offer_id)                 PK in that order (S14)
//	queue_rescan(shard_id, stage_id, ts, offer_id)          the low-priority lane
//	queue_inverted(shard_id, offer_id, stage_id, ts, ...)   PK (shard_id, offer_id, stage_id)
//	changed(shard, offer_id, seq, source, fields, chain)    changed-offer marks
//	aftersave(shard, stage_id, offer_id, seq)               pending AfterSave calls
//	dead_letters(stage_id, offer_id, ...)
//	outbox(seq, offer_id, record)                           the changelog, in save order
//
// Leases follow cache/lease's epoch rules (a claim raises the epoch; only
// database time judges expiry) in a table of their own: a runner holds
// many shards, and every write checks its lease's row in the write's own
// transaction (SELECT ... FOR SHARE, so a claim waits for the writes under
// the old epoch to end and every later write sees the new epoch). Claims
// lock the candidate rows with SELECT ... FOR UPDATE SKIP LOCKED, so
// runners claiming together take different shards without waiting.
//
// It must never write under a lease without checking its epoch in the same
// transaction, never judge a lease's expiry by this process's clock, and
// never hold a transaction open across a stage's call.
package pgstore
