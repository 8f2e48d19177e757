package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// DefaultPipelineDepth is Config.PipelineDepth's default: how many calls
// a Client has under way to one instance address at a time through its
// pipe (pipelining, Config.DisablePipelining). Point reads (and writes,
// with Config.PipelineWrites) beyond that wait in the address's queue, and
// the next free slot sends everything queued (up to datav1.MaxMultiItems)
// as one Multi call.
const DefaultPipelineDepth = 2

// pipe is one instance address's pipeline. It is a DataServiceClient whose
// Get (and Write, when writes is set) coalesces concurrent calls into Multi
// calls ("natural batching": no timer; a call that finds a free slot and
// nobody queued goes out at once, as the unary call it is); every other
// method is the unary call.
//
// A call that finds all the pipe's slots (Config.PipelineDepth) busy queues its item and waits
// for its own answer, or for its own context to end. When a slot frees,
// whoever held it takes every queued item and sends them in one Multi (a
// lone item goes as its unary call, with its caller's own context). Each
// item's answer is exactly what its unary call would have returned: its
// result, the full status of its refusal (redirects and refusal details
// included), or, when the Multi itself fails, the Multi's error (a
// connection that broke after sending is then each item's "outcome
// unknown", as for a unary call). A caller whose context ends stops
// waiting; its item may still be sent or applied (writes carry request
// ids, so a retry applies once), and the caller sees the context's error,
// as after a unary call whose deadline passed.
//
// The Multi's deadline is the latest of its items' deadlines (each
// caller's per-attempt deadline, Config.Timeout, or its own earlier one):
// an earliest one would fail the items of callers willing to wait longer;
// none at all could hold a slot forever against an instance that never
// answers. A caller whose deadline is earlier gives up on its own.
//
// A server that does not implement Multi (Unimplemented: the public
// DataService implemented in part, e.g. by a proxy) gets unary calls from
// then on; the items of that Multi are sent again
// as unary calls (an Unimplemented call did nothing).
type pipe struct {
	datav1.DataServiceClient

	depth  int         // slots: calls under way at once
	writes bool        // writes go through the pipe too (Config.PipelineWrites)
	stream *dataStream // writes and point reads go on a data stream (unless Config.DisableStream)

	mu       sync.Mutex
	queue    []*pending
	inflight int // slots taken, at most depth

	unaryOnly atomic.Bool // the instance has no Multi

	// queued, when set (tests), is called under mu with the queue's length
	// after an item joined it.
	queued func(n int)
}

// pending is one queued call.
type pending struct {
	ctx   context.Context
	item  *datav1.MultiItem
	state atomic.Int32 // queued, sent, abandoned
	done  chan outcome // buffered: the sender never blocks
}

const (
	stateQueued int32 = iota
	stateSent
	stateAbandoned
)

type outcome struct {
	res *datav1.MultiResult
	err error // the whole call's failure (transport, context)
}

func newPipe(dc datav1.DataServiceClient, depth int, writes bool) *pipe {
	return &pipe{DataServiceClient: dc, depth: depth, writes: writes}
}

// dataClient returns the DataServiceClient a data call on addr uses: the
// address's pipe, or the plain unary client when pipelining is off.
func (c *Client) dataClient(addr string, conn *grpc.ClientConn) datav1.DataServiceClient {
	if c.cfg.DisablePipelining {
		return datav1.NewDataServiceClient(conn)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pipes[addr]
	if p == nil {
		p = newPipe(datav1.NewDataServiceClient(conn), c.cfg.PipelineDepth, c.cfg.PipelineWrites)
		if !c.cfg.DisableStream {
			p.stream = &dataStream{dc: p.DataServiceClient}
		}
		c.pipes[addr] = p
	}
	return p
}

// pipelined says whether a call may go through the pipe: not when it
// carries call options or outgoing metadata (a Multi cannot carry them
// for one item), nor to an instance without Multi.
func (p *pipe) pipelined(ctx context.Context, opts []grpc.CallOption) bool {
	if len(opts) > 0 || p.unaryOnly.Load() {
		return false
	}
	_, md := metadata.FromOutgoingContext(ctx)
	return !md
}

// Write implements DataServiceClient: on the data stream (unless Config.DisableStream),
// through the pipe when the Client pipelines writes
// (Config.PipelineWrites), else as the unary call.
func (p *pipe) Write(ctx context.Context, req *datav1.WriteRequest, opts ...grpc.CallOption) (*datav1.WriteResponse, error) {
	item := &datav1.MultiItem{Op: &datav1.MultiItem_Write{Write: req}}
	res, ok, err := p.streamed(ctx, opts, item)
	switch {
	case ok:
	case !p.writes || !p.pipelined(ctx, opts):
		return p.DataServiceClient.Write(ctx, req, opts...)
	default:
		res, err = p.call(ctx, item)
	}
	if err == nil {
		err = itemError(res)
	}
	if err != nil {
		return nil, err
	}
	if w := res.GetWrite(); w != nil {
		return w, nil
	}
	return nil, status.Error(codes.Internal, "the instance answered a write with another call's result")
}

// Get implements DataServiceClient on the data stream (unless Config.DisableStream) or
// through the pipe.
func (p *pipe) Get(ctx context.Context, req *datav1.GetRequest, opts ...grpc.CallOption) (*datav1.GetResponse, error) {
	if !p.pipelined(ctx, opts) {
		return p.DataServiceClient.Get(ctx, req, opts...)
	}
	item := &datav1.MultiItem{Op: &datav1.MultiItem_Get{Get: req}}
	res, ok, err := p.streamed(ctx, opts, item)
	if !ok {
		res, err = p.call(ctx, item)
	}
	if err == nil {
		err = itemError(res)
	}
	if err != nil {
		return nil, err
	}
	if g := res.GetGet(); g != nil {
		return g, nil
	}
	return nil, status.Error(codes.Internal, "the instance answered a get with another call's result")
}

// streamed runs item on the address's data stream when the Client uses
// one (unless Config.DisableStream) and the instance has it; ok is false when the item
// must go another way.
func (p *pipe) streamed(ctx context.Context, opts []grpc.CallOption, item *datav1.MultiItem) (res *datav1.MultiResult, ok bool, err error) {
	if p.stream == nil || p.stream.unimplemented.Load() || !p.pipelined(ctx, opts) {
		return nil, false, nil
	}
	res, err = p.stream.call(ctx, item)
	if errors.Is(err, errStreamUnimplemented) {
		return nil, false, nil
	}
	return res, true, err
}

// itemError is the error an item's result carries (nil when none).
func itemError(res *datav1.MultiResult) error {
	e := res.GetError()
	if e == nil {
		return nil
	}
	if e.GetCode() == int32(codes.OK) {
		return status.Error(codes.Internal, "the instance answered an item with an error status of code OK")
	}
	return status.ErrorProto(e)
}

// call runs one item: at once as its unary call when a slot is free and
// nobody waits, else through the queue.
func (p *pipe) call(ctx context.Context, item *datav1.MultiItem) (*datav1.MultiResult, error) {
	p.mu.Lock()
	if p.inflight < p.depth && len(p.queue) == 0 {
		p.inflight++
		p.mu.Unlock()
		res, err := p.unary(ctx, item)
		p.release()
		return res, err
	}
	pd := &pending{ctx: ctx, item: item, done: make(chan outcome, 1)}
	p.queue = append(p.queue, pd)
	if p.queued != nil {
		p.queued(len(p.queue))
	}
	p.mu.Unlock()
	select {
	case o := <-pd.done:
		return o.res, o.err
	case <-ctx.Done():
		// Not sent yet: the sender will skip it. Sent: its outcome is
		// unknown to this caller, as after a unary call's deadline.
		pd.state.CompareAndSwap(stateQueued, stateAbandoned)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// release frees a slot, or, when items wait, keeps it and sends them.
func (p *pipe) release() {
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.inflight--
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	go p.send()
}

// send holds a slot: it sends what is queued, batch after batch, and frees
// the slot when the queue is empty.
func (p *pipe) send() {
	for {
		batch := p.take()
		if len(batch) == 0 {
			return
		}
		p.multi(batch)
	}
}

// take removes up to MaxMultiItems items from the queue (skipping those
// whose callers left) and marks them sent; when none are left it frees
// the slot.
func (p *pipe) take() []*pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*pending
	n := 0
	for n < len(p.queue) && len(batch) < datav1.MaxMultiItems {
		pd := p.queue[n]
		n++
		if pd.state.CompareAndSwap(stateQueued, stateSent) {
			batch = append(batch, pd)
		}
	}
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	if len(batch) == 0 {
		p.inflight--
	}
	return batch
}

// multi sends a batch and hands each item its answer.
func (p *pipe) multi(batch []*pending) {
	if len(batch) == 1 || p.unaryOnly.Load() {
		p.eachUnary(batch)
		return
	}
	req := &datav1.MultiRequest{Items: make([]*datav1.MultiItem, len(batch))}
	var latest time.Time
	bounded := true
	for i, pd := range batch {
		req.Items[i] = pd.item
		d, ok := pd.ctx.Deadline()
		bounded = bounded && ok
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	// Once every caller of the batch has stopped waiting, nobody needs
	// the answer: the Multi ends and frees its slot.
	var waiting atomic.Int32
	waiting.Store(int32(len(batch)))
	for _, pd := range batch {
		stop := context.AfterFunc(pd.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	resp, err := p.Multi(ctx, req)
	cancel()
	switch {
	case status.Code(err) == codes.Unimplemented:
		p.unaryOnly.Store(true)
		p.eachUnary(batch)
		return
	case err == nil && len(resp.GetResults()) != len(batch):
		err = status.Errorf(codes.Internal, "the instance answered %d results to a Multi of %d items", len(resp.GetResults()), len(batch))
	}
	for i, pd := range batch {
		if err != nil {
			pd.done <- outcome{err: err}
		} else {
			pd.done <- outcome{res: resp.GetResults()[i]}
		}
	}
}

// eachUnary sends each item of a batch as its unary call, with its
// caller's context, concurrently.
func (p *pipe) eachUnary(batch []*pending) {
	if len(batch) == 1 {
		res, err := p.unary(batch[0].ctx, batch[0].item)
		batch[0].done <- outcome{res: res, err: err}
		return
	}
	var wg sync.WaitGroup
	for _, pd := range batch {
		wg.Go(func() {
			res, err := p.unary(pd.ctx, pd.item)
			pd.done <- outcome{res: res, err: err}
		})
	}
	wg.Wait()
}

// unary runs one item as its unary call.
func (p *pipe) unary(ctx context.Context, item *datav1.MultiItem) (*datav1.MultiResult, error) {
	switch op := item.GetOp().(type) {
	case *datav1.MultiItem_Write:
		resp, err := p.DataServiceClient.Write(ctx, op.Write)
		if err != nil {
			return nil, err
		}
		return datav1.ResultOf(resp, nil), nil
	case *datav1.MultiItem_Get:
		resp, err := p.DataServiceClient.Get(ctx, op.Get)
		if err != nil {
			return nil, err
		}
		return datav1.ResultOf(resp, nil), nil
	}
	return nil, status.Error(codes.Internal, "a pipelined call that is neither a write nor a get")
}
