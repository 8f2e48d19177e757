// Package storage owns the instance's single Pebble database: how it is
// opened and tuned, how its damage (corrupt or missing files, a lock held
// by another process) is recognized and reported, and (as the data layer lands) the keyspaces, the
// order-preserving key codec and the tuple codec.
//
// It must never know about Raft, the network or the cluster: the rooms
// above decide what to store; this package only says how.
package storage
