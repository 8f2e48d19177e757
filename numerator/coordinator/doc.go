// Package coordinator lets numerator masters in several datacenters take
// turns on one state (N7). It keeps the last consistent state's location and
// the write-lock holder (master name, lock time, ticket). A master that gets
// the lock copies the state, runs, and reports status + ticket + the new
// state's location; the report is accepted, and the lock released, only if
// the ticket is still current. A holder past its lock timeout is dropped and
// its later report refused as stale.
//
// It owns the Coordinator interface, a master's turn (RunMaster: wait for
// the lock, renew it while the run works, report the result or the
// failure), the lock/state rules shared by the document-based backends
// (local directory, ZooKeeper), those backends, and the cluster backend
// ("shardkit": one lease of the cluster's group 0, its value the state
// record, written only by a release with the current ticket). The conformance suite every backend must pass is in coordtest.
//
// It must never accept a report whose ticket is not the current holder's,
// never move the recorded state to an older ticket, and never keep package
// state: clocks and loggers are passed in.
package coordinator
