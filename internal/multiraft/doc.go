// Package multiraft runs many Raft groups in one process on
// go.etcd.io/raft/v3 (RawNode), with every group's log in the instance's one
// Pebble database and one stream per peer node for all of them (over gRPC,
// subpackage grpcnet).
//
// It owns: the scheduling of groups onto a small pool of workers, the
// persistence of raft state (log entries, hard state, applied state,
// snapshot metadata under "raft/<group>/..."), the application of committed
// entries to each group's StateMachine, snapshots made on demand and
// streamed in chunks, log compaction, and the transport. It must never know
// what the state machines mean: the cluster, metadata and data layers above
// give it opaque commands and get back opaque results. It never closes the
// database it was given.
//
// # Scheduling
//
// A group has work when a message, proposal, read request or report
// arrives, when a tick is due, or when raft has a Ready. The scheduler
// queues such a group once; a worker claims up to MaxGroupsPerRound queued
// groups and runs one round over all of them. A group is never held by two
// workers: work that arrives while a worker holds it waits in its pending
// flags and re-queues it when the round ends. No group has a goroutine of
// its own.
//
// # The round (the ready-loop contract)
//
// For the groups of one round, in this order:
//
//  1. Feed raft: step inbound messages (but no vote request while the
//     member refuses votes, "Lease reads" step 6), report snapshot
//     outcomes and unreachable peers, propose queued commands (unless a
//     leader holds them back, "Proposal batching") and conf changes, ask
//     for read indexes (or, under a leader's lease, take the commit index
//     for them), tick. Then take each group's Ready.
//  2. Leaders send their messages now. A leader may replicate entries
//     before they are durable on its own disk (Raft thesis 10.2.1): it
//     counts itself in the quorum only once its own append is acknowledged,
//     which in this engine means after step 4.
//  3. A leader applies the committed entries that are already durable in
//     its log: stored by an earlier round, and below the first index this
//     Ready rewrites (not for a Ready that carries a snapshot). They need
//     not wait for this round's fsync, and the clients waiting for them
//     are the leader's. A follower applies all of its committed entries in
//     step 7, after step 6 has sent its acknowledgements: the leader
//     commits the new entries (clients' writes) on those, and an apply of
//     megabytes (a bucket copy's chunks) before them held every write
//     back by as long.
//  4. Write every group's snapshot marker, new entries (deleting any
//     stored suffix they replace) and hard state into ONE Pebble batch and
//     commit it with one fsync if any Ready needs it (MustSync, or a
//     snapshot). This is the group commit: one fsync serves every group of
//     the round, and Pebble merges concurrent commits of several workers.
//     A large entry's data is written to a file of its own and synced
//     first; the batch holds its header ("Sideloaded entries").
//  5. Only now does raft's Storage serve the new entries.
//  6. Only now do followers and candidates send: their votes and
//     acknowledgements promise that state is durable.
//  7. Restore accepted snapshots, apply the remaining committed entries,
//     answer read requests whose index is applied, call Advance, and
//     compact the log if enough of it has been applied.
//
// A round that takes SlowRoundDebug or longer is logged ("slow raft
// round", at warn from SlowRound) with what steps 4 and 3+7 took and
// carried, and Config.Observer sees every persist and apply.
//
// A failure to persist stops the host (Config.OnFatal): raft has already
// taken the Ready, so the round cannot be retried, and nothing that was not
// persisted has been acknowledged to anyone. A restart recovers. This
// includes Pebble's own fatal errors (a write-ahead log that cannot be
// written or synced, as on a full disk), which its logger raises as a
// panic: storage.RecoverFatal turns it into an error around the whole work
// of a round (the engine's writes and the state machines') and in the
// entry points that write outside rounds (OpenGroup, RemoveGroup)
// (fulldisk_test.go).
//
// Raft panics where its log contradicts what this member acknowledged
// before: a leader's commit index beyond its last entry, a committed entry
// replaced, a hard state committing past the log. That happens when
// persisted entries were lost behind the engine's back (a truncated
// write-ahead log, a corrupt file), so a restart would panic again. The
// round (and OpenGroup) recovers those panics, and Pebble's corruption
// errors that raft panics with, and stops the host with ErrCorruptState
// through OnFatal (IsCorrupt tells it apart from a failure to write;
// corrupt_test.go). Any other panic is a bug and is not recovered.
//
// # Applying entries
//
// Committed entries are handed to StateMachine.Apply in index order, in
// runs between conf changes, with an indexed batch. The engine writes the
// applied index (with the configuration in force) into the same batch and
// commits it, so the state machine's writes and the applied index are
// durable together or not at all; that batch is not synced (the log it was
// derived from is), and Pebble recovers a prefix of its write-ahead log, so
// a crash loses a suffix of applications, which are re-delivered on
// restart. No command's effect is applied twice.
//
// Each proposal carries an 8-byte id in front of its command. When the
// entry is applied on the host that proposed it, the waiting Propose call
// gets the state machine's result. A proposal raft refuses, or whose log
// position another entry holds when that position is applied, fails with
// ErrProposalDropped (it was not applied). One whose caller gave up, whose
// entry a snapshot covered, or whose uncommitted entry another leader's
// replaced in this host's log, ends with ErrOutcomeUnknown: a replaced
// entry can still be committed, by a leader elected from the members that
// hold it.
//
// # Proposal batching
//
// Every round a leader appends costs an fsync on it and on each follower,
// a message each way and the wake-ups of the goroutines involved,
// whatever it carries. Proposals that arrive one by one would each pay for
// a round, so a leader keeps at most one batch of proposals in flight, as
// TCP's Nagle algorithm keeps one small segment:
//
//  1. Only a leader (as of the messages its round just stepped) of a group
//     with more than one voter holds proposals.
//  2. It holds the queued proposals while the last batch it appended is
//     not committed (its commit index is below that batch's last entry;
//     nothing is in flight at the start of a term); those that arrive
//     meanwhile do not wake the worker. The round that steps the answers
//     committing the batch appends every held proposal together, in one
//     MsgProp (one per MaxSizePerMsg), so raft sends each follower one
//     MsgApp for all of them.
//  3. A tick appends them whatever is in flight, so that a proposal waits
//     one tick at most (with no quorum, for instance).
//  4. So does a queue of 256 proposals, or of MaxSizePerMsg bytes.
//
// A proposal that finds nothing in flight is appended at once, so a single
// writer's latency is unchanged; under load the batches grow to what
// arrives during one commit. Config.DisableProposalBatching turns the
// holding off (the proposals of one round still go as one MsgProp per
// MaxSizePerMsg bytes).
//
// # Snapshots
//
// Raft asks Storage.Snapshot for metadata only. The sender takes a Pebble
// snapshot, reads the group's applied state from it (which may be newer
// than what raft asked for; the follower then acknowledges a higher index)
// and streams the state machine's data from it in chunks on a stream of
// its own (Transport.SendSnapshot). The receiver spools the data to a file
// and fsyncs it before raft sees the MsgSnap; when raft accepts it, step 4
// persists a restore marker with the new log position and drops the old
// log, step 7 restores the state machine from the file and then records
// the applied state and deletes the marker. A crash in between finds the marker at the next open
// and restores again.
//
// # Lease reads
//
// Group.ReadIndex returns once this member has applied everything
// committed when it was called. Without a lease (Config.LeaseReads off)
// each round's reads share one raft read index: the leader sends a
// heartbeat round and waits for a quorum's answers before it knows its
// commit index is the latest. With Config.LeaseReads a leader skips that
// round while it holds a lease (lease.go; its comments cite these steps):
//
//  1. A leader that asks raft for a read index notes the time T it asked
//     (Config.Clock). When raft confirms it (a quorum answered the
//     heartbeats sent at or after T), the leader holds a lease until
//     T + d, d = (ElectionTicks-2) × TickInterval × 0.9, in the term it
//     asked in.
//  2. Under the lease a read waits for the leader's commit index, with no
//     round. A lease is taken only once the leader has committed its
//     term's first entry, so that index covers every write any leader
//     acknowledged. (Every read of a leader waits for that entry too:
//     raft confirms the read index of a one-voter group at once, with a
//     commit index that a restart may have set back, as it is written
//     without a sync.)
//  3. A read in the second half of the lease also sends a read index
//     (at most one per quarter of a lease) whose confirmation extends it:
//     a steady read load never waits for a round.
//  4. A leader serves no read under its lease while a leadership transfer
//     is under way, and one that sends MsgTimeoutNow holds no lease for
//     the rest of that term, even if the transfer fails: its
//     receiver may campaign at any later moment of the term, and voters
//     grant a transfer's campaign even within a lease.
//  5. An applied conf change ends the lease: the quorum that confirmed it
//     may be none of the new configuration. A read index sent before the
//     change extends nothing.
//  6. Every member, whatever its LeaseReads, answers no vote request
//     (but a transfer's) for g = (ElectionTicks-1) × TickInterval after
//     it last stepped a heartbeat, an append or a snapshot, and after it
//     opened a group it had state for (a restart: it may have promised a
//     leader before, and remembers nothing of it) or joins one. A fresh
//     bootstrap promised nobody anything.
//
// Why no other leader is elected before T + d: every member of the quorum
// of step 1 stepped a heartbeat of this leader at or after T, so by 6 it
// grants no vote before T + g by its own clock, even if it restarts
// meanwhile; any quorum that elects another leader holds one of them. The
// refusal is measured on the clock, not in raft's ticks: raft's own check
// (CheckQuorum's lease, which this engine always enables) counts ticks,
// and a tick that fired before the heartbeat may be counted after it (the
// ticker's buffer, a tick flag still pending). d is g less a tick, less
// 10%: the assumptions are that the members' clocks run at rates within
// 10% of each other, that all hosts of a group have the same ElectionTicks
// and TickInterval, and that the lease's clock does not stop while the
// others' run (CLOCK_BOOTTIME goes on through a suspend; a virtual
// machine paused by its host without its clock being told is outside
// it). A leader that stops (SIGSTOP, a long pause) and resumes reads its
// clock again before it serves a read, and finds the lease over. Read
// indexes on followers always go to the leader. Elections go on as
// before: a member campaigns after ElectionTicks to 2×ElectionTicks ticks
// without a leader, nearly always past g; a campaign that comes sooner is
// refused and tried again.
//
// # Log compaction
//
// Each member truncates its own log after it applies, by either of two
// rules, whichever truncates more:
//
//  1. By count: when more than LogCompactionThreshold applied entries are
//     in the log, through the applied index minus LogCompactionKeep.
//  2. By bytes, counted from the entries applied since the group was
//     opened: on a leader, when its applied entries in the log hold more
//     than LogCompactionBytes, through the first batch's last index that
//     leaves at most LogCompactionKeepBytes of them, but no further than every
//     follower's match index (a follower already being sent a snapshot
//     aside, a follower that is down not) until its log holds 8 times
//     LogCompactionBytes; on a follower, which cannot see the others'
//     progress and may be the next leader, only past 8 times
//     LogCompactionBytes, leaving about LogCompactionBytes.
//
// The byte rule bounds a log of large entries (a bucket's copy, big
// writes) in bytes: the count rule alone kept up to 10,000 of them. A
// member down for a while catches up from the leader's log as long as
// neither rule has truncated past what it has (the count rule does not
// wait for it); otherwise by snapshot.
//
// # Sideloaded entries
//
// An entry whose data holds Config.SideloadMinBytes or more (256 KiB by
// default: a bucket copy's chunks of about 1 MiB, a very large batch) is
// stored as CockroachDB stores its AddSSTable commands: its data in a
// file of its own, SideloadDir/<group>/i<index>.t<term>, and in the
// database only a header: a zero byte (which no protobuf encoding starts
// with), the data's length and CRC-32C, and the entry's encoding without
// its data. Kept in the database, megabytes of data an entry went through
// the write-ahead log and filled memtables; those flushed tables spanned
// the whole replicaset's keys, and each compaction of them rewrote the
// tables a copy had just ingested (docs/benchmarks.md, "Level 0
// compacted less often").
//
//  1. Step 4 writes and syncs the round's files, then syncs their
//     directory, before it commits the batch that names them: a header is
//     never durable without its data.
//  2. Raft and the transport see whole entries: the entry cache holds
//     them as appended, and a read from the database reads the file back
//     and checks its length and checksum. A file lost or damaged is
//     ErrCorruptState, as a log entry that does not decode is.
//  3. A file goes with its entry: when the log is truncated through it,
//     when a new leader's entries replace it (a new entry of the same
//     index and term is the same entry and keeps the file), when a
//     snapshot replaces the log, and with its group (RemoveGroup with
//     destroy). A file a failed round wrote before its batch committed is
//     named by no header; opening the group removes the files the log
//     cannot hold (at or below its truncated index, above its last).
//
// A host must keep its SideloadDir: with it empty, a log that holds a
// sideloaded entry is corrupt, as it is to a build from before sideloaded
// entries.
//
// # Transport
//
// The engine talks to its peers through the Transport interface and
// imports no network library. Subpackage grpcnet is the production
// transport: one bidi stream per peer node for every group's messages, fed
// from a bounded queue that drops on overflow (raft retransmits), batched
// up to its MaxBatchBytes, reconnecting with backoff and looking the peer's
// address up again each time. Subpackage memnet is the in-memory network
// for tests: its ordinary messages are reproducible from a seed, its
// snapshots are not (see its documentation).
//
// # Failpoints
//
// Built with the "failpoints" tag, Config.Failpoints runs test hooks at
// raftBeforeSave, raftAfterSave, raftBeforeSend and raftBeforeApplySnapshot;
// a hook's error stops the host there as a crash would. One more,
// raftDefectLeaseUnchecked, is a deliberate defect for the robustness
// test: a leader serves lease reads past its lease's end. Release builds
// compile them to nothing.
package multiraft
