package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// CallOptions tune Call.
type CallOptions struct {
	// Mode: RW runs on a replicaset's leader; RO on the nearest replica.
	// The zero value asks for the procedure's own mode.
	Mode *Mode
	// Bucket runs the procedure on the replicaset holding this bucket (0:
	// any replicaset).
	Bucket uint32
	// Replicaset runs it on this replicaset (overrides Bucket).
	Replicaset string
}

// Call runs a registered procedure (R11) on one replicaset and returns
// its result. Its writes, if any, carry one request id for all attempts,
// so a retried call never applies them twice.
func (c *Client) Call(ctx context.Context, procedure string, args tuple.Tuple, o CallOptions) (tuple.Tuple, error) {
	req := &datav1.CallRequest{Procedure: procedure, Args: tuple.AppendTuple(nil, args), Bucket: o.Bucket,
		ReplicasetId: o.Replicaset, RequestId: make([]byte, 16)}
	if err := checkArgs("call "+procedure, req.Args); err != nil {
		return nil, err
	}
	_, _ = rand.Read(req.RequestId)
	rw := true
	if o.Mode != nil {
		req.Mode = o.Mode.api()
		rw = *o.Mode == RW
	}
	var resp *datav1.CallResponse
	err := c.dataCall(ctx, "call "+procedure, o.Bucket, rw, true, func(ctx context.Context, dc datav1.DataServiceClient) error {
		var err error
		resp, err = dc.Call(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	t, err := tuple.DecodeTuple(resp.GetResult())
	if err != nil {
		return nil, &Error{Op: "call " + procedure, Msg: "the result the cluster sent: " + err.Error(), kind: ErrInternal}
	}
	return t, nil
}

// checkArgs refuses encoded arguments larger than an instance takes
// (datav1.MaxCallArgsBytes) before anything is sent: a refusal that no
// retry can change.
func checkArgs(op string, args []byte) error {
	if len(args) <= datav1.MaxCallArgsBytes {
		return nil
	}
	e := invalidf("the arguments: a tuple of %d bytes is more than %d", len(args), datav1.MaxCallArgsBytes)
	e.Op = op
	return e
}

// ReplicasetResult is one replicaset's part of a MapCall.
type ReplicasetResult struct {
	Replicaset string
	Result     tuple.Tuple
	// Err is why it failed there (nil when it did not).
	Err error
}

// ErrPartial: a MapCall failed on some replicasets; the results of the
// others are returned with it.
var ErrPartial = errors.New("failed on some replicasets")

// MapCall runs a procedure on every replicaset that holds buckets and
// returns each result, by replicaset id (vshard's map_callrw). When it
// failed on some, the error (wrapping ErrPartial) names them, and the
// results of the others are returned too.
func (c *Client) MapCall(ctx context.Context, procedure string, args tuple.Tuple, mode Mode) ([]ReplicasetResult, error) {
	req := &datav1.MapCallRequest{Procedure: procedure, Args: tuple.AppendTuple(nil, args), Mode: mode.api()}
	if err := checkArgs("map-call "+procedure, req.Args); err != nil {
		return nil, err
	}
	var resp *datav1.MapCallResponse
	err := c.invoke(ctx, "map-call "+procedure, callOptions{idempotent: mode == RO}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).MapCall(ctx, req, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []ReplicasetResult
	var failed []string
	for _, r := range resp.GetResults() {
		rr := ReplicasetResult{Replicaset: r.GetReplicasetId()}
		if r.GetError() != "" {
			rr.Err = errors.New(r.GetError())
			failed = append(failed, r.GetReplicasetId()+" ("+r.GetError()+")")
		} else if rr.Result, err = tuple.DecodeTuple(r.GetResult()); err != nil {
			rr.Err = err
			failed = append(failed, r.GetReplicasetId()+" (a bad result: "+err.Error()+")")
		}
		out = append(out, rr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Replicaset < out[j].Replicaset })
	if len(failed) > 0 {
		sort.Strings(failed)
		return out, fmt.Errorf("map-call %s: %w: %s", procedure, ErrPartial, strings.Join(failed, "; "))
	}
	return out, nil
}
