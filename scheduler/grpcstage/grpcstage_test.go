package grpcstage_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/grpcstage"
)

// serve serves srv on a loopback port and returns a connection to it.
func serve(t *testing.T, srv schedulerv1.StageServiceServer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterStageServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// price is a Go stage: it asks for offers without a price band, then
// sets the band from the price and keeps the last price seen as its state,
// with a timer a day on; its AfterSave records what it was called with.
type price struct{ afterSaved []string }

func (price) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	if strings.Contains(string(o.Body), `"band"`) {
		return scheduler.At(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), nil
	}
	return scheduler.Now(), nil
}

func (price) Process(_ context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
	var b struct {
		Price float64 `json:"price"`
	}
	if err := json.Unmarshal(o.Body, &b); err != nil {
		return scheduler.Result{}, err
	}
	band := `"low"`
	if b.Price >= 100 {
		band = `"high"`
	}
	state, err := anypb.New(wrapperspb.Double(b.Price))
	if err != nil {
		return scheduler.Result{}, err
	}
	return scheduler.Result{Patch: scheduler.Patch{"band": json.RawMessage(band), "stale": nil}, State: state,
		Timer: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}, nil
}

func (p *price) AfterSave(_ context.Context, o scheduler.Offer, _ scheduler.State) error {
	p.afterSaved = append(p.afterSaved, o.ID)
	return nil
}

// A Go stage served over gRPC answers the runner as it would in process:
// the decision, the patch (a set and a delete), the state and the timer
// come back as they were; AfterSave reaches it only when the stage is
// configured to have it.
func TestAStageOverGRPCAnswersAsInProcess(t *testing.T) {
	ctx := t.Context()
	p := &price{}
	conn := serve(t, grpcstage.Server(map[string]scheduler.Stage{"price": p}))
	offer := scheduler.Offer{ID: "o1", Version: 3, Body: []byte(`{"price":150,"stale":true}`), Chain: 2}

	remote := grpcstage.New(conn, "price", grpcstage.Options{AfterSave: true})
	for _, o := range []scheduler.Offer{offer, {ID: "o2", Version: 1, Body: []byte(`{"band":"low"}`)}} {
		want, _ := p.ShouldProcess(ctx, o, scheduler.State{})
		got, err := remote.ShouldProcess(ctx, o, scheduler.State{})
		if err != nil || got.String() != want.String() {
			t.Fatalf("ShouldProcess(%s) = %v (%v), want %v", o.ID, got, err, want)
		}
	}
	want, _ := p.Process(ctx, offer, scheduler.State{})
	got, err := remote.Process(ctx, offer, scheduler.State{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Body != nil || len(got.Patch) != 2 || string(got.Patch["band"]) != `"high"` || got.Patch["stale"] != nil ||
		!proto.Equal(got.State, want.State) || !got.Timer.Equal(want.Timer) {
		t.Fatalf("Process = %+v, want %+v", got, want)
	}
	as, ok := remote.(scheduler.AfterSaver)
	if !ok {
		t.Fatal("a stage configured with AfterSave is not a scheduler.AfterSaver")
	}
	if err := as.AfterSave(ctx, offer, scheduler.State{}); err != nil || len(p.afterSaved) != 1 || p.afterSaved[0] != "o1" {
		t.Fatalf("AfterSave: %v, the stage saw %v", err, p.afterSaved)
	}
	if _, ok := grpcstage.New(conn, "price", grpcstage.Options{}).(scheduler.AfterSaver); ok {
		t.Fatal("a stage configured without AfterSave is a scheduler.AfterSaver")
	}
	_, err = grpcstage.New(conn, "nope", grpcstage.Options{}).Process(ctx, offer, scheduler.State{})
	if err == nil || !strings.Contains(err.Error(), `stage "nope"`) || !strings.Contains(err.Error(), "serves no stage of that id") {
		t.Fatalf("Process of a stage the program does not serve: %v", err)
	}
}

// fixed answers every call with the same responses.
type fixed struct {
	schedulerv1.UnimplementedStageServiceServer
	should  *schedulerv1.ShouldProcessResponse
	process *schedulerv1.ProcessResponse
}

func (f *fixed) ShouldProcess(context.Context, *schedulerv1.ShouldProcessRequest) (*schedulerv1.ShouldProcessResponse, error) {
	return f.should, nil
}

func (f *fixed) Process(context.Context, *schedulerv1.ProcessRequest) (*schedulerv1.ProcessResponse, error) {
	return f.process, nil
}

// A malformed answer of an external stage is refused, naming the stage
// and what was wrong, as scheduler.ErrInvalid.
func TestAMalformedAnswerIsRefusedNamingTheStage(t *testing.T) {
	ctx := t.Context()
	body := func(s string) []byte { return []byte(s) }
	for _, tt := range []struct {
		name    string
		should  *schedulerv1.ShouldProcessResponse
		process *schedulerv1.ProcessResponse
		want    string
	}{
		{name: "no decision", should: &schedulerv1.ShouldProcessResponse{}, want: "decision DECISION_UNSPECIFIED"},
		{name: "at without a time", should: &schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_AT}, want: "DECISION_AT without at"},
		{name: "at out of range", should: &schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_AT, At: &timestamppb.Timestamp{Seconds: 1, Nanos: 2e9}}, want: "at: "},
		{name: "a body that is no object", process: &schedulerv1.ProcessResponse{Body: body(`[1,2]`)}, want: "body: "},
		{name: "a body and a patch", process: &schedulerv1.ProcessResponse{Body: body(`{}`), Patch: []*schedulerv1.PatchField{{Field: "a", Json: body(`1`)}}}, want: "both a body and a patch"},
		{name: "a patch that is not JSON", process: &schedulerv1.ProcessResponse{Patch: []*schedulerv1.PatchField{{Field: "a", Json: body(`{`)}}}, want: `field "a": its value is not JSON`},
		{name: "a patch set and deleted", process: &schedulerv1.ProcessResponse{Patch: []*schedulerv1.PatchField{{Field: "a", Json: body(`1`), Delete: true}}}, want: `field "a" is both set and deleted`},
		{name: "a field patched twice", process: &schedulerv1.ProcessResponse{Patch: []*schedulerv1.PatchField{{Field: "a", Json: body(`1`)}, {Field: "a", Delete: true}}}, want: `field "a" is patched twice`},
		{name: "a patch of no field", process: &schedulerv1.ProcessResponse{Patch: []*schedulerv1.PatchField{{Json: body(`1`)}}}, want: "patched field id"},
		{name: "a timer out of range", process: &schedulerv1.ProcessResponse{Timer: &timestamppb.Timestamp{Seconds: -1 << 62}}, want: "timer: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := serve(t, &fixed{should: tt.should, process: tt.process})
			s := grpcstage.New(conn, "check-video", grpcstage.Options{})
			var err error
			if tt.should != nil {
				_, err = s.ShouldProcess(ctx, scheduler.Offer{ID: "o"}, scheduler.State{})
			} else {
				_, err = s.Process(ctx, scheduler.Offer{ID: "o"}, scheduler.State{})
			}
			if !errors.Is(err, scheduler.ErrInvalid) || !strings.Contains(err.Error(), `stage "check-video": a malformed`) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalid naming the stage and %q", err, tt.want)
			}
		})
	}
}

// Whatever bytes an external stage sends, ResultOf and DecisionOf either
// refuse them or return what the runner can use: a body that is a JSON
// object, patch values that are JSON, not both.
func FuzzAnAnswerIsAResultOrARefusal(f *testing.F) {
	for _, m := range []proto.Message{
		&schedulerv1.ProcessResponse{Body: []byte(`{"a":1}`)},
		&schedulerv1.ProcessResponse{Patch: []*schedulerv1.PatchField{{Field: "a", Json: []byte(`"x"`)}, {Field: "b", Delete: true}}, Timer: timestamppb.Now()},
		&schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_AT, At: timestamppb.Now()},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var pr schedulerv1.ProcessResponse
		if pr.UnmarshalVT(data) == nil {
			if r, err := grpcstage.ResultOf("s", &pr); err == nil {
				if r.Body != nil && (r.Patch != nil || scheduler.CheckBody(r.Body) != nil) {
					t.Fatalf("accepted %v as a result with body %q and patch %v", &pr, r.Body, r.Patch)
				}
				for field, v := range r.Patch {
					if v != nil && !json.Valid(v) {
						t.Fatalf("accepted a patch of %q to %q, which is not JSON", field, v)
					}
				}
			} else if !errors.Is(err, scheduler.ErrInvalid) {
				t.Fatalf("refused with %v, not ErrInvalid", err)
			}
		}
		var sr schedulerv1.ShouldProcessResponse
		if sr.UnmarshalVT(data) == nil {
			if _, err := grpcstage.DecisionOf("s", &sr); err != nil && !errors.Is(err, scheduler.ErrInvalid) {
				t.Fatalf("refused with %v, not ErrInvalid", err)
			}
		}
	})
}
