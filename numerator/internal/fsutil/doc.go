// Package fsutil holds the file-system helpers that the numerator and its
// coordinator share: syncing a directory after a rename.
//
// It owns only these helpers; it must never know about tables, records or
// coordinators, and never keep package state.
package fsutil
