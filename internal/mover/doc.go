// Package mover moves buckets between replicasets (seed 001's resharding,
// at bucket granularity; docs/design/moves.md): the rebalancer decides
// which buckets go where by the replicasets' weights, and the driver steps
// each move through its phases, on the group-0 leader only.
//
// A move is recorded in group 0 first (StartMove), and every step after is
// an entry in some Raft log: the destination prepares (RECEIVING), the
// source freezes the bucket (SENDING), group 0 switches the bucket to the
// destination (PREPARE -> COPY: routers follow), the destination copies
// the source's tuples and becomes ACTIVE, group 0 marks the cleanup, the
// source deletes the bucket's data (GARBAGE), group 0 forgets the move.
// The driver steps moves in batches (driver.go): the moves of one route
// in the same phase take each step together, one log entry and one RPC
// for all of them, each bucket's step still checked and answered on its
// own, so a batch costs about what one move costs; only the copy is split,
// into concurrent streams of at most CopyStreamBuckets buckets. The
// rebalancer starts batches of up to a third of the smaller quota (at
// least BatchSize), so a large rebalance switches in a few entries and
// copies over many streams. The driver remembers
// nothing: a new group-0 leader reads the moves in progress from group 0
// and resumes each from its recorded phase, every step being idempotent
// (a repeated step is a no-op at apply). Writes to a
// bucket are refused only between SENDING and the switch (two consensus
// steps: the destination prepared before the source froze), bounded by
// Config.SwitchTimeout: past it the move is aborted (PREPARE -> ABORTING),
// even one whose prepare got through late,
// which group 0 allows only before the switch. Every call of a started
// move's steps but the copy (a replicaset's SetBuckets, group 0's move
// steps) is bounded by Config.StepTimeout, so that a lost answer makes the
// step run again rather than hold its moves.
//
// It owns these decisions and steps. It reaches replicasets only over RPC
// (rspb.BucketService on their leaders), never their storage, and never
// writes group 0 but through proposals that group 0 validates.
package mover
