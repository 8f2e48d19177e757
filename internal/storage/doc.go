// Package storage owns the instance's single Pebble database: how it is
// opened and tuned, how its damage (corrupt or missing files, a lock held
// by another process) is recognized and reported, and (as the data layer
// lands) the keyspaces. Keys and stored tuples are encoded by the public
// package tuple (its frozen key and tuple codecs), which the client shares.
//
// It must never know about Raft, the network or the cluster: the rooms
// above decide what to store; this package only says how.
package storage
