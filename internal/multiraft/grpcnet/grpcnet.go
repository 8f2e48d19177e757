package grpcnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/retry"
)

// AddressResolver tells the transport where a node listens. It is asked
// again before every reconnect, so an address may change at runtime.
type AddressResolver interface {
	RaftAddress(node multiraft.NodeID) (string, error)
}

// StaticResolver is a mutable map of node addresses.
type StaticResolver struct {
	mu    sync.RWMutex
	addrs map[multiraft.NodeID]string
}

// NewStaticResolver returns a resolver with the given addresses.
func NewStaticResolver(addrs map[multiraft.NodeID]string) *StaticResolver {
	r := &StaticResolver{addrs: make(map[multiraft.NodeID]string)}
	for k, v := range addrs {
		r.addrs[k] = v
	}
	return r
}

// Set records node's address.
func (r *StaticResolver) Set(node multiraft.NodeID, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs[node] = addr
}

// RaftAddress implements AddressResolver.
func (r *StaticResolver) RaftAddress(node multiraft.NodeID) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a, ok := r.addrs[node]
	if !ok {
		return "", fmt.Errorf("grpcnet: no address known for node %d", node)
	}
	return a, nil
}

// Config configures a Transport.
type Config struct {
	NodeID   multiraft.NodeID
	Resolver AddressResolver
	Logger   *slog.Logger
	// QueueMessages bounds each peer's queue (default 10000); messages
	// beyond it are dropped and raft retransmits.
	QueueMessages int
	// MaxBatchBytes bounds one batch on the stream (default 4 MiB; a single
	// larger message still goes alone).
	MaxBatchBytes int
	// SnapshotChunkBytes is the size of one snapshot chunk (default 1 MiB).
	SnapshotChunkBytes int
	// BackoffMin and BackoffMax bound the reconnect backoff (defaults 50ms, 2s).
	BackoffMin, BackoffMax time.Duration
	// DialOptions connect to peers; they must set the transport
	// credentials (the instance passes client.DialOptions, the one place
	// that decides how connections are secured).
	DialOptions []grpc.DialOption
	// Failpoints cut links to and from named peers (FailpointDropTo,
	// FailpointDropFrom); no-ops unless built with the "failpoints" tag.
	Failpoints *failpoint.Points
}

// MaxMessageBytes is the largest gRPC message the transport sends; servers
// that register the transport must accept it (see ServerOptions).
const MaxMessageBytes = 64 << 20

// ServerOptions returns the gRPC server options the transport needs.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}
}

// Transport is the production multiraft.Transport: one long-lived bidi stream per
// peer node carrying every group's messages in batches, a bounded queue per
// peer that drops on overflow so raft never waits for a slow peer,
// reconnects with backoff, and snapshots on their own streams in chunks.
type Transport struct {
	raftv1.UnimplementedRaftTransportServiceServer

	cfg     Config
	log     *slog.Logger
	handler multiraft.Handler

	mu    sync.Mutex
	peers map[multiraft.NodeID]*peer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ multiraft.Transport = (*Transport)(nil)

// New makes a transport. Call SetHandler before traffic arrives.
func New(cfg Config) *Transport {
	cfg.QueueMessages = cmp.Or(cfg.QueueMessages, 10000)
	cfg.MaxBatchBytes = cmp.Or(cfg.MaxBatchBytes, 4<<20)
	cfg.SnapshotChunkBytes = cmp.Or(cfg.SnapshotChunkBytes, 1<<20)
	cfg.BackoffMin = cmp.Or(cfg.BackoffMin, 50*time.Millisecond)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.DialOptions = append(slices.Clip(cfg.DialOptions), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxMessageBytes)))
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "raft-transport", "node", uint64(cfg.NodeID)),
		peers:  make(map[multiraft.NodeID]*peer),
		ctx:    ctx,
		cancel: cancel,
	}
}

// SetHandler sets where inbound traffic goes (normally the Host).
func (t *Transport) SetHandler(h multiraft.Handler) { t.handler = h }

// Register adds the transport's service to a gRPC server.
func (t *Transport) Register(s grpc.ServiceRegistrar) {
	raftv1.RegisterRaftTransportServiceServer(s, t)
}

// Close stops every peer stream and waits for them.
func (t *Transport) Close() {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.peers {
		p.closeConn()
	}
}

func (t *Transport) peer(id multiraft.NodeID) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	if p == nil {
		p = &peer{t: t, id: id, wake: make(chan struct{}, 1)}
		t.peers[id] = p
		if t.ctx.Err() == nil {
			t.wg.Go(p.run)
		}
	}
	return p
}

// Send implements multiraft.Transport. It marshals on the caller's goroutine (the
// raft round), so messages are encoded before their entries can change.
func (t *Transport) Send(msgs []multiraft.OutboundMessage) {
	byPeer := make(map[multiraft.NodeID][]*raftv1.GroupMessage, 2)
	for _, m := range msgs {
		data, err := proto.Marshal(m.Msg)
		if err != nil {
			t.log.Error("cannot marshal raft message", "err", err)
			continue
		}
		to := multiraft.NodeID(m.Msg.GetTo())
		byPeer[to] = append(byPeer[to], &raftv1.GroupMessage{GroupId: uint64(m.Group), Message: data})
	}
	for to, ms := range byPeer {
		if t.cut(FailpointDropTo, to) {
			continue
		}
		t.peer(to).enqueue(ms)
	}
}

// peer is the outbound side of one peer node.
type peer struct {
	t    *Transport
	id   multiraft.NodeID
	wake chan struct{}

	mu      sync.Mutex
	queue   []*raftv1.GroupMessage
	dropped uint64

	connMu   sync.Mutex
	conn     *grpc.ClientConn
	connAddr string
}

func (p *peer) enqueue(ms []*raftv1.GroupMessage) {
	p.mu.Lock()
	room := p.t.cfg.QueueMessages - len(p.queue)
	if room < len(ms) {
		p.dropped += uint64(len(ms) - max(room, 0))
		ms = ms[:max(room, 0)]
	}
	p.queue = append(p.queue, ms...)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take removes up to MaxBatchBytes of queued messages (at least one).
func (p *peer) take() []*raftv1.GroupMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, size := 0, 0
	for n < len(p.queue) {
		size += len(p.queue[n].Message) + 16
		if n > 0 && size > p.t.cfg.MaxBatchBytes {
			break
		}
		n++
	}
	out := make([]*raftv1.GroupMessage, n)
	copy(out, p.queue[:n])
	p.queue = append(p.queue[:0], p.queue[n:]...)
	return out
}

func (p *peer) clear() {
	p.mu.Lock()
	p.dropped += uint64(len(p.queue))
	p.queue = p.queue[:0]
	p.mu.Unlock()
}

// client returns a connection to the peer's current address.
func (p *peer) client() (raftv1.RaftTransportServiceClient, error) {
	addr, err := p.t.cfg.Resolver.RaftAddress(p.id)
	if err != nil {
		return nil, err
	}
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn == nil || p.connAddr != addr {
		if p.conn != nil {
			_ = p.conn.Close()
		}
		conn, err := grpc.NewClient(addr, p.t.cfg.DialOptions...)
		if err != nil {
			return nil, fmt.Errorf("grpcnet: dial node %d at %s: %w", p.id, addr, err)
		}
		p.conn, p.connAddr = conn, addr
	}
	return raftv1.NewRaftTransportServiceClient(p.conn), nil
}

func (p *peer) closeConn() {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// run keeps a stream to the peer open and drains the queue into it.
func (p *peer) run() {
	ctx := p.t.ctx
	// Each wait is the doubling backoff plus up to half of it drawn at
	// random: from BackoffMin to BackoffMax, each drawn in [b, 1.5b].
	backoff := retry.Backoff{Initial: p.t.cfg.BackoffMin * 3 / 2, Max: p.t.cfg.BackoffMax * 3 / 2, Jitter: 1.0 / 3}
	for ctx.Err() == nil {
		sent, err := p.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if sent {
			backoff.Reset()
		}
		p.t.log.Debug("raft stream to peer ended", "peer", uint64(p.id), "err", err)
		p.clear()
		if h := p.t.handler; h != nil {
			h.ReportUnreachable(p.id)
		}
		if retry.Sleep(ctx, backoff.Next()) != nil {
			return
		}
	}
}

// stream runs one stream until it fails; sent reports whether any batch
// went out on it.
func (p *peer) stream(ctx context.Context) (sent bool, err error) {
	// Wait for something to send before dialling, so idle peers cost nothing.
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-p.wake:
	}
	c, err := p.client()
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.RaftMessages(sctx)
	if err != nil {
		return false, err
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := s.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if resp.GetError() != "" {
				recvErr <- fmt.Errorf("peer %d refused the stream: %s", p.id, resp.GetError())
				cancel()
				return
			}
		}
	}()
	for {
		batch := p.take()
		if len(batch) > 0 {
			req := &raftv1.RaftMessagesRequest{FromNode: uint64(p.t.cfg.NodeID), ToNode: uint64(p.id), Messages: batch}
			if err := s.Send(req); err != nil {
				return sent, err
			}
			sent = true
			continue
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case err := <-recvErr:
			return sent, err
		case <-p.wake:
		}
	}
}

// RaftMessages implements the server side of a peer's message stream.
func (t *Transport) RaftMessages(s grpc.BidiStreamingServer[raftv1.RaftMessagesRequest, raftv1.RaftMessagesResponse]) error {
	// A peer keeps its stream open for as long as it runs, and Recv waits
	// for it. The handler must end when this transport closes, though: the
	// server's graceful stop waits for every handler (up to its bound, 2 s,
	// at every stop). So Recv runs beside it; it returns once the handler
	// has (the stream's context ends).
	type received struct {
		req *raftv1.RaftMessagesRequest
		err error
	}
	recvc := make(chan received)
	go func() {
		for {
			req, err := s.Recv()
			select {
			case recvc <- received{req, err}:
			case <-s.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r received
		select {
		case <-t.ctx.Done():
			return status.Error(codes.Unavailable, "the raft transport of this instance is closed")
		case r = <-recvc:
		}
		req, err := r.req, r.err
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.GetToNode() != uint64(t.cfg.NodeID) {
			msg := fmt.Sprintf("this is node %d, not node %d: the sender's address book is out of date", t.cfg.NodeID, req.GetToNode())
			_ = s.Send(&raftv1.RaftMessagesResponse{Error: msg})
			return status.Error(codes.FailedPrecondition, msg)
		}
		h := t.handler
		if h == nil {
			return status.Error(codes.Unavailable, "raft host not ready")
		}
		if t.cut(FailpointDropFrom, multiraft.NodeID(req.GetFromNode())) {
			continue
		}
		for _, gm := range req.GetMessages() {
			m := &raftpb.Message{}
			if err := proto.Unmarshal(gm.GetMessage(), m); err != nil {
				t.log.Warn("undecodable raft message dropped", "from", req.GetFromNode(), "err", err)
				continue
			}
			h.HandleRaftMessage(multiraft.GroupID(gm.GetGroupId()), m)
		}
	}
}

// SendSnapshot implements multiraft.Transport.
func (t *Transport) SendSnapshot(ctx context.Context, to multiraft.NodeID, group multiraft.GroupID, msg *raftpb.Message, write func(io.Writer) error) error {
	if t.cut(FailpointDropTo, to) {
		return fmt.Errorf("grpcnet: snapshot of group %d to node %d dropped by failpoint %s", group, to, FailpointDropTo)
	}
	c, err := t.peer(to).client()
	if err != nil {
		return err
	}
	hdr, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.RaftSnapshot(sctx)
	if err != nil {
		return err
	}
	w := &chunkWriter{s: s, size: t.cfg.SnapshotChunkBytes, header: &raftv1.SnapshotHeader{
		FromNode: uint64(t.cfg.NodeID), ToNode: uint64(to), GroupId: uint64(group), Message: hdr,
	}}
	if err := write(w); err != nil {
		return fmt.Errorf("grpcnet: write snapshot of group %d: %w", group, err)
	}
	if err := w.finish(); err != nil {
		return fmt.Errorf("grpcnet: send snapshot of group %d to node %d: %w", group, to, err)
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("grpcnet: send snapshot of group %d to node %d: %w", group, to, err)
	}
	if !resp.GetAccepted() {
		return fmt.Errorf("grpcnet: node %d refused snapshot of group %d: %s", to, group, resp.GetError())
	}
	return nil
}

// chunkWriter cuts a snapshot into chunks of at most size bytes.
type chunkWriter struct {
	s      grpc.ClientStreamingClient[raftv1.RaftSnapshotRequest, raftv1.RaftSnapshotResponse]
	size   int
	header *raftv1.SnapshotHeader
	buf    []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := w.size - len(w.buf)
		k := min(room, len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == w.size {
			if err := w.flush(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush(final bool) error {
	req := &raftv1.RaftSnapshotRequest{Header: w.header, Data: w.buf, Final: final}
	w.header = nil
	err := w.s.Send(req)
	w.buf = make([]byte, 0, w.size)
	return err
}

func (w *chunkWriter) finish() error { return w.flush(true) }

// RaftSnapshot implements the server side of a snapshot stream.
func (t *Transport) RaftSnapshot(s grpc.ClientStreamingServer[raftv1.RaftSnapshotRequest, raftv1.RaftSnapshotResponse]) error {
	first, err := s.Recv()
	if err != nil {
		return err
	}
	hdr := first.GetHeader()
	refuse := func(format string, args ...any) error {
		return s.SendAndClose(&raftv1.RaftSnapshotResponse{Error: fmt.Sprintf(format, args...)})
	}
	if hdr == nil {
		return refuse("first snapshot chunk has no header")
	}
	if hdr.GetToNode() != uint64(t.cfg.NodeID) {
		return refuse("this is node %d, not node %d", t.cfg.NodeID, hdr.GetToNode())
	}
	if t.cut(FailpointDropFrom, multiraft.NodeID(hdr.GetFromNode())) {
		return refuse("snapshot from node %d dropped by failpoint %s", hdr.GetFromNode(), FailpointDropFrom)
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(hdr.GetMessage(), m); err != nil {
		return refuse("undecodable snapshot message: %v", err)
	}
	h := t.handler
	if h == nil {
		return refuse("raft host not ready")
	}
	r := &chunkReader{s: s, buf: first.GetData(), done: first.GetFinal()}
	if err := h.HandleRaftSnapshot(s.Context(), multiraft.GroupID(hdr.GetGroupId()), m, r); err != nil {
		return refuse("%v", err)
	}
	if !r.done {
		return refuse("snapshot stream ended without its final chunk")
	}
	return s.SendAndClose(&raftv1.RaftSnapshotResponse{Accepted: true})
}

// chunkReader reads the data of a snapshot stream's chunks in order.
type chunkReader struct {
	s    grpc.ClientStreamingServer[raftv1.RaftSnapshotRequest, raftv1.RaftSnapshotResponse]
	buf  []byte
	done bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.done {
			return 0, io.EOF
		}
		req, err := r.s.Recv()
		if errors.Is(err, io.EOF) {
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, err
		}
		r.buf, r.done = req.GetData(), req.GetFinal()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
