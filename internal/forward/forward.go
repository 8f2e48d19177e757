package forward

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// MarkerHeader marks a call that an instance has already forwarded.
const MarkerHeader = "x-shardkit-forwarded"

// Decision is where a call goes.
type Decision struct {
	// Addr is the instance to forward to; "" serves the call here.
	Addr string
	// Hint, when not empty, is sent back in the response header HintKey
	// (the address a client should ask next time).
	Hint    string
	HintKey string
	// Why names, for the caller's message, who should serve the call
	// (e.g. "the leader of group 0, raft_id 3"); used when a forwarded
	// call would be forwarded again.
	Why string
}

// Route decides where one call goes. An error is returned to the caller
// as it is (use a gRPC status).
type Route func(ctx context.Context, method string, req any) (Decision, error)

// Dial returns a connection to addr (kept by the caller, not closed here).
type Dial func(addr string) (grpc.ClientConnInterface, error)

// Forwarded reports whether the call was forwarded to this instance.
// It looks the one header up without copying the call's metadata
// (metadata.FromIncomingContext copies all of it: 3% of a leader's CPU in
// a read load, where every item of a Multi asks).
func Forwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, MarkerHeader)) > 0
}

// Forwarder applies a Route to calls: in a gRPC server (Interceptor) and to
// calls an instance makes of its own handlers (Call).
type Forwarder struct {
	route   Route
	dial    Dial
	replies replyTypes
}

// New returns a Forwarder that routes with route and reaches other
// instances through dial.
func New(route Route, dial Dial) *Forwarder { return &Forwarder{route: route, dial: dial} }

// Interceptor forwards the unary calls that the route sends elsewhere and
// serves the others. Methods the route does not know are served here (it
// returns a zero Decision for them).
func (f *Forwarder) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return f.call(ctx, info.FullMethod, req, true, func(ctx context.Context) (any, error) { return handler(ctx, req) })
	}
}

// Call runs one call of method (a full gRPC method name) with req: here
// with local, or on the instance the route names. It is for an instance
// calling its own handlers; the reply is the method's response message.
func (f *Forwarder) Call(ctx context.Context, method string, req any, local func(context.Context) (any, error)) (any, error) {
	return f.call(ctx, method, req, false, local)
}

func (f *Forwarder) call(ctx context.Context, method string, req any, incoming bool, local func(context.Context) (any, error)) (any, error) {
	d, err := f.route(ctx, method, req)
	if err != nil {
		return nil, err
	}
	if incoming && d.Hint != "" && d.HintKey != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(d.HintKey, d.Hint))
	}
	if d.Addr == "" {
		return local(ctx)
	}
	if incoming && Forwarded(ctx) {
		return nil, status.Errorf(codes.Unavailable, "this instance is not %s and the call was already forwarded once; retry", d.Why)
	}
	reply, err := f.replies.newReply(method)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	conn, err := f.dial(d.Addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "cannot reach %s at %s: %v", d.Why, d.Addr, err)
	}
	out := metadata.AppendToOutgoingContext(ctx, MarkerHeader, "1")
	if incoming {
		out = outgoing(ctx)
	}
	if err := conn.Invoke(out, method, req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// outgoing carries the incoming request headers on, with the marker.
func outgoing(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	for k := range md {
		// Transport-level headers are the connection's own.
		if strings.HasPrefix(k, ":") || k == "content-type" || k == "user-agent" || k == "grpc-timeout" {
			delete(md, k)
		}
	}
	md.Set(MarkerHeader, "1")
	return metadata.NewOutgoingContext(ctx, md)
}

// replyTypes finds, once per method, the message type a method answers with.
type replyTypes struct{ m sync.Map }

func (r *replyTypes) newReply(fullMethod string) (proto.Message, error) {
	if mt, ok := r.m.Load(fullMethod); ok {
		return mt.(protoreflect.MessageType).New().Interface(), nil
	}
	// "/pkg.Service/Method" -> "pkg.Service.Method"
	name := strings.Replace(strings.TrimPrefix(fullMethod, "/"), "/", ".", 1)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, fmt.Errorf("forward: unknown method %s: %w", fullMethod, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, fmt.Errorf("forward: %s is not a method", fullMethod)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("forward: reply type of %s: %w", fullMethod, err)
	}
	r.m.Store(fullMethod, mt)
	return mt.New().Interface(), nil
}
