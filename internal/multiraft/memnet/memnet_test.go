package memnet

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// recorder is a Handler that remembers what it got.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) HandleRaftMessage(g multiraft.GroupID, m *raftpb.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf("g%d:%d->%d:%d", g, m.GetFrom(), m.GetTo(), m.GetIndex()))
}

func (r *recorder) HandleRaftSnapshot(_ context.Context, g multiraft.GroupID, m *raftpb.Message, body io.Reader) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf("snap g%d:%d->%d %s", g, m.GetFrom(), m.GetTo(), b))
	return nil
}

func (r *recorder) ReportUnreachable(multiraft.NodeID) {}

func msg(from, to, index uint64) multiraft.OutboundMessage {
	return multiraft.OutboundMessage{Group: 1, Msg: &raftpb.Message{
		Type: raftpb.MessageType_MsgApp.Enum(), From: &from, To: &to, Index: &index,
	}}
}

// run sends 50 messages from 1 to 2 under delay and drop, and returns the
// order in which node 2 got them.
func run(seed uint64) []string {
	n := New(seed)
	r := &recorder{}
	n.Register(1, &recorder{})
	n.Register(2, r)
	n.SetDelay(0, 5)
	n.SetDropRate(0.2)
	ep := n.Endpoint(1)
	for i := range 50 {
		ep.Send([]multiraft.OutboundMessage{msg(1, 2, uint64(i))})
		n.Deliver()
	}
	for range 10 {
		n.Deliver()
	}
	return r.got
}

func TestSameSeedSameDeliveries(t *testing.T) {
	a, b := run(7), run(7)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different deliveries:\n%v\n%v", a, b)
	}
	if c := run(8); slices.Equal(a, c) {
		t.Fatalf("different seeds gave identical deliveries: faults are not drawn from the seed")
	}
	if len(a) == 0 || len(a) == 50 {
		t.Fatalf("%d of 50 delivered at 20%% drop rate", len(a))
	}
	sorted := slices.Clone(a)
	slices.SortFunc(sorted, func(x, y string) int {
		var i, j int
		if _, err := fmt.Sscanf(x[len("g1:1->2:"):], "%d", &i); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(y[len("g1:1->2:"):], "%d", &j); err != nil {
			t.Fatal(err)
		}
		return i - j
	})
	if slices.Equal(a, sorted) {
		t.Fatalf("random delays did not reorder any message")
	}
}

func TestPartitionsAndGroupIsolation(t *testing.T) {
	n := New(1)
	r2, r3 := &recorder{}, &recorder{}
	n.Register(1, &recorder{})
	n.Register(2, r2)
	n.Register(3, r3)
	ep := n.Endpoint(1)
	send := func(g multiraft.GroupID, to uint64) {
		m := msg(1, to, 0)
		m.Group = g
		ep.Send([]multiraft.OutboundMessage{m})
		n.Deliver()
	}
	n.Partition([]multiraft.NodeID{1}, []multiraft.NodeID{2})
	send(1, 2) // cut
	send(1, 3) // node 3 is in no side: passes
	n.Heal()
	n.IsolateInGroup(2, 3)
	send(2, 3) // group 2 cut at node 3
	send(1, 3) // group 1 passes
	n.Heal()
	send(1, 2)
	if want := []string{"g1:1->2:0"}; !slices.Equal(r2.got, want) {
		t.Fatalf("node 2 got %v, want %v", r2.got, want)
	}
	if want := []string{"g1:1->3:0", "g1:1->3:0"}; !slices.Equal(r3.got, want) {
		t.Fatalf("node 3 got %v, want %v", r3.got, want)
	}
	// Snapshots obey cuts too.
	n.Isolate(2)
	write := func(w io.Writer) error { _, err := w.Write([]byte("data")); return err }
	m := msg(1, 2, 9)
	if err := ep.SendSnapshot(context.Background(), 2, 1, m.Msg, write); err == nil {
		t.Fatalf("snapshot crossed an isolated link")
	}
	n.Heal()
	if err := ep.SendSnapshot(context.Background(), 2, 1, m.Msg, write); err != nil {
		t.Fatalf("snapshot after heal: %v", err)
	}
	if last := r2.got[len(r2.got)-1]; last != "snap g1:1->2 data" {
		t.Fatalf("node 2's last delivery %q, want the snapshot", last)
	}
	if st := n.Stats(); st.Dropped != 2 || st.SnapshotsFailed != 1 {
		t.Fatalf("stats %+v: want 2 dropped messages and 1 failed snapshot", st)
	}
}
