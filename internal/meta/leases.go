package meta

import (
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// MaxLeaseTTLMs bounds a lease's time to live (one hour).
const MaxLeaseTTLMs = 3600 * 1000

// MaxLeaseValueBytes bounds the value kept with a lease.
const MaxLeaseValueBytes = 64 << 10

// Leases with fencing tickets. Time is the leader-stamped clock of group 0
// (never a replica's own), so every member judges expiry the same way.
// A lease's record is kept after release, so its ticket keeps growing.

func checkLeaseArgs(name, holder string, ttl int64, needTTL bool) *Refusal {
	switch {
	case name == "":
		return refuse(CodeInvalid, "lease name is empty")
	case holder == "":
		return refuse(CodeInvalid, "lease holder is empty")
	case needTTL && (ttl <= 0 || ttl > MaxLeaseTTLMs):
		return refuse(CodeInvalid, "lease ttl %dms is outside (0, %dms]", ttl, MaxLeaseTTLMs)
	}
	return nil
}

// LeaseHeld reports whether l is held at time now.
func LeaseHeld(l *metapb.Lease, now int64) bool {
	return l != nil && l.GetHolder() != "" && l.GetExpiresUnixMs() > now
}

func (t *txn) acquireLease(c *metapb.AcquireLease) Result {
	if err := checkLeaseArgs(c.GetName(), c.GetHolder(), c.GetTtlMs(), true); err != nil {
		return Result{Err: err}
	}
	old := t.s.Leases[c.GetName()]
	switch {
	case LeaseHeld(old, t.now) && old.GetHolder() != c.GetHolder():
		return Result{Lease: old, Granted: false}
	case LeaseHeld(old, t.now):
		// The holder asks again: same ticket, new expiry.
		n := proto.CloneOf(old)
		n.ExpiresUnixMs = t.now + c.GetTtlMs()
		t.putLease(n)
		return Result{Lease: n, Granted: true}
	}
	n := &metapb.Lease{
		Name:          c.GetName(),
		Holder:        c.GetHolder(),
		Ticket:        old.GetTicket() + 1,
		GrantedUnixMs: t.now,
		ExpiresUnixMs: t.now + c.GetTtlMs(),
		Value:         old.GetValue(),
	}
	t.putLease(n)
	return Result{Lease: n, Granted: true}
}

func (t *txn) renewLease(c *metapb.RenewLease) Result {
	if err := checkLeaseArgs(c.GetName(), c.GetHolder(), c.GetTtlMs(), true); err != nil {
		return Result{Err: err}
	}
	old := t.s.Leases[c.GetName()]
	if !LeaseHeld(old, t.now) || old.GetHolder() != c.GetHolder() || old.GetTicket() != c.GetTicket() {
		return Result{Lease: old, Granted: false}
	}
	n := proto.CloneOf(old)
	n.ExpiresUnixMs = t.now + c.GetTtlMs()
	t.putLease(n)
	return Result{Lease: n, Granted: true}
}

func (t *txn) releaseLease(c *metapb.ReleaseLease) Result {
	if err := checkLeaseArgs(c.GetName(), c.GetHolder(), 0, false); err != nil {
		return Result{Err: err}
	}
	if len(c.GetValue()) > MaxLeaseValueBytes {
		return Result{Err: refuse(CodeInvalid, "lease value of %d bytes exceeds %d", len(c.GetValue()), MaxLeaseValueBytes)}
	}
	old := t.s.Leases[c.GetName()]
	if old == nil || old.GetHolder() != c.GetHolder() || old.GetTicket() != c.GetTicket() {
		return Result{Lease: old, Granted: false}
	}
	if c.GetSetValue() && !LeaseHeld(old, t.now) {
		return Result{Lease: old, Granted: false} // expired: its holder may not write
	}
	n := proto.CloneOf(old)
	n.Holder = ""
	n.ExpiresUnixMs = t.now
	if c.GetSetValue() {
		n.Value = c.GetValue()
	}
	t.putLease(n)
	return Result{Lease: n, Granted: true}
}
