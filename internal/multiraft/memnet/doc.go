// Package memnet is an in-memory network for multiraft tests. Messages are
// marshalled at Send and delivered only when the test calls Deliver, so the
// test decides when time passes. Every fault is drawn from one seeded
// random source: drop, delay (which also reorders), cut links, partitions,
// and faults that hit only some groups, so that several groups sharing the
// same nodes can fare differently.
//
// With hosts in manual mode (multiraft.Config.ManualProcessing and
// ManualTicks) and a driver that steps them in a fixed order, the ordinary
// messages of a run are reproducible from its seed, up to the timing of
// client goroutines. Snapshots are not: a host streams them from goroutines
// of its own, SendSnapshot hands them to the receiver at once instead of at
// a Deliver step, and its drop decision draws from the same random source,
// so a snapshot shifts the faults drawn for later messages by when it
// happens to run.
//
// It must never be used outside tests.
package memnet
