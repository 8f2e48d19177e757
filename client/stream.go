package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// dataStream carries one instance address's writes and point reads on a
// DataService.Stream (unless Config.DisableStream) instead of a unary call or a Multi
// each: every call gets an id, waits in the send queue, goes out with
// every call queued beside it in one StreamRequest (natural batching: the
// sender takes whatever has queued while it sent the last), and is
// answered by its id. One stream at a time per address, opened on first
// use and again after it broke.
//
// A call's answer is what its unary call would have returned: its result
// or the full status of its refusal. When the stream breaks, every call
// waiting on it fails with Unavailable: for a write that was sent, its
// outcome is unknown, as after a unary call whose connection broke (the
// request id makes the Client's retry apply it once). A caller whose
// context ends stops waiting (the instance serves the call within the
// timeout it was sent with). A server without Stream (Unimplemented:
// the public DataService implemented in part) gets the pipe's calls from then on, the calls of
// that stream sent again (an Unimplemented stream served nothing).
type dataStream struct {
	dc datav1.DataServiceClient

	mu  sync.Mutex
	cur *streamConn

	nextID atomic.Uint64

	unimplemented atomic.Bool
}

// streamConn is one open stream.
type streamConn struct {
	s      datav1.DataService_StreamClient
	cancel context.CancelFunc
	kick   chan struct{} // the sender has calls to send
	done   chan struct{} // closed when the stream has failed

	mu      sync.Mutex
	err     error // why it failed
	waiting map[uint64]chan outcome
	queue   []*datav1.StreamCall
}

// errStreamUnimplemented marks calls to be sent again another way.
var errStreamUnimplemented = status.Error(codes.Unimplemented, "the instance has no data stream")

func (d *dataStream) conn() (*streamConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		return d.cur, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := d.dc.Stream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &streamConn{s: s, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}), waiting: map[uint64]chan outcome{}}
	d.cur = c
	go c.send(d)
	go c.receive(d)
	return c, nil
}

// fail ends c once: it is no longer d's stream, and every call waiting
// on it gets err.
func (c *streamConn) fail(d *dataStream, err error) {
	d.mu.Lock()
	if d.cur == c {
		d.cur = nil
	}
	d.mu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	waiting := c.waiting
	c.waiting, c.queue = nil, nil
	close(c.done)
	c.mu.Unlock()
	c.cancel()
	for _, ch := range waiting {
		ch <- outcome{err: err}
	}
}

// send sends what is queued, up to MaxMultiItems calls a request, until
// the stream fails. It never calls Recv: receive alone does (gRPC allows
// one goroutine of each).
func (c *streamConn) send(d *dataStream) {
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		// Yield once before taking the queue: the callers woken with this
		// goroutine (by one response that answered several of them) queue
		// their next calls meanwhile, and they go in one request instead
		// of one each (docs/benchmarks.md, "Fuller rounds, fuller messages").
		runtime.Gosched()
		for {
			c.mu.Lock()
			q := c.queue
			if len(q) > datav1.MaxMultiItems {
				q = q[:datav1.MaxMultiItems:datav1.MaxMultiItems]
				c.queue = c.queue[datav1.MaxMultiItems:]
			} else {
				c.queue = nil
			}
			c.mu.Unlock()
			if len(q) == 0 {
				break
			}
			if err := c.s.Send(&datav1.StreamRequest{Calls: q}); err != nil {
				// The stream is over; receive fails it with the reason
				// Recv gives (io.EOF here says only that the instance
				// ended it; any other error, that it broke: cancel it so
				// that Recv returns).
				if !errors.Is(err, io.EOF) {
					c.cancel()
				}
				return
			}
		}
	}
}

// receive hands each reply to its caller until the stream fails.
func (c *streamConn) receive(d *dataStream) {
	for {
		resp, err := c.s.Recv()
		if err != nil {
			c.fail(d, streamError(d, err))
			return
		}
		c.mu.Lock()
		for _, rep := range resp.GetReplies() {
			if ch, ok := c.waiting[rep.GetId()]; ok {
				delete(c.waiting, rep.GetId())
				ch <- outcome{res: rep.GetResult()}
			}
		}
		c.mu.Unlock()
	}
}

// streamError is the error the calls of a broken stream get.
func streamError(d *dataStream, err error) error {
	switch status.Code(err) {
	case codes.Unimplemented:
		d.unimplemented.Store(true)
		return errStreamUnimplemented
	case codes.OK, codes.Canceled, codes.Unknown:
		return status.Errorf(codes.Unavailable, "the data stream ended: %v", err)
	}
	return err
}

// call sends item on the stream and waits for its answer, or for ctx.
func (d *dataStream) call(ctx context.Context, item *datav1.MultiItem) (*datav1.MultiResult, error) {
	c, err := d.conn()
	if err != nil {
		return nil, err
	}
	call := &datav1.StreamCall{Id: d.nextID.Add(1), Item: item}
	if dl, ok := ctx.Deadline(); ok {
		call.TimeoutMs = uint32(min(max(1, time.Until(dl).Milliseconds()), 1<<31))
	}
	ch := make(chan outcome, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.waiting[call.Id] = ch
	c.queue = append(c.queue, call)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiting, call.Id)
		c.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
