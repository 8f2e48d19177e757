package server

import (
	"log/slog"

	"github.com/shardkit/shardkit/internal/replicaset"

	"net"
	"time"

	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/sharding"
)

// InstanceConfig is everything `shardkit run` configures. The CLI fills it
// from flags, SHARDKIT_<FLAG> environment variables and a YAML file (in
// that order of precedence); the YAML keys are the flag names.
type InstanceConfig struct {
	// InstanceID names the instance; empty: the leader assigns i<raft_id>.
	InstanceID string `yaml:"instance-id"`
	// ClusterID names the cluster (default "demo"); a joiner with another
	// cluster id is refused.
	ClusterID string `yaml:"cluster-id"`
	// Listen is the gRPC address (default 127.0.0.1:3301).
	Listen string `yaml:"listen"`
	// Advertise is the address others reach this instance at (default: Listen).
	Advertise string `yaml:"advertise"`
	// Peers are the discovery peers (default: [Advertise], so a bare run
	// bootstraps a one-instance cluster).
	Peers []string `yaml:"peer"`
	// DataDir holds the instance's database (default ".").
	DataDir string `yaml:"data-dir"`
	// CacheSize is the memory for caching data, in bytes (default
	// DefaultCacheSize): a quarter is the row cache of the replicaset's
	// writes, the rest the database's block cache. Memory is taken as
	// data is read and written, up to this.
	CacheSize int64 `yaml:"cache-size"`
	// HistoryRevisions and HistoryBytes bound each bucket's change history
	// (docs/changes.md, "Retention"): a replicaset's leader makes its own
	// the replicaset's (default replicaset.DefaultHistory).
	HistoryRevisions int   `yaml:"history-revisions"`
	HistoryBytes     int64 `yaml:"history-bytes"`
	// ReplicasetID places the instance; empty: the leader assigns r<N>.
	ReplicasetID string `yaml:"replicaset-id"`
	// FailureDomain is k=v pairs (e.g. dc=msk,rack=3).
	FailureDomain map[string]string `yaml:"failure-domain"`
	// InitReplicationFactor is used only when this instance bootstraps the
	// cluster (default 1).
	InitReplicationFactor int `yaml:"init-replication-factor"`
	// InitBucketCount is the number of buckets of a cluster this instance
	// bootstraps (default 3000, sharding.DefaultBucketCount); like the
	// replication factor, it is fixed for the cluster's life.
	InitBucketCount int `yaml:"init-bucket-count"`
	// HTTPListen serves /metrics, /health/* and /api/v1/* (off when empty).
	HTTPListen string `yaml:"http-listen"`
	// AutoOfflineTimeout: the leader sets target Offline for an instance it
	// has not heard from for this long (default 30s).
	AutoOfflineTimeout time.Duration `yaml:"auto-offline-timeout"`
	// ShutdownTimeout bounds the wait for current grade Offline on
	// SIGTERM/SIGINT (default 30s).
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// CertsDir holds ca.crt and node.crt/node.key (shardkit cert): the
	// gRPC port then requires mutual TLS and the HTTP port serves HTTPS.
	// Empty: plaintext (docs/security.md).
	CertsDir string `yaml:"certs-dir"`
	// HTTPOpenHealth lets /health/* answer without a client certificate on
	// a secure instance (for load balancers' probes).
	HTTPOpenHealth bool `yaml:"http-open-health"`
	// EnablePprof serves Go's runtime profiles at /debug/pprof/ on
	// HTTPListen (CPU, heap, goroutines, the execution trace); on a secure
	// instance only to users of role admin.
	EnablePprof bool `yaml:"enable-pprof"`
	// DisableLeaseReads makes every leader confirm its leadership with a
	// heartbeat round for each read index (--lease-reads=false) instead of
	// answering under its lease (multiraft.Config.LeaseReads).
	DisableLeaseReads bool `yaml:"-"`
	// DisableCopyTables makes this instance, while it leads a replicaset
	// receiving buckets, log their copy as tuples every member applies one
	// by one (--copy-tables=false) instead of as tables every member
	// ingests (replicaset.StorageConfig.CopyTables).
	DisableCopyTables bool `yaml:"-"`
	// Timeouts overrides the cluster's internal timeouts (zero fields keep
	// cluster.DefaultTimeouts); for tests.
	Timeouts cluster.Timeouts `yaml:"-"`
	// LogLevel and LogFormat (text or json) configure the log on stderr.
	LogLevel  string `yaml:"log-level"`
	LogFormat string `yaml:"log-format"`

	// Logger is built by the CLI from LogLevel and LogFormat.
	Logger *slog.Logger `yaml:"-"`
	// Procedures are the stored procedures the instance serves (default:
	// proc.Builtins). A binary with its own procedures sets them through
	// cmd/shardkit/app.
	Procedures *proc.Registry `yaml:"-"`
	// Listener, when set, is used instead of listening on Listen, and its
	// address becomes Listen: tests bind first and hand the socket over,
	// so no other test can take the port in between. The instance closes it.
	Listener net.Listener `yaml:"-"`
	// HTTPListener, when set, is used instead of listening on HTTPListen
	// (whose value should then be its address: the instance advertises
	// it), as Listener is for Listen. The instance closes it.
	HTTPListener net.Listener `yaml:"-"`
}

// DefaultCacheSize is the database's block cache when --cache-size is not
// given. A replicated write reads the tuple it replaces; a cache smaller
// than the data that is written and read again makes each such read a
// file read (docs/benchmarks.md, "Block cache"). The memory is taken only
// as blocks are read, so an instance with less data uses less.
const DefaultCacheSize = 512 << 20

// RowCacheShare: 1/RowCacheShare of CacheSize is the replicaset state
// machine's row cache (the tuples its writes read lately), the rest the
// database's block cache.
const RowCacheShare = 4

// MinCacheSize is the smallest --cache-size accepted.
const MinCacheSize = 8 << 20

// Defaults fills unset fields with their defaults.
func (c *InstanceConfig) Defaults() {
	if c.ClusterID == "" {
		c.ClusterID = "demo"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:3301"
	}
	if c.Advertise == "" {
		c.Advertise = c.Listen
	}
	if len(c.Peers) == 0 {
		c.Peers = []string{c.Advertise}
	}
	if c.DataDir == "" {
		c.DataDir = "."
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.HistoryRevisions == 0 {
		c.HistoryRevisions = int(replicaset.DefaultHistory.Revisions)
	}
	if c.HistoryBytes == 0 {
		c.HistoryBytes = int64(replicaset.DefaultHistory.Bytes)
	}
	if c.InitReplicationFactor == 0 {
		c.InitReplicationFactor = 1
	}
	if c.InitBucketCount == 0 {
		c.InitBucketCount = sharding.DefaultBucketCount
	}
	if c.AutoOfflineTimeout == 0 {
		c.AutoOfflineTimeout = 30 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
