package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/shardkit/shardkit/internal/replicaset"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/internal/multiraft/grpcnet"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/proc"
)

func runInstance(ctx context.Context, cfg InstanceConfig, entrypoint string) error {
	if cfg.Listener != nil {
		cfg.Listen = cfg.Listener.Addr().String()
		defer cfg.Listener.Close() // also when refused before serving on it
	}
	if cfg.HTTPListener != nil {
		cfg.HTTPListen = cfg.HTTPListener.Addr().String()
		defer cfg.HTTPListener.Close()
	}
	cfg.Defaults()
	// Checked here, not when the leader proposes them: a replicaset refuses
	// limits out of bounds, and its leader would propose them again and again.
	history := replicaset.HistoryLimits{Revisions: uint32(min(max(cfg.HistoryRevisions, 0), replicaset.MaxHistoryRevisions+1)), Bytes: uint64(max(cfg.HistoryBytes, 0))} //nolint:gosec // bounded
	if err := history.Check(); err != nil {
		return &RefusedError{Err: fmt.Errorf("--history-revisions %d, --history-bytes %d: %w", cfg.HistoryRevisions, cfg.HistoryBytes, err)}
	}
	log := cfg.Logger
	LogSecurity(log, cfg)
	sec, err := loadSecurity(cfg)
	if err != nil {
		return &RefusedError{Err: err}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return &RefusedError{Err: fmt.Errorf("cannot create data dir %s: %w", cfg.DataDir, err)}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	storageMetrics := newStorageMetrics(reg)
	storageErrs := make(chan error, 1) // corruption found by Pebble's background work
	db, err := storage.Open(filepath.Join(cfg.DataDir, "db"), storage.Options{
		Logger:       log,
		CacheBytes:   cfg.CacheSize - cfg.CacheSize/RowCacheShare,
		OnWriteStall: storageMetrics.writeStall,
		OnCorruption: func(err error) {
			select {
			case storageErrs <- err:
			default:
			}
		},
	})
	if err != nil {
		return cluster.OpenRefusal(cfg.DataDir, cfg.InstanceID, err)
	}
	defer db.Close() // after the HTTP server stops (deferred below): no scrape reads it closed
	storageMetrics.watchDB(reg, db)

	lis := cfg.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", cfg.Listen); err != nil {
			return &RefusedError{Err: fmt.Errorf("cannot listen on --listen %s: %w", cfg.Listen, err)}
		}
	}
	procs := cfg.Procedures
	if procs == nil {
		if procs, err = proc.NewRegistry(proc.Builtins()...); err != nil {
			return err
		}
	}
	fp := &failpoint.Points{}
	if err := setFailpointsFromEnv(fp); err != nil {
		return &RefusedError{Err: err}
	}
	dataCtx, stopData := context.WithCancel(ctx)
	data := newDataLayer(dataCtx, db, filepath.Join(cfg.DataDir, "ingest"), procs, fp, cfg.CacheSize/RowCacheShare, log)
	data.history = history
	data.copyTables = !cfg.DisableCopyTables
	reg.MustRegister(&paceMetrics{storage: data.local})
	defer func() {
		stopData()
		data.wait()
	}()
	var nodePtr atomic.Pointer[cluster.Node]
	metrics := cluster.NewMetrics(reg, nodePtr.Load)
	rpc := newRPCMetrics(reg)

	node := cluster.NewNode(cluster.Config{
		ClusterID:             cfg.ClusterID,
		InstanceID:            cfg.InstanceID,
		ReplicasetID:          cfg.ReplicasetID,
		Advertise:             cfg.Advertise,
		HTTPAddress:           cfg.HTTPListen,
		Peers:                 cfg.Peers,
		FailureDomain:         cfg.FailureDomain,
		InitReplicationFactor: cfg.InitReplicationFactor,
		InitBucketCount:       cfg.InitBucketCount,
		DataDir:               cfg.DataDir,
		AutoOfflineTimeout:    cfg.AutoOfflineTimeout,
		ShutdownTimeout:       cfg.ShutdownTimeout,
		DisableLeaseReads:     cfg.DisableLeaseReads,
		Timeouts:              cfg.Timeouts,
		Logger:                log,
		NewReplicasetSM:       data.newSM,
		OnReplicasetGroup:     data.opened,
		BucketCounts:          data.bucketCounts,
		StorageErrors:         storageErrs,
		Credentials:           sec.peer,
		Failpoints:            fp,
	}, db, metrics)
	nodePtr.Store(node)
	var authz *auth.Authorizer
	var sessions *auth.Sessions // the web console's logins
	if sec.secure() {
		sessions = auth.NewSessions(nil)
		authz = sec.authorizer(node, procs, sessions, log)
	}
	data.attach(node, authz, rpc.call)

	// Calls only another instance can serve are forwarded there (at most
	// one hop) before their handler runs here.
	fwd := forward.New(routeCall(node), node.DialPeer)
	unary := []grpc.UnaryServerInterceptor{rpc.unary, fwd.Interceptor()}
	if authz != nil {
		// Every call is checked before it is forwarded or served.
		unary = []grpc.UnaryServerInterceptor{rpc.unary, authz.Unary(), fwd.Interceptor()}
	}
	opts := append(grpcnet.ServerOptions(), grpc.ChainUnaryInterceptor(unary...), grpc.ForceServerCodecV2(rpccodec.Codec{}))
	opts = append(opts, sec.serverOptions(authz)...)
	srv := grpc.NewServer(opts...)
	node.Service().Register(srv)
	data.register(srv)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	defer stopGRPC(srv, log)

	if cfg.HTTPListen != "" || cfg.HTTPListener != nil {
		api, closeAPI, err := newConsoleAPI(ctx, node, reg, sec, sessions, cfg.Advertise, log)
		if err != nil {
			return err
		}
		defer closeAPI()
		hs, err := startHTTP(cfg.HTTPListen, cfg.HTTPListener, sec.httpHandler(withFailpoints(newHTTPHandler(node, reg, cfg.EnablePprof, api), fp), authz, cfg.HTTPOpenHealth), sec)
		if err != nil {
			return &RefusedError{Err: err}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), stopBound)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				// A long profile or trace (--enable-pprof) may still run:
				// its connection goes, and with it its request's context.
				log.Warn("HTTP server did not stop gracefully in time; closing it", "bound", stopBound, "err", err)
				_ = hs.Close()
			}
		}()
	}
	log.Info("instance started", "listen", cfg.Listen, "advertise", cfg.Advertise, "data_dir", cfg.DataDir, "http", cfg.HTTPListen)

	nodeCtx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	runErr := make(chan error, 1)
	go func() { runErr <- node.Run(nodeCtx, entrypoint) }()
	select {
	case err = <-runErr:
	case err = <-serveErr:
		// The node still uses the database closed on return: stop it first.
		stopNode()
		if nerr := <-runErr; nerr != nil {
			log.Warn("node stopped after the gRPC server", "err", nerr)
		}
		return fmt.Errorf("gRPC server stopped: %w", err)
	}
	if err == nil {
		log.Info("instance stopped")
	}
	return err
}

// stopBound bounds the graceful stop of each server: calls in flight may
// finish, for this long.
const stopBound = 2 * time.Second

// stopGRPC stops the server gracefully (the calls in flight finish),
// bounded by stopBound. The node has stopped by then, so its raft
// transport has ended the peers' streams, which would otherwise hold the
// graceful stop up to the bound.
func stopGRPC(srv *grpc.Server, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopBound):
		log.Warn("gRPC server did not stop gracefully in time; cutting its calls", "bound", stopBound)
		srv.Stop()
	}
}

func startHTTP(addr string, lis net.Listener, h http.Handler, sec *security) (*http.Server, error) {
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("cannot listen on --http-listen %s: %w", addr, err)
		}
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	// Requests that last (the console's event streams) end when the
	// server shuts down, rather than holding its graceful stop.
	base, cancel := context.WithCancel(context.Background())
	hs.BaseContext = func(net.Listener) context.Context { return base }
	hs.RegisterOnShutdown(cancel)
	if sec.secure() {
		// HTTPS with the node certificate; a client certificate is asked
		// for and checked by the handler (security.httpHandler).
		hs.TLSConfig = sec.srv.ServerConfig("h2", "http/1.1")
		go func() { _ = hs.ServeTLS(lis, "", "") }()
		return hs, nil
	}
	go func() { _ = hs.Serve(lis) }()
	return hs, nil
}
