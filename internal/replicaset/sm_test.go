package replicaset

import (
	"errors"
	"testing"

	"github.com/shardkit/shardkit/internal/multiraft"
)

func TestBarrierReportsItsIndexAndGarbageIsRefused(t *testing.T) {
	sm := New(7)
	out, err := sm.Apply(nil, []multiraft.Entry{{Index: 41, Cmd: BarrierCommand()}, {Index: 42, Cmd: []byte{9, 9}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := out[0].(BarrierResult); !ok || r.Index != 41 {
		t.Fatalf("barrier result %v, want index 41", out[0])
	}
	if err, ok := out[1].(error); !ok || !errors.Is(err, ErrBadCommand) {
		t.Fatalf("garbage command result %v, want ErrBadCommand", out[1])
	}
}
