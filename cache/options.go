package cache

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/client"
)

// Clock gives the client its time (ejection windows, latencies); it is the
// lease package's Clock.
type Clock = lease.Clock

// Options configure a Client. Zero values take the defaults in brackets.
type Options struct {
	// Resolver lists the servers (required).
	Resolver Resolver
	// PingPeriod between host-list refreshes and empty-Get pings of every
	// host [1s].
	PingPeriod time.Duration
	// ShardWait is how long Get waits before looking again for a shard of
	// keys no known server holds (the seed's PingTime) [100ms]. Any change
	// of the shard map ends the wait sooner.
	ShardWait time.Duration
	// GetTimeout bounds a Get whose context has no deadline [5s].
	GetTimeout time.Duration
	// HostTimeout bounds each request to one host [1s].
	HostTimeout time.Duration
	// MaxAttempts per host per Get, first try included [2]. Only
	// Unavailable, DeadlineExceeded, ResourceExhausted and Aborted are
	// retried; the whole fan-out never is.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the jittered exponential pause
	// between attempts to one host [5ms, 100ms].
	BackoffBase, BackoffMax time.Duration
	// HedgeDelay: 0 sends each shard's keys to every replica at once (the
	// seed). > 0 sends them to the replica with the lowest latency first and
	// to the others only after HedgeDelay (or at once when the first
	// fails), while the retry budget allows.
	HedgeDelay time.Duration
	// BudgetTokens and BudgetRatio are the retry/hedge budget in the manner
	// of gRPC A6 [10, 0.1]: an attempt failed with a retryable code (or an
	// unusable answer) takes a token, a success gives back BudgetRatio;
	// retries and hedges are sent only while more than BudgetTokens/2 remain.
	BudgetTokens, BudgetRatio float64
	// EjectAfter consecutive failures take a host out of Gets for
	// EjectBase times its ejection count, at most EjectMax, or until a ping
	// succeeds; a host is still asked when no other replica has its keys
	// [5, 10s, 5m].
	EjectAfter          int
	EjectBase, EjectMax time.Duration
	// DialOptions for grpc.NewClient [insecure transport credentials].
	DialOptions []grpc.DialOption
	// Registerer receives the client metrics (nil: none).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Clock      Clock
}

func (o *Options) fill() error {
	if o.Resolver == nil {
		return fmt.Errorf("%w: Options.Resolver is nil; use StaticResolver, DNSResolver or FileResolver", ErrInvalid)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.PingPeriod, time.Second)
	def(&o.ShardWait, 100*time.Millisecond)
	def(&o.GetTimeout, 5*time.Second)
	def(&o.HostTimeout, time.Second)
	def(&o.BackoffBase, 5*time.Millisecond)
	def(&o.BackoffMax, 100*time.Millisecond)
	def(&o.EjectBase, 10*time.Second)
	def(&o.EjectMax, 5*time.Minute)
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 2
	}
	if o.BudgetTokens == 0 {
		o.BudgetTokens = 10
	}
	if o.BudgetRatio == 0 {
		o.BudgetRatio = 0.1
	}
	if o.EjectAfter == 0 {
		o.EjectAfter = 5
	}
	if o.DialOptions == nil {
		o.DialOptions = client.DialOptions(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = lease.SystemClock()
	}
	for name, d := range map[string]time.Duration{
		"PingPeriod": o.PingPeriod, "ShardWait": o.ShardWait, "GetTimeout": o.GetTimeout,
		"HostTimeout": o.HostTimeout, "BackoffBase": o.BackoffBase, "BackoffMax": o.BackoffMax,
		"EjectBase": o.EjectBase, "EjectMax": o.EjectMax,
	} {
		if d < 0 {
			return fmt.Errorf("%w: Options.%s %v is negative", ErrInvalid, name, d)
		}
	}
	if o.HedgeDelay < 0 {
		return fmt.Errorf("%w: Options.HedgeDelay %v is negative; 0 sends to every replica at once", ErrInvalid, o.HedgeDelay)
	}
	if o.MaxAttempts < 1 || o.MaxAttempts > 5 {
		return fmt.Errorf("%w: Options.MaxAttempts %d is outside 1..5", ErrInvalid, o.MaxAttempts)
	}
	if o.BudgetTokens < 1 || o.BudgetRatio <= 0 || o.BudgetRatio > 1 {
		return fmt.Errorf("%w: retry budget tokens %v ratio %v: want tokens >= 1 and 0 < ratio <= 1", ErrInvalid, o.BudgetTokens, o.BudgetRatio)
	}
	if o.EjectAfter < 1 {
		return fmt.Errorf("%w: Options.EjectAfter %d is below 1", ErrInvalid, o.EjectAfter)
	}
	return nil
}
