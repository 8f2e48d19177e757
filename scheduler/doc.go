// Package scheduler runs stages over offers (SPEC S1–S14, docs/scheduler.md):
// many independent stages, each with its own queue, its own private state
// beside every offer and its own timers, each reacting to the offer's
// changes. Every change is saved under an optimistic lock, atomically with
// the stage's state, its queue entries and a changelog record.
//
// It owns the model (Offer, State, Patch, Decision, Result), the Stage API,
// the Store interface that every store implements (scheduler/pgstore for
// PostgreSQL; one conformance suite, scheduler/storetest) and the Runner,
// which owns some shards through fenced leases and processes their queues.
// It never imports a store, a database driver or shardkit's internal
// packages: stores are handed to it.
//
// # The processing loop
//
// The seed's algorithm, numbered as the Runner's code numbers its steps.
// When offer X comes due in stage Y's queue (a trigger, Y's timer, a retry
// or the low-priority rescan lane):
//
//  1. The Runner that holds X's shard (shard = ShardOf(X, shards)) takes
//     the entry, unless another stage works on X right now (one stage at a
//     time on an offer: the entry waits in its queue) or Y already runs as
//     many Process calls as its MaxParallel; it waits for Y's rate limit.
//  2. It loads X with its version, and Y's state with its version (Load).
//  3. It calls Y's Process on them, with a timeout; a panic is an error.
//  4. An error is retried with backoff (the entry's due time moves on and
//     its attempts grow, in the store); after MaxAttempts the entry goes to
//     Y's dead letters. Nothing else waits for it.
//  5. It saves in one atomic, fenced Save: X's new body checked against the
//     version read (or Y's patch on fields it owns, without the check), Y's
//     new state checked against its version, Y's queue entry removed and
//     Y's timer set, the changelog record (outbox) and, when X changed, a
//     durable changed-offer mark.
//  6. A conflict (X or Y's state changed since step 2) goes back to step 2.
//     A fenced save (the shard's lease was taken) writes nothing and the
//     Runner lets the shard go.
//  7. For every changed-offer mark of its shards (from step 5, or an
//     outside write through Put), the Runner asks every other stage whose
//     queue does not hold X yet, and whose declared fields changed, its
//     ShouldProcess, and offers X to the queues of those that want it (an
//     error there queues X anyway). Only then is the mark removed, so a
//     Runner killed between a save and this step loses no trigger: the
//     next holder of the shard finds the mark. A mark whose chain of
//     stage-made changes is longer than MaxChain is dropped and counted
//     (the loop guard). An unchanged offer makes no mark and asks no one.
//  8. Stages with an AfterSave hook get it called for their saves, at
//     least once, from a durable list written by step 5.
package scheduler
