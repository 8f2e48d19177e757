// Package grpcstage runs stages of the stage scheduler over gRPC
// (shardkit.scheduler.v1.StageService; docs/scheduler.md, "Stages in any
// language"): New makes a scheduler.Stage of a stage served by another
// program, in any language, and Server serves Go stages to such a runner.
//
// What an external stage answers is outside input: every answer is
// checked before the runner sees it, and a malformed one is refused with
// an error that names the stage and what was wrong (wrapping
// scheduler.ErrInvalid), which the runner counts and retries as any
// failure of the stage.
package grpcstage

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/scheduler"
)

// Options are an external stage's.
type Options struct {
	// AfterSave: the stage implements AfterSave, and the runner calls it
	// after each save of the stage's Process. Without it the stage is not
	// a scheduler.AfterSaver.
	AfterSave bool
	// CallOptions are added to every call (e.g. grpc.WaitForReady).
	CallOptions []grpc.CallOption
}

// New returns the stage id served at conn: a scheduler.Stage, and a
// scheduler.AfterSaver too with opts.AfterSave.
func New(conn grpc.ClientConnInterface, id string, opts Options) scheduler.Stage {
	s := &stage{id: id, c: schedulerv1.NewStageServiceClient(conn), opts: opts.CallOptions}
	if opts.AfterSave {
		return &afterSaveStage{s}
	}
	return s
}

type stage struct {
	id   string
	c    schedulerv1.StageServiceClient
	opts []grpc.CallOption
}

type afterSaveStage struct{ *stage }

// ShouldProcess implements scheduler.Stage.
func (s *stage) ShouldProcess(ctx context.Context, offer scheduler.Offer, state scheduler.State) (scheduler.Decision, error) {
	resp, err := s.c.ShouldProcess(ctx, &schedulerv1.ShouldProcessRequest{Stage: s.id, Offer: offerPB(offer), State: statePB(state)}, s.opts...)
	if err != nil {
		return scheduler.Decision{}, fmt.Errorf("stage %q: ShouldProcess: %w", s.id, err)
	}
	return DecisionOf(s.id, resp)
}

// Process implements scheduler.Stage.
func (s *stage) Process(ctx context.Context, offer scheduler.Offer, state scheduler.State) (scheduler.Result, error) {
	resp, err := s.c.Process(ctx, &schedulerv1.ProcessRequest{Stage: s.id, Offer: offerPB(offer), State: statePB(state)}, s.opts...)
	if err != nil {
		return scheduler.Result{}, fmt.Errorf("stage %q: Process: %w", s.id, err)
	}
	return ResultOf(s.id, resp)
}

// AfterSave implements scheduler.AfterSaver.
func (s *afterSaveStage) AfterSave(ctx context.Context, offer scheduler.Offer, state scheduler.State) error {
	if _, err := s.c.AfterSave(ctx, &schedulerv1.AfterSaveRequest{Stage: s.id, Offer: offerPB(offer), State: statePB(state)}, s.opts...); err != nil {
		return fmt.Errorf("stage %q: AfterSave: %w", s.id, err)
	}
	return nil
}

// malformed is the refusal of an external stage's answer.
func malformed(id, call, format string, args ...any) error {
	return fmt.Errorf("%w: stage %q: a malformed %s answer: %s", scheduler.ErrInvalid, id, call, fmt.Sprintf(format, args...))
}

// DecisionOf checks stage id's ShouldProcess answer and returns its
// decision.
func DecisionOf(id string, resp *schedulerv1.ShouldProcessResponse) (scheduler.Decision, error) {
	switch resp.GetDecision() {
	case schedulerv1.Decision_DECISION_SKIP:
		return scheduler.Skip(), nil
	case schedulerv1.Decision_DECISION_NOW:
		return scheduler.Now(), nil
	case schedulerv1.Decision_DECISION_AT:
		if resp.GetAt() == nil {
			return scheduler.Decision{}, malformed(id, "ShouldProcess", "decision DECISION_AT without at")
		}
		if err := resp.GetAt().CheckValid(); err != nil {
			return scheduler.Decision{}, malformed(id, "ShouldProcess", "at: %v", err)
		}
		return scheduler.At(resp.GetAt().AsTime()), nil
	}
	return scheduler.Decision{}, malformed(id, "ShouldProcess", "decision %v: want DECISION_SKIP, DECISION_NOW or DECISION_AT", resp.GetDecision())
}

// ResultOf checks stage id's Process answer and returns its result: a
// body must be a JSON object, a patch's values JSON (or deleted), each
// field once, and a body and a patch never both. Which fields a stage
// may patch is the runner's check (StageConfig.OwnFields).
func ResultOf(id string, resp *schedulerv1.ProcessResponse) (scheduler.Result, error) {
	var r scheduler.Result
	if resp.Body != nil {
		if err := scheduler.CheckBody(resp.Body); err != nil {
			return scheduler.Result{}, malformed(id, "Process", "body: %v", err)
		}
		r.Body = resp.Body
	}
	if len(resp.GetPatch()) > 0 {
		if r.Body != nil {
			return scheduler.Result{}, malformed(id, "Process", "both a body and a patch; return one")
		}
		r.Patch = scheduler.Patch{}
		for _, f := range resp.GetPatch() {
			if err := scheduler.ValidateID("patched field", f.GetField()); err != nil {
				return scheduler.Result{}, malformed(id, "Process", "%v", err)
			}
			if _, twice := r.Patch[f.GetField()]; twice {
				return scheduler.Result{}, malformed(id, "Process", "field %q is patched twice", f.GetField())
			}
			switch {
			case f.GetDelete() && len(f.GetJson()) > 0:
				return scheduler.Result{}, malformed(id, "Process", "field %q is both set and deleted", f.GetField())
			case f.GetDelete():
				r.Patch[f.GetField()] = nil
			case !json.Valid(f.GetJson()):
				return scheduler.Result{}, malformed(id, "Process", "field %q: its value is not JSON", f.GetField())
			default:
				r.Patch[f.GetField()] = json.RawMessage(f.GetJson())
			}
		}
	}
	r.State = resp.GetState()
	if t := resp.GetTimer(); t != nil {
		if err := t.CheckValid(); err != nil {
			return scheduler.Result{}, malformed(id, "Process", "timer: %v", err)
		}
		r.Timer = t.AsTime()
	}
	return r, nil
}

func offerPB(o scheduler.Offer) *schedulerv1.Offer {
	return &schedulerv1.Offer{Id: o.ID, Version: o.Version, Body: o.Body, Chain: int32(min(o.Chain, 1<<30))} //nolint:gosec // bounded above
}

func statePB(s scheduler.State) *schedulerv1.State {
	return &schedulerv1.State{Value: s.Value, Version: s.Version}
}

// Server serves Go stages, by id, as a StageService (a stage program
// written in Go; tests).
func Server(stages map[string]scheduler.Stage) schedulerv1.StageServiceServer {
	return &server{stages: stages}
}

type server struct {
	schedulerv1.UnimplementedStageServiceServer
	stages map[string]scheduler.Stage
}

func (s *server) stage(id string) (scheduler.Stage, error) {
	st, ok := s.stages[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "stage %q: this program serves no stage of that id", id)
	}
	return st, nil
}

func offerOf(o *schedulerv1.Offer) scheduler.Offer {
	return scheduler.Offer{ID: o.GetId(), Version: o.GetVersion(), Body: o.GetBody(), Chain: int(o.GetChain())}
}

func stateOf(s *schedulerv1.State) scheduler.State {
	return scheduler.State{Value: s.GetValue(), Version: s.GetVersion()}
}

// ShouldProcess implements StageServiceServer.
func (s *server) ShouldProcess(ctx context.Context, req *schedulerv1.ShouldProcessRequest) (*schedulerv1.ShouldProcessResponse, error) {
	st, err := s.stage(req.GetStage())
	if err != nil {
		return nil, err
	}
	d, err := st.ShouldProcess(ctx, offerOf(req.GetOffer()), stateOf(req.GetState()))
	if err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	at, queued := d.Due()
	switch {
	case !queued:
		return &schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_SKIP}, nil
	case at.IsZero():
		return &schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_NOW}, nil
	}
	return &schedulerv1.ShouldProcessResponse{Decision: schedulerv1.Decision_DECISION_AT, At: timestamppb.New(at)}, nil
}

// Process implements StageServiceServer.
func (s *server) Process(ctx context.Context, req *schedulerv1.ProcessRequest) (*schedulerv1.ProcessResponse, error) {
	st, err := s.stage(req.GetStage())
	if err != nil {
		return nil, err
	}
	r, err := st.Process(ctx, offerOf(req.GetOffer()), stateOf(req.GetState()))
	if err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	out := &schedulerv1.ProcessResponse{Body: r.Body, State: r.State}
	for _, f := range r.Patch.Fields() {
		v := r.Patch[f]
		out.Patch = append(out.Patch, &schedulerv1.PatchField{Field: f, Json: v, Delete: v == nil})
	}
	if !r.Timer.IsZero() {
		out.Timer = timestamppb.New(r.Timer)
	}
	return out, nil
}

// AfterSave implements StageServiceServer.
func (s *server) AfterSave(ctx context.Context, req *schedulerv1.AfterSaveRequest) (*schedulerv1.AfterSaveResponse, error) {
	st, err := s.stage(req.GetStage())
	if err != nil {
		return nil, err
	}
	as, ok := st.(scheduler.AfterSaver)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "stage %q has no AfterSave", req.GetStage())
	}
	if err := as.AfterSave(ctx, offerOf(req.GetOffer()), stateOf(req.GetState())); err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &schedulerv1.AfterSaveResponse{}, nil
}
