package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// rpcMetrics measures the latency of unary RPCs served, by method and code.
type rpcMetrics struct{ latency *prometheus.HistogramVec }

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardkit_rpc_server_seconds",
		Help:    "Latency of unary gRPC calls served by this instance.",
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
