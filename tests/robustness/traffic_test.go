package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// spaceName is the space the clients write: (key unsigned, value string),
// primary key key.
const spaceName = "robustness"

var spaceDef = client.SpaceDef{
	Name:       spaceName,
	Format:     tuple.Format{{Name: "key", Type: tuple.TypeUnsigned}, {Name: "value", Type: tuple.TypeString}},
	PrimaryKey: []string{"key"},
}

// trafficConfig shapes the clients' load.
type trafficConfig struct {
	clients int
	keys    int // keys 1..keys: few, so that operations collide
	// opTimeout bounds one operation (all its attempts); attemptTimeout
	// one attempt on one instance (client.Config.Timeout). shortOps of
	// 100 operations get a deadline of shortTimeout at most instead (a
	// caller in a hurry: more outcomes stay unknown).
	opTimeout, attemptTimeout time.Duration
	shortOps                  int
	shortTimeout              time.Duration
	// The clients have three roles by id (id mod 3), so that a leader cut
	// off from its followers is read from while the new one is written
	// to: 0 writes and reads with attempts of attemptTimeout; 1 does the
	// same with attempts of quickAttempt (0: attemptTimeout), so it gives
	// up on a silent leader soon, asks the replicaset's members who
	// leads now and writes there; 2 reads mostly (readerReads percent of
	// its operations), with attempts of attemptTimeout, so it goes on
	// asking the leader it knows while that leader answers.
	quickAttempt time.Duration
	readerReads  int
	// pause between two operations of one client, at most (random).
	pause time.Duration
	// shared: all the clients share one client.Client, which sends their
	// concurrent calls together on its data stream, or in Multi calls
	// with sharedMulti (the instances then serve several operations of
	// different clients together); the report then has no per-operation
	// attempts.
	shared      bool
	sharedMulti bool // the shared client uses the Multi pipeline, not its data stream
}

// rotate returns addrs starting at the i-th, so that clients ask the
// instances in different orders.
func rotate(addrs []string, i int) []string {
	i %= len(addrs)
	return append(append([]string(nil), addrs[i:]...), addrs[:i]...)
}

// runClient runs one client until stop is closed: its own client.Client
// that knows every instance (or shared, when not nil), random operations
// on random keys, each recorded in h. It returns an error only when the
// client cannot be made.
func runClient(id int, seed uint64, cfg trafficConfig, peers []string, names map[string]string, h *history, shared *client.Client, stop <-chan struct{}) error {
	tr := &tracer{h: h, names: names} // a shared client's calls are traced by nobody
	c := shared
	if c == nil {
		var err error
		attempt := cfg.attemptTimeout
		if id%3 == 1 && cfg.quickAttempt > 0 {
			attempt = cfg.quickAttempt
		}
		if c, err = newTracedClient(peers, id, attempt, tr); err != nil {
			return err
		}
		defer c.Close()
	}
	sp := c.Space(spaceName)
	rng := rand.New(rand.NewPCG(seed, uint64(id)+1))
	known := map[uint64]uint64{} // key -> the version this client last saw
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return nil
		default:
		}
		key := 1 + rng.Uint64N(uint64(cfg.keys))
		in := input{Key: key, Value: fmt.Sprintf("c%d.%d", id, seq)}
		ro := false
		r := rng.IntN(100)
		if id%3 == 2 && cfg.readerReads > 0 {
			// A reader: readerReads percent rw reads, the rest the usual mix.
			if r < cfg.readerReads {
				r = 0
			} else {
				r = rng.IntN(100)
			}
		}
		switch {
		case r < 30:
			in.Kind, in.Value = opRead, ""
		case r < 35:
			in.Kind, in.Value, ro = opRead, "", true
		case r < 52:
			in.Kind = opReplace
		case r < 75:
			in.Kind, in.Expect = opCAS, known[key]
		case r < 90:
			in.Kind = opInsert
		default:
			in.Kind, in.Value = opDelete, ""
		}
		timeout := cfg.opTimeout
		if rng.IntN(100) < cfg.shortOps {
			timeout = 100*time.Millisecond + time.Duration(rng.Int64N(int64(cfg.shortTimeout)))
		}
		tr.take()
		rec := doOp(sp, timeout, h, in, ro)
		rec.Client, rec.Seq, rec.Attempts = id, seq, tr.take()
		h.add(rec)
		if rec.Class == clsDone || rec.Class == clsStaleRead {
			switch {
			case rec.Out.Result == resCondFailed:
				known[key] = rec.Out.Version
			case rec.Out.Result != resOK:
			case in.Kind == opDelete, in.Kind == opRead && !rec.Out.Found:
				known[key] = 0
			default:
				known[key] = rec.Out.Version
			}
		}
		if cfg.pause > 0 {
			time.Sleep(rand.N(cfg.pause))
		}
	}
}

// doOp runs one operation and records how it ended.
func doOp(sp *client.Space, timeout time.Duration, h *history, in input, ro bool) record {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	key := []tuple.Value{tuple.Uint(in.Key)}
	rec := record{In: in, Call: h.now()}
	var res client.Result
	var err error
	switch in.Kind {
	case opRead:
		mode := client.RW
		if ro {
			mode = client.RO
		}
		var info client.ReadInfo
		res, info, err = sp.Select(ctx, key, mode)
		rec.Served = info.Instance
	case opInsert:
		res, err = sp.Insert(ctx, tuple.Tuple{tuple.Uint(in.Key), tuple.String(in.Value)})
	case opReplace:
		res, err = sp.Replace(ctx, tuple.Tuple{tuple.Uint(in.Key), tuple.String(in.Value)})
	case opCAS:
		res, err = sp.Replace(ctx, tuple.Tuple{tuple.Uint(in.Key), tuple.String(in.Value)}, client.IfVersion(in.Expect))
	case opDelete:
		res, err = sp.Delete(ctx, key)
	}
	rec.Return = h.now()
	if err != nil {
		rec.Err = err.Error()
	}
	var ce *client.Error
	switch {
	case in.Kind == opRead && err != nil:
		rec.Class = clsFailedRead
	case err == nil:
		rec.Out = output{Result: resOK, Found: res.Found, Version: res.Version}
		if in.Kind == opRead || in.Kind == opDelete {
			if res.Found {
				v, decodeErr := valueOf(res.Tuple)
				if decodeErr != nil {
					// Not a tuple this test wrote: keep what it is, the
					// checks will find no write of it.
					v = fmt.Sprintf("<%v: %v>", decodeErr, res.Tuple)
				}
				rec.Out.Value = v
			}
		}
		if in.Kind == opCAS || in.Kind == opInsert {
			rec.Out.Found = false // not reported for these; the model does not look
		}
		if ro {
			rec.Class = clsStaleRead
		}
	case in.Kind == opInsert && errors.Is(err, client.ErrAlreadyExists):
		rec.Out = output{Result: resExists}
	case in.Kind == opCAS && errors.Is(err, client.ErrConditionFailed) && errors.As(err, &ce):
		rec.Out = output{Result: resCondFailed, Version: ce.ActualVersion}
	case errors.Is(err, client.ErrUnavailable):
		rec.Class, rec.Out = clsNotApplied, output{Result: resUnknown}
	default:
		rec.Class, rec.Out = clsUnknown, output{Result: resUnknown}
	}
	return rec
}

func valueOf(t tuple.Tuple) (string, error) {
	if len(t) != 2 {
		return "", fmt.Errorf("a tuple of %d fields", len(t))
	}
	s, ok := t[1].AsString()
	if !ok {
		return "", errors.New("the value is not a string")
	}
	return s, nil
}

func newTracedClient(peers []string, id int, timeout time.Duration, tr *tracer) (*client.Client, error) {
	return client.New(context.Background(), client.Config{Peers: rotate(peers, id), Timeout: timeout,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(tr.intercept)}})
}

// tracer records every RPC a client makes (the attempts of its current
// operation), so that a report shows where each attempt went and how it
// ended.
type tracer struct {
	h     *history
	names map[string]string // address -> instance name

	mu    sync.Mutex
	calls []string
}

func (tr *tracer) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	began := tr.h.now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	took := time.Duration(tr.h.now() - began)
	target := cc.Target()
	if n, ok := tr.names[target]; ok {
		target = n
	}
	s := fmt.Sprintf("%s %s@%s %v", fmtNS(began), method[strings.LastIndex(method, "/")+1:], target, took.Round(time.Millisecond))
	if err != nil {
		st := status.Convert(err)
		msg := st.Message()
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		s += ": " + st.Code().String() + ": " + msg
	} else {
		s += ": ok"
	}
	tr.mu.Lock()
	tr.calls = append(tr.calls, s)
	tr.mu.Unlock()
	return err
}

// take returns the calls recorded since the last take.
func (tr *tracer) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.calls
	tr.calls = nil
	return out
}
