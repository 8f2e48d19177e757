package multiraft

import (
	"encoding/binary"

	"github.com/shardkit/shardkit/internal/storage"
)

// Storage keys of the engine. Every key of a group starts with
// "raft/" + 8-byte big-endian group id + "/", so one group's keys are one
// contiguous range and log entries sort by index:
//
//	raft/<group>/log/<index>   one raftpb.Entry per index (proto encoding),
//	                           or a sideloaded entry's header (doc.go, "Sideloaded entries")
//	raft/<group>/hardstate     raftpb.HardState (proto encoding)
//	raft/<group>/applied       appliedState: index, term and ConfState of the last applied entry
//	raft/<group>/truncated     logPosition: index and term of the last entry removed from the log
//	raft/<group>/restoring     restoreMarker: a snapshot whose restore has not finished yet
//
// The state machines of the layers above keep their own keys outside the
// "raft/" prefix; the engine never reads or writes them.

const keyPrefix = storage.PrefixRaft

const (
	suffixLog       = "/log/"
	suffixHardState = "/hardstate"
	suffixApplied   = "/applied"
	suffixTruncated = "/truncated"
	suffixRestoring = "/restoring"
)

func groupPrefix(g GroupID) []byte {
	k := make([]byte, 0, len(keyPrefix)+8)
	k = append(k, keyPrefix...)
	return binary.BigEndian.AppendUint64(k, uint64(g))
}

func groupKey(g GroupID, suffix string) []byte {
	return append(groupPrefix(g), suffix...)
}

func logKey(g GroupID, index uint64) []byte {
	return appendLogKey(make([]byte, 0, logKeyLen), g, index)
}

// logKeyLen is the length of every log entry's key.
const logKeyLen = len(keyPrefix) + 8 + len(suffixLog) + 8

func appendLogKey(k []byte, g GroupID, index uint64) []byte {
	k = append(k, keyPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(g))
	k = append(k, suffixLog...)
	return binary.BigEndian.AppendUint64(k, index)
}

// groupSpan returns the [start, end) range of every key of group g.
func groupSpan(g GroupID) (start, end []byte) {
	start = groupPrefix(g)
	return start, storage.PrefixEnd(start)
}

// logSpanEnd is the exclusive upper bound of group g's log keys.
func logSpanEnd(g GroupID) []byte {
	return storage.PrefixEnd(groupKey(g, suffixLog))
}
