package router

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// StreamWindow bounds the requests of one Stream served at once: past it
// the stream stops reading, and HTTP/2 flow control holds the client back.
const StreamWindow = 64

// Stream implements DataService: a client's writes and point reads on one
// gRPC stream instead of a unary call each (the Go client's pipelining,
// client.Config.DisableStream). The calls of each request are served together
// as one Multi would serve them (the same routing, forwarding, redirects
// and per-item access checks), concurrently with
// the requests after it, within the latest of their timeouts; each call
// is answered by its id as soon as its request's calls are all served,
// and the answers ready together go in one response. Each call is
// reported to Config.ObserveCall as its unary method. The stream ends with
// the first error of either direction; when the client closes its side,
// the calls it sent are answered first.
func (r *Router) Stream(ss datav1.DataService_StreamServer) error {
	ctx := ss.Context()
	out := make(chan *datav1.StreamReply, StreamWindow)
	sent := make(chan error, 1) // the sender's end: nil once out is closed and sent
	go func() { sent <- sendReplies(ctx, ss, out) }()
	window := make(chan struct{}, StreamWindow)
	var serving sync.WaitGroup
	for {
		req, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			// The client sends no more: answer what it sent, then end.
			serving.Wait()
			close(out)
			return <-sent
		}
		if err != nil {
			return err
		}
		if err := datav1.CheckStream(req); err != nil {
			return err
		}
		select {
		case err := <-sent:
			return err
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		serving.Add(1)
		r.workers.Go(func() {
			defer serving.Done()
			defer func() { <-window }()
			r.serveStreamCalls(ctx, req.GetCalls(), out)
		})
	}
}

// sendReplies sends the replies of out, those ready together in one
// response, until out is closed (nil) or sending fails.
func sendReplies(ctx context.Context, ss datav1.DataService_StreamServer, out <-chan *datav1.StreamReply) error {
	for {
		var rep *datav1.StreamReply
		open := true
		select {
		case rep, open = <-out:
			if !open {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		// Yield once before sending: the calls answered by the same apply
		// as this one (their goroutines were woken together) queue their
		// replies meanwhile, and they go in one response instead of one
		// each (docs/benchmarks.md, "Fuller rounds, fuller messages").
		runtime.Gosched()
		resp := &datav1.StreamResponse{Replies: []*datav1.StreamReply{rep}}
	more:
		for len(resp.Replies) < datav1.MaxMultiItems {
			select {
			case rep, open = <-out:
				if !open {
					break more
				}
				resp.Replies = append(resp.Replies, rep)
			default:
				break more
			}
		}
		if err := ss.Send(resp); err != nil {
			return err
		}
		if !open {
			return nil
		}
	}
}

// serveStreamCalls serves one Stream request's calls and queues their
// replies.
func (r *Router) serveStreamCalls(ctx context.Context, calls []*datav1.StreamCall, out chan<- *datav1.StreamReply) {
	start := time.Now()
	items := make([]*datav1.MultiItem, len(calls))
	var latest uint32
	bounded := true
	for i, c := range calls {
		items[i] = c.GetItem()
		bounded = bounded && c.GetTimeoutMs() > 0
		latest = max(latest, c.GetTimeoutMs())
	}
	mctx := ctx
	if bounded {
		var cancel context.CancelFunc
		mctx, cancel = context.WithTimeout(ctx, time.Duration(latest)*time.Millisecond)
		defer cancel()
	}
	resp, err := r.Multi(mctx, &datav1.MultiRequest{Items: items})
	replies := make([]*datav1.StreamReply, len(calls))
	for i, c := range calls {
		replies[i] = &datav1.StreamReply{Id: c.GetId()}
		if err != nil {
			replies[i].Result = datav1.ResultOf(nil, err)
		} else {
			replies[i].Result = resp.GetResults()[i]
		}
	}
	if r.cfg.ObserveCall != nil {
		took := time.Since(start)
		for i, rep := range replies {
			method := datav1.DataService_Get_FullMethodName
			if calls[i].GetItem().GetWrite() != nil {
				method = datav1.DataService_Write_FullMethodName
			}
			r.cfg.ObserveCall(method, codes.Code(rep.GetResult().GetError().GetCode()), took)
		}
	}
	for _, rep := range replies {
		select {
		case out <- rep:
		case <-ctx.Done():
			return
		}
	}
}
