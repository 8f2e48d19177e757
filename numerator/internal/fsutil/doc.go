// Package fsutil holds the file-system helpers that the numerator and its
// coordinator share: syncing a directory after a rename, and working
// directories owned by a live process (a lock file held with flock), which
// a later process recognises as a dead run's leftovers and removes.
//
// It owns only these helpers; it must never know about tables, records or
// coordinators, and never keep package state.
package fsutil
