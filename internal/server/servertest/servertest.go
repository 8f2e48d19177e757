// Package servertest runs shardkit instances inside a test process: the
// code behind `shardkit run` (internal/server) with the supervisor's part
// (a rebootstrap starts the instance again, at the requested entrypoint,
// on an empty data dir) done by a goroutine.
//
// Tests of the libraries that talk to a cluster (cache/lease, numerator's
// coordinator, examples, the CLI) use it for a real cluster without
// spawning processes. It must never be imported by non-test code.
package servertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
)

// Listen binds a loopback port for an instance: give it to Run as
// cfg.Listener (its address becomes cfg.Listen). Binding before the instance
// starts (rather than picking a free port and closing it) means no other
// test can take the port in between. Run closes it.
func Listen(tb testing.TB) (net.Listener, string) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return l, l.Addr().String()
}

// Run runs one instance until the test ends (then stops it gracefully) and
// returns a channel that receives how it ended. Each rebootstrap gets a
// new empty data dir; cfg.DataDir is ignored. A rebootstrap listens on
// cfg.Listen anew (the first run closed cfg.Listener).
func Run(tb testing.TB, cfg server.InstanceConfig) <-chan error {
	tb.Helper()
	return run(tb, cfg)
}

func run(tb testing.TB, cfg server.InstanceConfig) chan error {
	tb.Helper()
	// The data dirs live under one directory made before the stop below is
	// registered: cleanups run last-registered first, so the instance
	// stops before its files are removed. (A tb.TempDir() per run, made in
	// the goroutine, could be registered after the stop and so removed
	// under a running instance.)
	base := tb.TempDir()
	if cfg.Listener != nil {
		cfg.Listen = cfg.Listener.Addr().String() // for a rebootstrap's new listener
	}
	if cfg.HTTPListener != nil {
		cfg.HTTPListen = cfg.HTTPListener.Addr().String() // likewise
	}
	if dir := os.Getenv("SHARDKIT_TEST_LOG_DIR"); dir != "" && cfg.Logger == nil {
		// Debugging aid: each instance's log, at debug level, in a file.
		name := strings.NewReplacer(":", "_", "/", "_").Replace(tb.Name() + "-" + cfg.Listen)
		if f, err := os.Create(filepath.Join(dir, name+".log")); err == nil {
			tb.Cleanup(func() { f.Close() })
			cfg.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		entry := ""
		for run := 1; ; run++ {
			dir := filepath.Join(base, fmt.Sprintf("run-%d", run))
			if err := os.Mkdir(dir, 0o755); err != nil {
				done <- err
				return
			}
			cfg.DataDir = dir
			err := server.RunInstance(ctx, cfg, entry)
			cfg.Listener, cfg.HTTPListener = nil, nil
			var rb *server.RebootstrapError
			if errors.As(err, &rb) && ctx.Err() == nil {
				entry = rb.Entrypoint
				continue
			}
			done <- err
			return
		}
	}()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			done <- err
			// A stop at the end of the test is graceful: Run returns nil.
			if err != nil && !errors.Is(err, context.Canceled) {
				tb.Errorf("instance %s did not stop gracefully: %v", cfg.Listen, err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("instance %s did not stop within 30s", cfg.Listen)
		}
	})
	return done
}

// Run's instances log to nowhere, unless SHARDKIT_TEST_LOG_DIR names a
// directory: then each writes its log, at debug level, to a file there.

// OneInstanceCluster starts a one-instance cluster and returns its gRPC
// address once it grants leases.
func OneInstanceCluster(tb testing.TB) string {
	tb.Helper()
	lis, addr := Listen(tb)
	done := run(tb, server.InstanceConfig{Listener: lis, AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second})
	c, err := client.New(tb.Context(), client.Config{Peers: []string{addr}, Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			tb.Fatalf("instance %s ended before the cluster was ready: %v", addr, err)
		default:
		}
		_, _, err := c.Leases().Acquire(tb.Context(), "servertest/ready", "probe", time.Millisecond)
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the cluster at %s grants no lease after 60s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
