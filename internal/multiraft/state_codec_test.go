package multiraft

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestAppliedStateRoundTrip(t *testing.T) {
	in := appliedState{
		logPosition: logPosition{Index: 1 << 40, Term: 7},
		ConfState:   &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}},
	}
	b, err := encodeApplied(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeApplied(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.logPosition != in.logPosition || !proto.Equal(out.ConfState, in.ConfState) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

func TestRestoreMarkerRoundTrip(t *testing.T) {
	in := restoreMarker{
		appliedState: appliedState{
			logPosition: logPosition{Index: 99, Term: 3},
			ConfState:   &raftpb.ConfState{Voters: []uint64{1}, VotersOutgoing: []uint64{2}},
		},
		File: "g7-i99-t3-abc.snap",
	}
	b, err := encodeMarker(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeMarker(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.logPosition != in.logPosition || out.File != in.File || !proto.Equal(out.ConfState, in.ConfState) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

func TestProposalRoundTrip(t *testing.T) {
	id, cmd, err := decodeProposal(encodeProposal(42, []byte("put x")))
	if err != nil || id != 42 || !bytes.Equal(cmd, []byte("put x")) {
		t.Fatalf("got id=%d cmd=%q err=%v", id, cmd, err)
	}
	if _, _, err := decodeProposal([]byte{1, 2}); err == nil {
		t.Fatal("short proposal decoded without error")
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {}, {9}, {codecVersion}, {codecVersion, 0x80}, {codecVersion, 1, 0x80}} {
		if _, err := decodeApplied(b); err == nil {
			t.Errorf("decodeApplied(%x) succeeded", b)
		}
		if _, err := decodeMarker(b); err == nil {
			t.Errorf("decodeMarker(%x) succeeded", b)
		}
	}
}

// The engine's records are read back from disk, which may be damaged: the
// decoders must refuse garbage without panicking, and accept what they wrote.
func FuzzDecodeState(f *testing.F) {
	a, _ := encodeApplied(appliedState{logPosition{5, 2}, &raftpb.ConfState{Voters: []uint64{1, 2}}})
	m, _ := encodeMarker(restoreMarker{appliedState{logPosition{5, 2}, &raftpb.ConfState{}}, "f.snap"})
	f.Add(a)
	f.Add(m)
	f.Add(encodePosition(logPosition{1, 1}))
	f.Add([]byte{codecVersion, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := decodeApplied(b); err == nil {
			again, err := encodeApplied(s)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if _, err := decodeApplied(again); err != nil {
				t.Fatalf("decode of re-encoded applied state: %v", err)
			}
		}
		if mk, err := decodeMarker(b); err == nil {
			again, err := encodeMarker(mk)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if back, err := decodeMarker(again); err != nil || back.File != mk.File {
				t.Fatalf("decode of re-encoded marker: %v", err)
			}
		}
		_, _, _ = decodePosition(b)
		_, _, _ = decodeProposal(b)
	})
}

func TestKeySpans(t *testing.T) {
	for _, g := range []GroupID{0, 1, 255, 256, ^GroupID(0) - 1, ^GroupID(0)} {
		lo, hi := groupSpan(g)
		for _, k := range [][]byte{groupKey(g, suffixHardState), logKey(g, 0), logKey(g, ^uint64(0)), groupKey(g, suffixRestoring)} {
			if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
				t.Fatalf("group %d: key %x outside its span [%x, %x)", g, k, lo, hi)
			}
		}
		if g != ^GroupID(0) {
			if k := groupKey(g+1, suffixApplied); bytes.Compare(k, hi) < 0 {
				t.Fatalf("group %d: next group's key %x inside its span", g, k)
			}
		}
		end := logSpanEnd(g)
		if bytes.Compare(logKey(g, ^uint64(0)), end) >= 0 {
			t.Fatalf("group %d: last log key not below the log span end", g)
		}
		for _, s := range []string{suffixHardState, suffixApplied, suffixTruncated, suffixRestoring} {
			if k := groupKey(g, s); bytes.Compare(k, logKey(g, 0)) >= 0 && bytes.Compare(k, end) < 0 {
				t.Fatalf("group %d: %s key inside the log span", g, s)
			}
		}
	}
}
