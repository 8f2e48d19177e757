package router

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/tuple"
)

// fakeGroupZero places every bucket on one replicaset, r1 or r2.
type fakeGroupZero struct {
	GroupZero // methods the tests do not reach panic
	mu        sync.Mutex
	holder    string
	changed   chan struct{} // closed by move
	looked    chan struct{} // when set, told of every call of Changed
}

// move places every bucket on rsID, as a switch applied in group 0 does.
func (f *fakeGroupZero) move(rsID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = rsID
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

func (f *fakeGroupZero) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	if f.looked != nil {
		f.looked <- struct{}{}
	}
	return f.changed
}

func (f *fakeGroupZero) ReplicasetOf(b uint32) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b == 0 { // no bucket: none holds it, as in group 0's map
		return ""
	}
	return f.holder
}

func (f *fakeGroupZero) Replicasets() []Replicaset {
	return []Replicaset{
		{ID: "r1", LeaderAddress: "r1-leader", Members: []Member{{Address: "r1-leader"}}},
		{ID: "r2", LeaderAddress: "r2-leader", Members: []Member{{Address: "r2-leader"}}},
	}
}

func (f *fakeGroupZero) Refresh(context.Context) error { return nil }
func (f *fakeGroupZero) BucketCount() uint32           { return 3000 }
func (f *fakeGroupZero) SchemaVersion() uint64         { return 1 }

// fakeConn answers a Write at one address: with answer while it has
// one, then with success. It records the calls.
type fakeConn struct {
	addr  string
	calls *[]string
	mu    *sync.Mutex
	next  func() error
}

func (c *fakeConn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	c.mu.Lock()
	*c.calls = append(*c.calls, c.addr)
	c.mu.Unlock()
	if err := c.next(); err != nil {
		return err
	}
	proto.Merge(reply.(proto.Message), &datav1.WriteResponse{Index: 7})
	return nil
}

func (c *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams here")
}

func notLeaderOf(rsID, leader string) error {
	st, _ := status.New(codes.Unavailable, "this instance does not serve replicaset "+rsID+"'s call").
		WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, Bucket: 5, ReplicasetId: rsID, LeaderAddress: leader})
	return st.Err()
}

// During a move the leader this router calls may still place the bucket
// on its old replicaset, and answer with that replicaset's leader: the
// router must not take it for the new replicaset's leader (it would send
// r2's calls to r1's leader, which sends them back, until the call gives
// up). It tries r2's leader again once that one has caught up.
func TestANotLeaderAnswerAboutAnotherReplicasetIsNotOurLeader(t *testing.T) {
	topo := &fakeGroupZero{holder: "r2"}
	var mu sync.Mutex
	var calls []string
	stale := 1 // r2's leader answers once from a view where bucket 5 is on r1
	r := New(Config{GroupZero: topo, Dial: func(addr string) (grpc.ClientConnInterface, error) {
		return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case addr == "r2-leader" && stale > 0:
				stale--
				return notLeaderOf("r1", "r1-leader")
			case addr == "r2-leader":
				return nil
			}
			return notLeaderOf("r2", "r1-leader") // r1's leader, asked for r2: it does not serve it
		}}, nil
	}})
	resp, err := r.Write(context.Background(), &datav1.WriteRequest{Bucket: 5})
	if err != nil {
		t.Fatalf("write: %v (calls %v)", err, calls)
	}
	if resp.GetIndex() != 7 {
		t.Fatalf("answer %v", resp)
	}
	for _, a := range calls {
		if a == "r1-leader" {
			t.Fatalf("r2's call went to r1's leader: calls %v", calls)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leaders["r2"] == "r1-leader" || r.leaders["r1"] != "r1-leader" {
		t.Fatalf("leaders learned: %v", r.leaders)
	}
}

func movingOn(rsID string) error {
	st, _ := status.New(codes.Unavailable, "bucket 5 is moving from "+rsID).
		WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_BUCKET_MOVING, Bucket: 5, ReplicasetId: rsID})
	return st.Err()
}

// A write that finds its bucket in its move's switch waits for group 0 to
// place the bucket on its new replicaset and goes there at once; other
// changes of group 0 only make it look again. (Its backoff is an hour
// here, so only a change can end the wait before MoveWait.) A switch that
// ends with the bucket where it was (an aborted move) is retried after the
// backoff.
func TestAWriteWaitsOutASwitchUntilGroupZeroMovesTheBucket(t *testing.T) {
	for _, aborted := range []bool{false, true} {
		topo := &fakeGroupZero{holder: "r1", looked: make(chan struct{}, 16)}
		var mu sync.Mutex
		var calls []string
		moving := 3 // an aborted move: r1 refuses three times, then serves again
		backoff := time.Hour
		if aborted {
			backoff = 0 // the default
		}
		r := New(Config{GroupZero: topo, Attempts: 3, MoveBackoff: backoff, Dial: func(addr string) (grpc.ClientConnInterface, error) {
			return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error {
				if addr != "r1-leader" {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if aborted && moving == 0 {
					return nil
				}
				moving--
				return movingOn("r1")
			}}, nil
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		done := make(chan error, 1)
		go func() {
			_, err := r.Write(ctx, &datav1.WriteRequest{Bucket: 5})
			done <- err
		}()
		waitLook := func(what string) {
			select {
			case <-topo.looked:
			case err := <-done:
				t.Fatalf("aborted=%v: the write ended (%v, calls %v) before it %s", aborted, err, calls, what)
			case <-time.After(10 * time.Second):
				t.Fatalf("aborted=%v: the write did not wait on group 0's changes before it %s (calls %v)", aborted, what, calls)
			}
		}
		if !aborted {
			waitLook("waited for the switch")
			topo.move("r1") // a change of group 0 that leaves the bucket where it is
			waitLook("looked again")
			topo.move("r2") // the switch
		}
		err := <-done
		cancel()
		if err != nil {
			t.Fatalf("aborted=%v: write: %v (calls %v)", aborted, err, calls)
		}
		mu.Lock()
		want := []string{"r1-leader", "r2-leader"}
		if aborted {
			want = []string{"r1-leader", "r1-leader", "r1-leader", "r1-leader"}
		}
		if !slices.Equal(calls, want) {
			t.Errorf("aborted=%v: calls %v, want %v", aborted, calls, want)
		}
		mu.Unlock()
	}
}

// fakeLocal is this instance's storage, of replicaset rs, its leader; it
// answers every write with index 9.
type fakeLocal struct {
	Local  // methods the tests do not reach panic
	rs     string
	writes int
}

func (l *fakeLocal) ReplicasetID() string  { return l.rs }
func (l *fakeLocal) IsLeader() bool        { return true }
func (l *fakeLocal) LeaderAddress() string { return "" }
func (l *fakeLocal) Write(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	l.writes++
	return &datav1.WriteResponse{Index: 9}, nil
}

// headerConn records the replicaset header of the calls made through it.
type headerConn struct{ got []string }

func (c *headerConn) Invoke(ctx context.Context, _ string, _, reply any, _ ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	c.got = append(c.got, md.Get(ReplicasetHeader)...)
	proto.Merge(reply.(proto.Message), &datav1.WriteResponse{Index: 7})
	return nil
}

func (c *headerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams here")
}

// A write forwarded to a member of the replicaset the sender's view places
// the bucket on is served by that member's storage even when the member's
// own view of group 0 is behind (a new instance catching up with group 0
// while the rebalancer moves buckets to it: scripts/bench-moves.sh saw the
// calls bounce between r1 and r2 until they gave up, a stall of 100-300 ms
// at the start of every move wave). Without the sender's replicaset (an
// older sender) the member answers from its view, as before.
func TestAForwardedWriteIsServedByTheReplicasetItWasSentTo(t *testing.T) {
	local := &fakeLocal{rs: "r2"}
	r := New(Config{GroupZero: &fakeGroupZero{holder: "r1"}, Local: func() Local { return local },
		Dial: func(addr string) (grpc.ClientConnInterface, error) {
			return nil, status.Errorf(codes.Internal, "dialled %s", addr)
		}})
	sent := func(md ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
	}
	resp, err := r.Write(sent(forward.MarkerHeader, "1", ReplicasetHeader, "r2"), &datav1.WriteRequest{Bucket: 5})
	if err != nil || resp.GetIndex() != 9 || local.writes != 1 {
		t.Fatalf("forwarded to r2, whose member places the bucket on r1: %v, %v (local writes %d); want the local storage's answer", resp, err, local.writes)
	}
	_, err = r.Write(sent(forward.MarkerHeader, "1"), &datav1.WriteRequest{Bucket: 5})
	if rd := datav1.RedirectOf(err); rd == nil || rd.GetReplicasetId() != "r1" || local.writes != 1 {
		t.Fatalf("forwarded with no replicaset: %v (local writes %d); want a redirect to r1, as the view has it", err, local.writes)
	}
	// Nor a read: the storage serves a bucket it is sending to readers, and
	// a sender whose view is behind would read it after the switch, stale.
	// (fakeLocal has no Get: serving it here would panic.)
	_, err = r.Get(sent(forward.MarkerHeader, "1", ReplicasetHeader, "r2"), &datav1.GetRequest{Bucket: 5, Mode: datav1.Mode_MODE_RW})
	if rd := datav1.RedirectOf(err); rd == nil || rd.GetReplicasetId() != "r1" {
		t.Fatalf("a read forwarded to r2: %v; want a redirect to r1, as the view has it", err)
	}
	// A replicaset this instance does not serve is no reason to serve it.
	_, err = r.Write(sent(forward.MarkerHeader, "1", ReplicasetHeader, "r3"), &datav1.WriteRequest{Bucket: 5})
	if rd := datav1.RedirectOf(err); rd == nil || rd.GetReplicasetId() != "r1" || local.writes != 1 {
		t.Fatalf("forwarded to r3: %v (local writes %d); want a redirect to r1", err, local.writes)
	}

	// The sender names the replicaset it routed to.
	conn := &headerConn{}
	s := New(Config{GroupZero: &fakeGroupZero{holder: "r2"}, Dial: func(string) (grpc.ClientConnInterface, error) { return conn, nil }})
	if _, err := s.Write(context.Background(), &datav1.WriteRequest{Bucket: 5}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(conn.got, []string{"r2"}) {
		t.Fatalf("the forwarded call named %v, want [r2]", conn.got)
	}
}

// A call's refusals name what was wrong: a replicaset that is not in
// service (it used to be "not known to this instance yet; retry", retried
// until the client gave up), and a procedure that wrote a key of a bucket
// its replicaset does not hold (it used to be "bucket 0 is not assigned to
// a replicaset yet": a call by replicaset has no bucket of its own).
func TestACallNamesWhatWasWrong(t *testing.T) {
	procs, err := proc.NewRegistry(proc.Procedure{Name: "bump", Mode: proc.RW,
		Func: func(context.Context, proc.Context, tuple.Tuple) (tuple.Tuple, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	redirect := func(reason datav1.Redirect_Reason, msg string) error {
		st, _ := status.New(codes.Unavailable, msg).WithDetails(&datav1.Redirect{Reason: reason, Bucket: 1234})
		return st.Err()
	}
	wrong := redirect(datav1.Redirect_REASON_WRONG_BUCKET, "bucket 1234 is absent on this replicaset (replicaset r2)")
	moving := redirect(datav1.Redirect_REASON_BUCKET_MOVING, "bucket 1234 is sending on this replicaset (replicaset r2)")
	for _, tt := range []struct {
		name   string
		req    *datav1.CallRequest
		answer error // r2's leader's
		code   codes.Code
		want   string
	}{
		{"unknown replicaset", &datav1.CallRequest{Procedure: "bump", ReplicasetId: "r9"}, nil,
			codes.NotFound, `no replicaset "r9" in service (replicasets in service: r1, r2)`},
		{"a key elsewhere, by replicaset", &datav1.CallRequest{Procedure: "bump", ReplicasetId: "r2"}, wrong, codes.FailedPrecondition,
			"the procedure ran on replicaset r2 and wrote a key of bucket 1234, which that replicaset does not hold (bucket 1234 is absent on this replicaset (replicaset r2)): a procedure writes only the buckets of its replicaset; call it by that bucket (shardkit call --bucket 1234) to run it where the key is"},
		{"a key elsewhere, by bucket", &datav1.CallRequest{Procedure: "bump", Bucket: 7}, wrong, codes.FailedPrecondition,
			"the procedure ran on replicaset r2 and wrote a key of bucket 1234"},
		{"a key in its switch", &datav1.CallRequest{Procedure: "bump", ReplicasetId: "r2"}, moving, codes.Unavailable,
			"bucket 1234 is sending on this replicaset (replicaset r2)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			r := New(Config{GroupZero: &fakeGroupZero{holder: "r2"}, Procs: procs, Dial: func(addr string) (grpc.ClientConnInterface, error) {
				return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error { return tt.answer }}, nil
			}})
			_, err := r.Call(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.want) {
				t.Fatalf("%v: got %v (calls %v); want %v: %s", tt.req, err, calls, tt.code, tt.want)
			}
			if tt.code == codes.Unavailable && datav1.RedirectOf(err) == nil {
				t.Fatalf("a key in its switch: %v; want the storage's redirect, for the client to wait out", err)
			}
			if len(calls) > 1 {
				t.Fatalf("%v: tried %v; want at most one call (no replicaset serves it better)", tt.req, calls)
			}
		})
	}
}

// A call forwarded to an instance that is unavailable (a leader killed
// during a failover) is answered naming that instance: the caller must not
// blame the instance that forwarded it for the other's refusal. The
// answer keeps the code, so the client retries it as before.
func TestAForwardToAnUnavailableInstanceNamesIt(t *testing.T) {
	topo := &fakeGroupZero{holder: "r1"}
	var mu sync.Mutex
	var calls []string
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:27301: connect: connection refused"`)
	r := New(Config{GroupZero: topo, Dial: func(addr string) (grpc.ClientConnInterface, error) {
		return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error { return refused }}, nil
	}})
	_, err := r.Write(context.Background(), &datav1.WriteRequest{Bucket: 5})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || !strings.HasPrefix(msg, ForwardFailedPrefix+"r1-leader (replicaset r1), which is unavailable: ") ||
		!strings.HasSuffix(msg, "connection refused\"") {
		t.Fatalf("a forward to a dead leader: %v, want Unavailable naming r1-leader, then its own error", err)
	}
}

// movingLocal is this instance's storage of r1, its leader, whose writes
// answer BUCKET_MOVING at once while refusals last, as a storage does
// for a bucket in its switch (it never waits the switch out itself).
type movingLocal struct {
	fakeLocal
	refusals int
}

func (l *movingLocal) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	if l.refusals > 0 {
		l.refusals--
		return nil, movingOn("r1")
	}
	return l.fakeLocal.Write(ctx, req)
}

// The router is the one layer that waits out a switch: a storage's
// BUCKET_MOVING for a bucket group 0 still places here is tried again
// after the backoff, without spending attempts (here 2, and 5 refusals).
func TestTheRouterWaitsOutASwitchItsStorageAnswersAtOnce(t *testing.T) {
	local := &movingLocal{fakeLocal: fakeLocal{rs: "r1"}, refusals: 5}
	r := New(Config{GroupZero: &fakeGroupZero{holder: "r1"}, Attempts: 2, MoveBackoff: time.Millisecond, Local: func() Local { return local }})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := r.Write(ctx, &datav1.WriteRequest{Bucket: 5})
	if err != nil || resp.GetIndex() != 9 || local.writes != 1 || local.refusals != 0 {
		t.Fatalf("write: %v %v after %d refusals left, %d served: want it served once the switch passed", resp, err, local.refusals, local.writes)
	}
}

// deadLeaderZero is group 0 still naming a dead leader of r3, whose other
// members are alive.
type deadLeaderZero struct{ fakeGroupZero }

func (*deadLeaderZero) Replicasets() []Replicaset {
	return []Replicaset{{ID: "r3", LeaderAddress: "r3-dead", Members: []Member{{Address: "r3-dead"}, {Address: "r3-b"}, {Address: "r3-c"}}}}
}

// A leader that does not answer is asked no more while group 0 still
// names it: the next attempt goes to another member, which names the new
// leader (from its own Raft state), and later calls go there at once. A
// write is sent again only when it carries a request id.
func TestADeadLeaderIsNotDialedAgainAndAgain(t *testing.T) {
	zero := &deadLeaderZero{fakeGroupZero{holder: "r3"}}
	var mu sync.Mutex
	var calls []string
	r := New(Config{GroupZero: zero, Dial: func(addr string) (grpc.ClientConnInterface, error) {
		return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error {
			switch addr {
			case "r3-dead":
				return status.Error(codes.Unavailable, "connection error: dial tcp: connection refused")
			case "r3-c":
				return nil // the new leader
			}
			return notLeaderOf("r3", "r3-c")
		}}, nil
	}})
	for i := range 3 {
		resp, err := r.Write(context.Background(), &datav1.WriteRequest{Bucket: 5, RequestId: []byte{byte(i + 1)}})
		if err != nil || resp.GetIndex() != 7 {
			t.Fatalf("write %d: %v, %v (calls %v)", i, resp, err, calls)
		}
	}
	dead := 0
	for _, a := range calls {
		if a == "r3-dead" {
			dead++
		}
	}
	if dead != 1 || calls[len(calls)-1] != "r3-c" || len(calls) != 5 {
		t.Fatalf("calls %v: want the dead leader asked once, then r3-b (which names r3-c), then r3-c for every later call", calls)
	}
	// A write without a request id is not sent again after no answer.
	r.mu.Lock()
	r.leaders = map[string]string{}
	r.unreachable = retry.Unreachable{}
	r.mu.Unlock()
	calls = nil
	if _, err := r.Write(context.Background(), &datav1.WriteRequest{Bucket: 5}); err == nil || !strings.Contains(err.Error(), ForwardFailedPrefix+"r3-dead") {
		t.Fatalf("a write without a request id: %v (calls %v), want the dead member's failure", err, calls)
	}
	if len(calls) != 1 {
		t.Fatalf("a write without a request id was sent %d times: %v", len(calls), calls)
	}
}
