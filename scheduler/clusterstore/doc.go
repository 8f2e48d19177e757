// Package clusterstore is a scheduler.Store on a shardkit cluster: the
// scheduler's default store (docs/scheduler.md; the plan and its reasons
// are docs/design/scheduler-store.md).
//
// Every table of the scheduler is a space named with the store's prefix
// (Options.Prefix, default "sched"), and every one of them is sharded by
// the scheduler's shard number alone: the shard is the first field of each
// primary key and the whole sharding key, so all rows of one shard live in
// one bucket and every write below is one atomic batch.
//
//	<p>_config          (one)                               the number of shards
//	<p>_offers          (shard, offer_id)                   version, body, chain
//	<p>_states          (shard, offer_id, stage)            version, type_url, value
//	<p>_queue           (shard, stage, lane, due, offer_id) a stage's queue, by due time
//	<p>_queue_inverted  (shard, offer_id, stage)            lane, due, timer, attempts, last_error
//	<p>_marks           (shard, offer_id)                   seq, source, all, fields, chain
//	<p>_after           (shard, stage, offer_id)            seq: an AfterSave due
//	<p>_dead            (shard, stage, offer_id)            attempts, cause, at
//	<p>_fences          (shard)                             ticket: the highest lease that wrote
//	<p>_changelog       (shard, offer_id)                   record: the offer's last changelog record
//	<p>_runners         (one, owner)                        the runners that announced themselves
//
// Shard leases are the cluster's leases (client.Leases, in group 0) named
// "<p>/shard/<n>": a lease's ticket is the scheduler's epoch. A Claim
// writes its ticket into the shard's fence row at once, and every write a
// runner makes carries a Fence on that row (client.Fence): once a newer
// holder wrote, a batch of an older one is refused whole, however late it
// arrives (scheduler.ErrFenced). A Release raises the fence past its own
// ticket, so the released lease writes nothing after it either.
//
// Writes from outside (Put, UpdateState, Requeue) carry no fence: they
// read what they change and write with a check that it is still what they
// read (client.VersionIs), reading again when it is not. A runner's writes
// do the same, so a runner and an outside writer never overwrite each
// other's changes.
//
// The changelog: every write that changes an offer or a state replaces
// the offer's row in <p>_changelog, in the same batch, with the save's
// scheduler.Record as JSON. A changefeed of that space (Changelog gives
// its configuration) sends each such change to Kafka as it is: keyed by
// the offer id, the record as the value, the bucket and its revision in
// the headers. One save is one batch, so it is one record; records of one
// offer come in revision order; there is no second write outside the
// batch, and the space holds one row per offer, not a growing outbox.
//
// Wake-ups come from the change stream: a watch of <p>_marks, <p>_queue
// and <p>_after (client.Watch) turns each new mark, queue row or pending
// AfterSave into a scheduler.Wakeup for its shard and stage.
package clusterstore
