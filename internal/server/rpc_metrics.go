package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rpcMetrics measures the latency of unary RPCs served, by method and code,
// and of the calls of data streams, each as the unary method it stands for.
type rpcMetrics struct{ latency *prometheus.HistogramVec }

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardkit_rpc_server_seconds",
		Help:    "Latency of unary gRPC calls served by this instance (a data stream's calls counted as the unary Write or Get each stands for).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"method", "code"})}
	reg.MustRegister(m.latency)
	return m
}

func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.latency.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

// call records one call of a data stream (router.Config.ObserveCall).
func (m *rpcMetrics) call(method string, code codes.Code, took time.Duration) {
	m.latency.WithLabelValues(method, code.String()).Observe(took.Seconds())
}
