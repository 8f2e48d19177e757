package router

import (
	"context"
	"time"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// StreamWindow bounds the requests of one Stream served at once: past it
// the stream stops reading, and HTTP/2 flow control holds the client back.
const StreamWindow = 64

// Stream implements DataService: a client's writes and point reads on one
// gRPC stream instead of a unary call each (the Go client's pipelining,
// client.Config.DisableStream). The calls of each request are served together
// as one Multi would serve them (the same routing, forwarding, redirects
// and per-item access checks, Config.AuthorizeItem), concurrently with
// the requests after it, within the latest of their timeouts; each call
// is answered by its id as soon as its request's calls are all served,
// and the answers ready together go in one response. The stream ends
// with the first error of either direction.
func (r *Router) Stream(ss datav1.DataService_StreamServer) error {
	ctx := ss.Context()
	out := make(chan *datav1.StreamReply, StreamWindow)
	sendErr := make(chan error, 1)
	go func() {
		for {
			var rep *datav1.StreamReply
			select {
			case rep = <-out:
			case <-ctx.Done():
				return
			}
			resp := &datav1.StreamResponse{Replies: []*datav1.StreamReply{rep}}
		more:
			for len(resp.Replies) < datav1.MaxMultiItems {
				select {
				case rep = <-out:
					resp.Replies = append(resp.Replies, rep)
				default:
					break more
				}
			}
			if err := ss.Send(resp); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	window := make(chan struct{}, StreamWindow)
	for {
		req, err := ss.Recv()
		if err != nil {
			return err
		}
		if err := datav1.CheckStream(req); err != nil {
			return err
		}
		select {
		case err := <-sendErr:
			return err
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		go func() {
			defer func() { <-window }()
			r.serveStreamCalls(ctx, req.GetCalls(), out)
		}()
	}
}

// serveStreamCalls serves one Stream request's calls and queues their
// replies.
func (r *Router) serveStreamCalls(ctx context.Context, calls []*datav1.StreamCall, out chan<- *datav1.StreamReply) {
	replies := make([]*datav1.StreamReply, len(calls))
	items := make([]*datav1.MultiItem, 0, len(calls))
	served := make([]int, 0, len(calls))
	var latest uint32
	bounded := true
	for i, c := range calls {
		replies[i] = &datav1.StreamReply{Id: c.GetId()}
		if r.cfg.AuthorizeItem != nil {
			if err := r.cfg.AuthorizeItem(ctx, c.GetItem()); err != nil {
				replies[i].Result = datav1.ResultOf(nil, err)
				continue
			}
		}
		items, served = append(items, c.GetItem()), append(served, i)
		if c.GetTimeoutMs() == 0 {
			bounded = false
		}
		latest = max(latest, c.GetTimeoutMs())
	}
	if len(items) > 0 {
		mctx := ctx
		if bounded {
			var cancel context.CancelFunc
			mctx, cancel = context.WithTimeout(ctx, time.Duration(latest)*time.Millisecond)
			defer cancel()
		}
		resp, err := r.Multi(mctx, &datav1.MultiRequest{Items: items})
		for j, i := range served {
			if err != nil {
				replies[i].Result = datav1.ResultOf(nil, err)
			} else {
				replies[i].Result = resp.GetResults()[j]
			}
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
