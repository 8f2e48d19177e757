package router

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/proc"
)

// Write implements DataService.
func (r *Router) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	b, err := r.bucketOfWrite(req)
	if err != nil {
		return nil, err
	}
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.GroupZero.SchemaVersion()
	}
	req.Bucket = b
	return route(ctx, r, writeCall, r.cfg.GroupZero.ReplicasetOf(b), b, true, req, Local.Write, datav1.DataServiceClient.Write)
}

// Get implements DataService.
func (r *Router) Get(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
	if err := r.placeGet(req); err != nil {
		return nil, err
	}
	b, rw := req.GetBucket(), req.GetMode() != datav1.Mode_MODE_RO
	return route(ctx, r, "get", r.cfg.GroupZero.ReplicasetOf(b), b, rw, req, Local.Get, datav1.DataServiceClient.Get)
}

// Multi implements DataService: each item is served as the unary Write
// or Get would be (Write and Get below: the same routing, forwarding and
// redirects), all of them concurrently (the replicaset's Raft group
// batches concurrent proposals into one append), and answered with its
// own result or full error status. Access checks are per item too
// (Config.AuthorizeItem: an item refused is answered with its refusal and
// not served); Stream's calls go through here.
func (r *Router) Multi(ctx context.Context, req *datav1.MultiRequest) (*datav1.MultiResponse, error) {
	if err := datav1.CheckMulti(req); err != nil {
		return nil, err
	}
	items := req.GetItems()
	out := &datav1.MultiResponse{Results: make([]*datav1.MultiResult, len(items))}
	refused := 0
	if r.cfg.AuthorizeItem != nil {
		for i, it := range items {
			if err := r.cfg.AuthorizeItem(ctx, it); err != nil {
				out.Results[i] = datav1.ResultOf(nil, err)
				refused++
			}
		}
	}
	serve := func(i int) {
		switch op := items[i].GetOp().(type) {
		case *datav1.MultiItem_Write:
			resp, err := r.Write(ctx, op.Write)
			out.Results[i] = datav1.ResultOf(resp, err)
		case *datav1.MultiItem_Get:
			resp, err := r.Get(ctx, op.Get)
			out.Results[i] = datav1.ResultOf(resp, err)
		default:
			out.Results[i] = datav1.ResultOf(nil, status.Errorf(codes.InvalidArgument, "Multi item %d is neither a write nor a get", i+1))
		}
	}
	switch {
	case refused == len(items):
		return out, nil
	case len(items) == 1:
		serve(0)
		return out, nil
	}
	rest := r.getLocally(ctx, items, out)
	if len(rest) == 1 {
		serve(rest[0])
		return out, nil
	}
	var wg sync.WaitGroup
	wg.Add(len(rest))
	for _, i := range rest {
		r.workers.Go(func() {
			defer wg.Done()
			serve(i)
		})
	}
	wg.Wait()
	return out, nil
}

// getLocally answers the point reads of a Multi that this instance serves
// itself (pick's choice: as the replicaset's leader for rw) together, in
// this goroutine: Local.GetMany makes one read index for all of them
// instead of one per read, each in a goroutine of its own (a read load's
// profile: those goroutines, their stack growth and their wake-ups were a
// fifth of a leader's CPU). It returns the items left to serve: the
// others, and every read GetMany did not answer (a redirect, an error),
// which go the way of a unary Get, with its retries.
func (r *Router) getLocally(ctx context.Context, items []*datav1.MultiItem, out *datav1.MultiResponse) []int {
	l := r.local()
	rest := make([]int, 0, len(items))
	var idx []int
	var reqs []*datav1.GetRequest
	for i, it := range items {
		if out.Results[i] != nil {
			continue // refused by its access check
		}
		g := it.GetGet()
		if g == nil || l == nil {
			rest = append(rest, i)
			continue
		}
		if err := r.placeGet(g); err != nil {
			rest = append(rest, i) // Get answers the same refusal
			continue
		}
		rsID := r.cfg.GroupZero.ReplicasetOf(g.GetBucket())
		if t, err := r.pick(rsID, g.GetMode() != datav1.Mode_MODE_RO); rsID == "" || err != nil || t.local != l {
			rest = append(rest, i)
			continue
		}
		idx, reqs = append(idx, i), append(reqs, g)
	}
	if len(reqs) < 2 {
		return append(rest, idx...)
	}
	resps, errs := l.GetMany(ctx, reqs)
	for j, i := range idx {
		if errs[j] != nil {
			rest = append(rest, i)
			continue
		}
		out.Results[i] = datav1.ResultOf(resps[j], nil)
	}
	return rest
}

// Range implements DataService.
func (r *Router) Range(ctx context.Context, req *datav1.RangeRequest) (*datav1.RangeResponse, error) {
	b := req.GetBucket()
	if err := r.checkBucket(b); err != nil {
		return nil, err
	}
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.GroupZero.SchemaVersion()
	}
	rw := req.GetMode() != datav1.Mode_MODE_RO
	return route(ctx, r, "range", r.cfg.GroupZero.ReplicasetOf(b), b, rw, req, Local.Range, datav1.DataServiceClient.Range)
}

// callMode resolves a call's mode: as asked, or the procedure's own.
func (r *Router) callMode(req *datav1.CallRequest) (datav1.Mode, error) {
	p, ok := r.cfg.Procs.Lookup(req.GetProcedure())
	if !ok {
		return 0, status.Errorf(codes.NotFound, "no procedure %q (`shardkit call --list` lists them)", req.GetProcedure())
	}
	switch req.GetMode() {
	case datav1.Mode_MODE_RO:
		if p.Mode == proc.RW {
			return 0, status.Errorf(codes.InvalidArgument, "procedure %s writes (rw); call it in mode rw", p.Name)
		}
		return datav1.Mode_MODE_RO, nil
	case datav1.Mode_MODE_RW:
		return datav1.Mode_MODE_RW, nil
	}
	if p.Mode == proc.RW {
		return datav1.Mode_MODE_RW, nil
	}
	return datav1.Mode_MODE_RO, nil
}

// Call implements DataService: on the replicaset named, or holding the
// bucket, or (neither given) this instance's own or any replicaset.
func (r *Router) Call(ctx context.Context, req *datav1.CallRequest) (*datav1.CallResponse, error) {
	mode, err := r.callMode(req)
	if err != nil {
		return nil, err
	}
	req.Mode = mode
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.GroupZero.SchemaVersion()
	}
	rsID := req.GetReplicasetId()
	switch {
	case rsID != "":
		if err := r.inService(ctx, rsID); err != nil {
			return nil, err
		}
	case req.GetBucket() != 0:
		if err := r.checkBucket(req.GetBucket()); err != nil {
			return nil, err
		}
		rsID = r.cfg.GroupZero.ReplicasetOf(req.GetBucket())
	default:
		if l := r.local(); l != nil {
			rsID = l.ReplicasetID()
		} else if rss := r.cfg.GroupZero.Replicasets(); len(rss) > 0 {
			rsID = rss[rand.IntN(len(rss))].ID
		}
	}
	return route(ctx, r, "call", rsID, req.GetBucket(), mode == datav1.Mode_MODE_RW, req, Local.Call, datav1.DataServiceClient.Call)
}

// inService refuses a call named to a replicaset that is not in service,
// once this instance has caught up with group 0 (it may have been added
// just now).
func (r *Router) inService(ctx context.Context, rsID string) error {
	if l := r.local(); l != nil && l.ReplicasetID() == rsID {
		return nil
	}
	if _, ok := r.replicaset(rsID); ok {
		return nil
	}
	if err := r.cfg.GroupZero.Refresh(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "replicaset %s is not known to this instance yet (it could not catch up with group 0: %v); retry", rsID, err)
	}
	var ids []string
	for _, rs := range r.cfg.GroupZero.Replicasets() {
		if rs.ID == rsID {
			return nil
		}
		ids = append(ids, rs.ID)
	}
	inService := "none"
	if len(ids) > 0 {
		inService = strings.Join(ids, ", ")
	}
	return status.Errorf(codes.NotFound, "no replicaset %q in service (replicasets in service: %s)", rsID, inService)
}

// MapCall implements DataService: the procedure on every replicaset that
// holds buckets (or, before buckets are placed, on every replicaset).
func (r *Router) MapCall(ctx context.Context, req *datav1.MapCallRequest) (*datav1.MapCallResponse, error) {
	var ids []string
	for _, rs := range r.cfg.GroupZero.Replicasets() {
		if rs.Buckets > 0 {
			ids = append(ids, rs.ID)
		}
	}
	if len(ids) == 0 {
		for _, rs := range r.cfg.GroupZero.Replicasets() {
			ids = append(ids, rs.ID)
		}
	}
	out := make([]*datav1.ReplicasetResult, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			res := &datav1.ReplicasetResult{ReplicasetId: id}
			resp, err := r.Call(ctx, &datav1.CallRequest{Procedure: req.GetProcedure(), Args: req.GetArgs(), Mode: req.GetMode(),
				ReplicasetId: id, SchemaVersion: req.GetSchemaVersion()})
			if err != nil {
				res.Error = status.Convert(err).Message()
			} else {
				res.Result = resp.GetResult()
			}
			out[i] = res
		})
	}
	wg.Wait()
	return &datav1.MapCallResponse{Results: out}, nil
}
