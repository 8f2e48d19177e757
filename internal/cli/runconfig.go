package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardkit/shardkit/internal/replicaset"

	"github.com/spf13/pflag"

	"github.com/shardkit/shardkit/internal/server"
)

// ErrBadConfig: a `shardkit run` setting has a bad value.
var ErrBadConfig = errors.New("bad configuration")

// runSetting is one `shardkit run` setting: a flag, the environment
// variable SHARDKIT_<NAME> and the config-file key <name>.
type runSetting struct {
	name  string // the flag name and the YAML key
	typ   string // shown in --help
	usage string
	def   string // the default, as shown in --help ("" = none)
	// repeatable settings (lists, maps) may be given several times on the
	// command line and as a YAML sequence (peer) or mapping
	// (failure-domain); the values add up.
	repeatable bool
	apply      func(c *server.InstanceConfig, v string) error
}

// envName is the environment variable of a setting.
func envName(setting string) string {
	return "SHARDKIT_" + strings.ToUpper(strings.ReplaceAll(setting, "-", "_"))
}

const configFlag = "config"

func runSettings() []runSetting {
	return []runSetting{
		{name: "instance-id", typ: "name", usage: "this instance's name (default: assigned by the leader as i<raft_id>)",
			apply: func(c *server.InstanceConfig, v string) error { return setName(&c.InstanceID, v) }},
		{name: "cluster-id", typ: "name", def: "demo", usage: "the cluster's name; a joiner with another one is refused",
			apply: func(c *server.InstanceConfig, v string) error { return setName(&c.ClusterID, v) }},
		{name: "listen", typ: "host:port", def: "127.0.0.1:3301", usage: "gRPC address to listen on",
			apply: func(c *server.InstanceConfig, v string) error { return setAddr(&c.Listen, v, true) }},
		{name: "advertise", typ: "host:port", def: "= --listen", usage: "address other instances reach this one at",
			apply: func(c *server.InstanceConfig, v string) error { return setAddr(&c.Advertise, v, false) }},
		{name: "peer", typ: "host:port,...", def: "= --advertise", repeatable: true,
			usage: "discovery peers, comma-separated, repeatable (a bare run bootstraps a one-instance cluster)",
			apply: func(c *server.InstanceConfig, v string) error {
				var err error
				c.Peers, err = parsePeers(v, c.Peers)
				return err
			}},
		{name: "data-dir", typ: "dir", def: ".", usage: "directory of the instance's database; the supervisor wipes its contents on rebootstrap, so give each instance a directory of its own",
			apply: func(c *server.InstanceConfig, v string) error {
				if strings.TrimSpace(v) == "" || strings.ContainsRune(v, 0) {
					return errors.New("want a directory path")
				}
				c.DataDir = v
				return nil
			}},
		{name: "cache-size", typ: "size", def: "512MiB", usage: "memory for caching data, e.g. 256MiB or 2GiB: a quarter is the row cache, the rest the block cache; memory is taken as data is read, up to this; give it the data that is written and read again (docs/operations.md, \"Sizing the cache\")",
			apply: func(c *server.InstanceConfig, v string) error {
				n, err := parseSize(v)
				if err != nil {
					return err
				}
				if n < server.MinCacheSize {
					return fmt.Errorf("%s is less than the smallest cache, %dMiB", strings.TrimSpace(v), server.MinCacheSize>>20)
				}
				c.CacheSize = n
				return nil
			}},
		{name: "history-revisions", typ: "int", def: fmt.Sprint(replicaset.DefaultHistory.Revisions), usage: fmt.Sprintf("revisions of each bucket's change history kept for watchers (%d to %d); a watcher further behind is told its cursor is compacted; the replicaset's leader's setting applies (docs/changes.md, \"Retention\")", replicaset.MinHistoryRevisions, replicaset.MaxHistoryRevisions),
			apply: func(c *server.InstanceConfig, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					return errors.New("want a whole number")
				}
				if n < replicaset.MinHistoryRevisions || n > replicaset.MaxHistoryRevisions {
					return fmt.Errorf("%d is outside %d to %d", n, replicaset.MinHistoryRevisions, replicaset.MaxHistoryRevisions)
				}
				c.HistoryRevisions = n
				return nil
			}},
		{name: "history-bytes", typ: "size", def: "1MiB", usage: fmt.Sprintf("bytes of each bucket's change history kept for watchers, at least %dKiB; the replicaset's leader's setting applies (docs/changes.md, \"Retention\")", replicaset.MinHistoryBytes>>10),
			apply: func(c *server.InstanceConfig, v string) error {
				n, err := parseSize(v)
				if err != nil {
					return err
				}
				if n < replicaset.MinHistoryBytes {
					return fmt.Errorf("%s is less than %dKiB", strings.TrimSpace(v), replicaset.MinHistoryBytes>>10)
				}
				c.HistoryBytes = n
				return nil
			}},
		{name: "replicaset-id", typ: "name", usage: "replicaset to join (default: placed by the leader, r<N>)",
			apply: func(c *server.InstanceConfig, v string) error { return setName(&c.ReplicasetID, v) }},
		{name: "failure-domain", typ: "k=v,...", repeatable: true, usage: "failure-domain pairs, e.g. dc=msk,rack=3; repeatable",
			apply: func(c *server.InstanceConfig, v string) error {
				if c.FailureDomain == nil {
					c.FailureDomain = map[string]string{}
				}
				return parseFailureDomain(v, c.FailureDomain)
			}},
		{name: "init-replication-factor", typ: "int", def: "1", usage: "replication factor, used only when this instance bootstraps the cluster",
			apply: func(c *server.InstanceConfig, v string) error {
				n, err := parseReplicationFactor(v)
				c.InitReplicationFactor = n
				return err
			}},
		{name: "init-bucket-count", typ: "int", def: "3000", usage: "number of buckets, used only when this instance bootstraps the cluster (fixed for its life)",
			apply: func(c *server.InstanceConfig, v string) error {
				n, err := parseBucketCount(v)
				c.InitBucketCount = n
				return err
			}},
		{name: "http-listen", typ: "host:port", usage: "HTTP address for the web console (/), /api/v1/*, /metrics and /health/* (off when empty; docs/console.md)",
			apply: func(c *server.InstanceConfig, v string) error {
				if v == "" {
					c.HTTPListen = ""
					return nil
				}
				return setAddr(&c.HTTPListen, v, true)
			}},
		{name: "certs-dir", typ: "dir", usage: "directory with ca.crt and node.crt/node.key (shardkit cert): the gRPC port requires mutual TLS, the HTTP port serves HTTPS; empty: plaintext",
			apply: func(c *server.InstanceConfig, v string) error {
				if strings.ContainsRune(v, 0) {
					return errors.New("want a directory path")
				}
				c.CertsDir = strings.TrimSpace(v)
				return nil
			}},
		{name: "http-open-health", typ: "bool", def: "false", usage: "with --certs-dir: /health/* answers without a client certificate (for load balancers' probes)",
			apply: func(c *server.InstanceConfig, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return errors.New("want true or false")
				}
				c.HTTPOpenHealth = b
				return nil
			}},
		{name: "enable-pprof", typ: "bool", def: "false", usage: "serve Go's runtime profiles at /debug/pprof/ on --http-listen (CPU, heap, goroutines, execution trace: go tool pprof|trace URL); with --certs-dir only to users of role admin",
			apply: func(c *server.InstanceConfig, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return errors.New("want true or false")
				}
				c.EnablePprof = b
				return nil
			}},
		{name: "lease-reads", typ: "bool", def: "true", usage: "a replicaset or group-0 leader answers linearizable reads under a time-bounded lease instead of a heartbeat round per read index; it trusts the members' clocks to run at rates within 10% of each other (docs/operations.md, \"Lease reads\")",
			apply: func(c *server.InstanceConfig, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return errors.New("want true or false")
				}
				c.DisableLeaseReads = !b
				return nil
			}},
		{name: "copy-tables", typ: "bool", def: "true", usage: "while this instance leads a replicaset receiving buckets, their rows travel through its log as Pebble tables every member ingests; false: as tuples every member applies one by one (docs/data.md, \"Growing and shrinking\")",
			apply: func(c *server.InstanceConfig, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return errors.New("want true or false")
				}
				c.DisableCopyTables = !b
				return nil
			}},
		{name: "auto-offline-timeout", typ: "duration", def: "30s", usage: "the leader marks an instance Offline after this long without a successful RPC",
			apply: func(c *server.InstanceConfig, v string) error {
				d, err := parsePositiveDuration(v)
				c.AutoOfflineTimeout = d
				return err
			}},
		{name: "shutdown-timeout", typ: "duration", def: "30s", usage: "on SIGTERM/SIGINT, how long to wait for current grade Offline",
			apply: func(c *server.InstanceConfig, v string) error {
				d, err := parsePositiveDuration(v)
				c.ShutdownTimeout = d
				return err
			}},
		{name: "log-level", typ: "level", def: "info", usage: "debug, info, warn or error",
			apply: func(c *server.InstanceConfig, v string) error {
				l, err := parseLogLevel(v)
				c.LogLevel = l
				return err
			}},
		{name: "log-format", typ: "format", def: "text", usage: "text or json (logs go to stderr)",
			apply: func(c *server.InstanceConfig, v string) error {
				f, err := parseLogFormat(v)
				c.LogFormat = f
				return err
			}},
	}
}

func setName(dst *string, v string) error {
	v = strings.TrimSpace(v)
	if err := checkName(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

func setAddr(dst *string, v string, allowEmptyHost bool) error {
	v = strings.TrimSpace(v)
	if err := checkHostPort(v, allowEmptyHost); err != nil {
		return err
	}
	*dst = v
	return nil
}

// rawFlag is a pflag.Value that keeps the raw text: parsing happens later,
// once the source of each setting is known. Repeatable flags accumulate.
type rawFlag struct {
	vals       []string
	typ        string
	repeatable bool
}

func (f *rawFlag) String() string { return strings.Join(f.vals, ",") }
func (f *rawFlag) Type() string   { return f.typ }
func (f *rawFlag) Set(v string) error {
	if f.repeatable {
		f.vals = append(f.vals, v)
	} else {
		f.vals = []string{v}
	}
	return nil
}

// addRunFlags registers every setting and --config on fs.
func addRunFlags(fs *pflag.FlagSet) {
	for _, s := range runSettings() {
		fl := fs.VarPF(&rawFlag{typ: s.typ, repeatable: s.repeatable}, s.name, "", s.usage+"  [env "+envName(s.name)+"]")
		fl.DefValue = s.def
		if s.typ == "bool" {
			fl.NoOptDefVal = "true"
		}
	}
	fl := fs.VarPF(&rawFlag{typ: "file"}, configFlag, "", "YAML file whose keys are these flag names  [env "+envName(configFlag)+"]")
	fl.DefValue = ""
}

// source is where a setting's value came from, for error messages.
type source struct {
	kind string // "flag", "env", "file"
	name string // --peer, SHARDKIT_PEER, or the key
	file string
	line int
}

func (s source) String() string {
	switch s.kind {
	case "flag":
		return "--" + s.name
	case "env":
		return s.name
	case "file":
		return fmt.Sprintf("%s (%s line %d)", s.name, s.file, s.line)
	}
	return s.name + " (default)"
}

// loadRunConfig builds the instance configuration: for each setting the
// command line wins, then SHARDKIT_<FLAG>, then the --config file, then
// the default. An empty environment variable counts as unset.
func loadRunConfig(fs *pflag.FlagSet, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (server.InstanceConfig, error) {
	var cfg server.InstanceConfig
	env := func(name string) (string, bool) {
		v, ok := lookupEnv(envName(name))
		return v, ok && v != ""
	}

	var file fileValues
	configPath := ""
	if f := fs.Lookup(configFlag); f != nil && f.Changed {
		configPath = f.Value.String()
	} else if v, ok := env(configFlag); ok {
		configPath = v
	}
	if configPath != "" {
		data, err := readFile(configPath)
		if err != nil {
			return cfg, fmt.Errorf("%w: config file: %w", ErrBadConfig, err)
		}
		file, err = parseConfigYAML(configPath, data)
		if err != nil {
			return cfg, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}

	for _, s := range runSettings() {
		var vals []string
		var src source
		if f := fs.Lookup(s.name); f != nil && f.Changed {
			vals, src = f.Value.(*rawFlag).vals, source{kind: "flag", name: s.name}
		} else if v, ok := env(s.name); ok {
			vals, src = []string{v}, source{kind: "env", name: envName(s.name)}
		} else if fv, ok := file[s.name]; ok {
			if len(fv.vals) > 1 && !s.repeatable {
				return cfg, fmt.Errorf("%w: %s: takes one value, not a list", ErrBadConfig, source{kind: "file", name: s.name, file: configPath, line: fv.line})
			}
			vals, src = fv.vals, source{kind: "file", name: s.name, file: configPath, line: fv.line}
		}
		for _, v := range vals {
			if err := s.apply(&cfg, v); err != nil {
				return cfg, fmt.Errorf("%w: invalid %s %q: %w", ErrBadConfig, src, v, err)
			}
		}
	}

	// Defaults, and the checks that span settings.
	cfg.Defaults()
	if err := checkHostPort(cfg.Advertise, false); err != nil {
		return cfg, fmt.Errorf("%w: advertise address %q (taken from listen): %w; set --advertise to an address other instances can reach", ErrBadConfig, cfg.Advertise, err)
	}
	return cfg, nil
}
