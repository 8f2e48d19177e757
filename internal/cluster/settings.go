package cluster

import (
	"time"
)

// Timeouts bound the calls an instance makes on its own (not the ones a
// user makes). They are not flags: the defaults suit any cluster on one
// network; tests shorten them. docs/operations.md lists them.
type Timeouts struct {
	// PeerCall bounds one call to another instance that changes something:
	// asking for a target grade, a replicaset group change, the sentinel's
	// re-ask for Online. Default 5s.
	PeerCall time.Duration
	// Probe bounds one quick question to another instance: a discovery
	// round, its progress, a sharding push, the read index behind status.
	// Default 2s.
	Probe time.Duration
	// LeaderWait is how long a call that only the group-0 leader serves
	// waits for a leader to be known before answering Unavailable.
	// Default 3s.
	LeaderWait time.Duration
	// Activity bounds one activity of the governor (K12), including the
	// read index a new leader makes before governing. Default 10s.
	Activity time.Duration
	// Join bounds one raft_join attempt of a joining instance. Default 10s.
	Join time.Duration
	// ExpelWait is how long an expel waits for the current grade Expelled
	// when the request gives no timeout. Default 60s.
	ExpelWait time.Duration
	// LeaderRecheck is how often the governor asks every replicaset who
	// leads it: the backstop for a new leader's own report
	// (ReportReplicasetLeader) that never came. Default 3s.
	LeaderRecheck time.Duration
}

// DefaultTimeouts are the Timeouts a zero field takes.
var DefaultTimeouts = Timeouts{
	PeerCall:   5 * time.Second,
	Probe:      2 * time.Second,
	LeaderWait: 3 * time.Second,
	Activity:   10 * time.Second,
	Join:       10 * time.Second,
	ExpelWait:  60 * time.Second,

	LeaderRecheck: 3 * time.Second,
}

func (t *Timeouts) fill() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.PeerCall, DefaultTimeouts.PeerCall)
	def(&t.Probe, DefaultTimeouts.Probe)
	def(&t.LeaderWait, DefaultTimeouts.LeaderWait)
	def(&t.Activity, DefaultTimeouts.Activity)
	def(&t.Join, DefaultTimeouts.Join)
	def(&t.ExpelWait, DefaultTimeouts.ExpelWait)
	def(&t.LeaderRecheck, DefaultTimeouts.LeaderRecheck)
}

// Clock tells the time. The leader's clock stamps group-0 commands (lease
// expiry is judged by it), and the governor's sentinel measures silence
// with it; tests pass a fake.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
