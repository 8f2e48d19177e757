// Package retry is shardkit's one retry policy: how long to wait before
// trying again (Backoff), how to wait so that the caller's context ends
// the wait (Sleep), and the loop that follows redirects and retries what
// is safe to retry within a number of attempts and the caller's deadline
// (Policy). The public client and every internal room that finds a leader
// or retries a call use it, so each decision is made here once.
//
// Which layer waits out a bucket's move. A write that meets a bucket in
// its move's switch (refused with REASON_BUCKET_MOVING) is waited out by
// the router alone: every instance routes (the client's call always
// reaches a router, which serves it from its own replicaset or forwards
// it), and the router learns the switch's end first, from group 0, so it
// waits with Policy.SwitchFor (the router's MoveWait) without spending
// attempts. The storage answers at once (it never sleeps on a switch), and
// the client follows redirects and retries unavailability but treats a
// BUCKET_MOVING that still reaches it (the router waited its MoveWait, or
// a procedure wrote a moving bucket) as one more counted attempt: it does
// not wait the switch out a second time.
//
// It owns no state beyond the values callers make, does no I/O and
// imports only the standard library: the public client may import it, and
// it must never import shardkit's internal packages or any room's types.
package retry
