package multiraft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrCorruptState: the stored raft state is corrupt or lost: a record
// cannot be decoded, or raft found that the log lacks entries this member
// had acknowledged (see recoverRound). A restart finds the same state.
var ErrCorruptState = errors.New("multiraft: corrupt stored raft state")

// logPosition names one log entry.
type logPosition struct {
	Index uint64
	Term  uint64
}

// appliedState is what the engine persists, atomically with the state
// machine's own writes, after applying entries: the position of the last
// applied entry and the configuration in force at that entry.
type appliedState struct {
	logPosition
	ConfState *raftpb.ConfState
}

// restoreMarker records a snapshot that was accepted by Raft and must be
// restored into the state machine before the group runs again.
type restoreMarker struct {
	appliedState
	// File is the snapshot's spool file name, relative to the snapshot dir.
	File string
}

const codecVersion = 1

func encodePosition(p logPosition) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64)
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, p.Index)
	return binary.AppendUvarint(b, p.Term)
}

func decodePosition(b []byte) (logPosition, []byte, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return logPosition{}, nil, fmt.Errorf("%w: unknown record version", ErrCorruptState)
	}
	b = b[1:]
	idx, n := binary.Uvarint(b)
	if n <= 0 {
		return logPosition{}, nil, fmt.Errorf("%w: bad index", ErrCorruptState)
	}
	b = b[n:]
	term, n := binary.Uvarint(b)
	if n <= 0 {
		return logPosition{}, nil, fmt.Errorf("%w: bad term", ErrCorruptState)
	}
	return logPosition{Index: idx, Term: term}, b[n:], nil
}

func encodeApplied(a appliedState) ([]byte, error) {
	cs, err := proto.Marshal(a.ConfState)
	if err != nil {
		return nil, err
	}
	return append(encodePosition(a.logPosition), cs...), nil
}

func decodeApplied(b []byte) (appliedState, error) {
	p, rest, err := decodePosition(b)
	if err != nil {
		return appliedState{}, err
	}
	cs := &raftpb.ConfState{}
	if err := proto.Unmarshal(rest, cs); err != nil {
		return appliedState{}, fmt.Errorf("%w: conf state: %w", ErrCorruptState, err)
	}
	return appliedState{logPosition: p, ConfState: cs}, nil
}

func encodeMarker(m restoreMarker) ([]byte, error) {
	cs, err := proto.Marshal(m.ConfState)
	if err != nil {
		return nil, err
	}
	b := encodePosition(m.logPosition)
	b = binary.AppendUvarint(b, uint64(len(m.File)))
	b = append(b, m.File...)
	return append(b, cs...), nil
}

func decodeMarker(b []byte) (restoreMarker, error) {
	p, rest, err := decodePosition(b)
	if err != nil {
		return restoreMarker{}, err
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return restoreMarker{}, fmt.Errorf("%w: bad snapshot file name", ErrCorruptState)
	}
	rest = rest[k:]
	file := string(rest[:n])
	cs := &raftpb.ConfState{}
	if err := proto.Unmarshal(rest[n:], cs); err != nil {
		return restoreMarker{}, fmt.Errorf("%w: conf state: %w", ErrCorruptState, err)
	}
	return restoreMarker{appliedState: appliedState{logPosition: p, ConfState: cs}, File: file}, nil
}

// Proposal payloads. A normal entry's data is an 8-byte big-endian proposal
// id followed by the command; the id lets the proposing host find the
// waiter to hand the result to. Id 0 means nobody waits. An entry with no
// data at all is raft's own empty entry (a new leader's first entry).
const proposalIDLen = 8

func encodeProposal(id uint64, cmd []byte) []byte {
	b := make([]byte, proposalIDLen, proposalIDLen+len(cmd))
	binary.BigEndian.PutUint64(b, id)
	return append(b, cmd...)
}

func decodeProposal(data []byte) (id uint64, cmd []byte, err error) {
	if len(data) < proposalIDLen {
		return 0, nil, fmt.Errorf("%w: proposal of %d bytes is shorter than its id", ErrCorruptState, len(data))
	}
	return binary.BigEndian.Uint64(data), data[proposalIDLen:], nil
}

// LastCommandIndex returns the index of the last entry at or below
// applied (the group's applied index, AppliedIndex) that reached group
// g's state machine, as r holds g's log: the entries above it up to
// applied, a new leader's empty entries and configuration changes,
// changed none of its data. So members stopped at applied indexes a <= b
// hold the same state machine data when the member at b has its last
// command at or below a. Where the log does not show an entry (it was
// compacted, or a snapshot put the member past it), the entry is taken
// as one that did: the answer is never lower than what it can show.
func LastCommandIndex(r pebble.Reader, g GroupID, applied uint64) (uint64, error) {
	if applied == 0 {
		return 0, nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: logKey(g, 0), UpperBound: logKey(g, applied+1)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	want := applied
	for ok := it.Last(); ok && want > 0; ok = it.Prev() {
		e, _, sideloaded, err := decodeStoredEntry(it.Value())
		if err != nil {
			return 0, fmt.Errorf("%w: group %d: log entry at %x: %w", ErrCorruptState, g, it.Key(), err)
		}
		if e.GetIndex() != want {
			break // a gap: entry want is not in the log
		}
		if e.GetType() == raftpb.EntryType_EntryNormal && (sideloaded || len(e.GetData()) > 0) {
			return want, nil
		}
		want--
	}
	return want, it.Error()
}

// AppliedIndex returns the index of the last entry group g applied, as r
// holds it (0: none yet): for checks of a stopped instance's database,
// which compare what members hold at one index.
func AppliedIndex(r pebble.Reader, g GroupID) (uint64, error) {
	v, closer, err := r.Get(groupKey(g, suffixApplied))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	as, err := decodeApplied(v)
	if err != nil {
		return 0, fmt.Errorf("group %d: %w", g, err)
	}
	return as.Index, nil
}
