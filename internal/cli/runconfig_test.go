package cli

import (
	"errors"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/statusview"
)

// loadFor parses args as `shardkit run` flags with the given environment
// and files and loads the configuration.
func loadFor(t *testing.T, args []string, env map[string]string, files map[string]string) (server.InstanceConfig, error) {
	t.Helper()
	fset := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addRunFlags(fset)
	if err := fset.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return loadRunConfig(fset, lookup, read)
}

func TestRunConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadFor(t, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := server.InstanceConfig{
		ClusterID: "demo", Listen: "127.0.0.1:3301", Advertise: "127.0.0.1:3301",
		Peers: []string{"127.0.0.1:3301"}, DataDir: ".", CacheSize: server.DefaultCacheSize, InitReplicationFactor: 1, InitBucketCount: 3000,
		AutoOfflineTimeout: 30 * time.Second, ShutdownTimeout: 30 * time.Second,
		LogLevel: "info", LogFormat: "text", HistoryRevisions: 1024, HistoryBytes: 1 << 20,
	}
	cfg.Logger = nil
	if !equalConfig(cfg, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", cfg, want)
	}
}

func equalConfig(a, b server.InstanceConfig) bool {
	a.Logger, b.Logger = nil, nil
	if len(a.FailureDomain) == 0 && len(b.FailureDomain) == 0 {
		a.FailureDomain, b.FailureDomain = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

func TestRunConfigSources(t *testing.T) {
	t.Parallel()
	const file = `
instance-id: i-file
cluster-id: c-file
listen: 127.0.0.1:4001
peer: [127.0.0.1:4001, "127.0.0.1:4002"]
data-dir: /var/lib/file
cache-size: 1GiB
replicaset-id: r-file
failure-domain: {dc: msk, rack: "3"}
init-replication-factor: 3
http-listen: 127.0.0.1:8001
auto-offline-timeout: 5s
shutdown-timeout: 7s
log-level: debug
log-format: json
`
	full := server.InstanceConfig{
		InstanceID: "i-file", ClusterID: "c-file", Listen: "127.0.0.1:4001", Advertise: "127.0.0.1:4001",
		Peers: []string{"127.0.0.1:4001", "127.0.0.1:4002"}, DataDir: "/var/lib/file", CacheSize: 1 << 30, ReplicasetID: "r-file",
		FailureDomain: map[string]string{"dc": "msk", "rack": "3"}, InitReplicationFactor: 3, InitBucketCount: 3000,
		HTTPListen: "127.0.0.1:8001", AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 7 * time.Second,
		LogLevel: "debug", LogFormat: "json", HistoryRevisions: 1024, HistoryBytes: 1 << 20,
	}
	with := func(f func(*server.InstanceConfig)) server.InstanceConfig {
		c := full
		c.Peers = slices.Clone(full.Peers)
		c.FailureDomain = maps.Clone(full.FailureDomain)
		f(&c)
		return c
	}
	files := map[string]string{"/etc/sk.yaml": file, "/etc/other.yaml": "instance-id: i-other\n"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want server.InstanceConfig
	}{
		{"file only", []string{"--config", "/etc/sk.yaml"}, nil, full},
		{"config path from env", nil, map[string]string{"SHARDKIT_CONFIG": "/etc/sk.yaml"}, full},
		{"config flag beats config env", []string{"--config", "/etc/sk.yaml"}, map[string]string{"SHARDKIT_CONFIG": "/etc/other.yaml"}, full},
		{"env beats file", []string{"--config", "/etc/sk.yaml"}, map[string]string{
			"SHARDKIT_INSTANCE_ID": "i-env", "SHARDKIT_PEER": "127.0.0.1:5001,127.0.0.1:5002",
			"SHARDKIT_FAILURE_DOMAIN": "dc=spb", "SHARDKIT_SHUTDOWN_TIMEOUT": "1m", "SHARDKIT_LOG_LEVEL": "WARN",
			"SHARDKIT_CACHE_SIZE": "96MiB",
		}, with(func(c *server.InstanceConfig) {
			c.CacheSize = 96 << 20
			c.InstanceID = "i-env"
			c.Peers = []string{"127.0.0.1:5001", "127.0.0.1:5002"}
			c.FailureDomain = map[string]string{"dc": "spb"}
			c.ShutdownTimeout = time.Minute
			c.LogLevel = "warn"
		})},
		{"flag beats env and file", []string{"--config", "/etc/sk.yaml", "--instance-id", "i-flag",
			"--peer", "127.0.0.1:6001", "--peer", "127.0.0.1:6002,127.0.0.1:6001", "--failure-domain", "dc=ekb",
			"--failure-domain", "rack=9", "--advertise", "10.0.0.1:4001", "--init-replication-factor", "2"},
			map[string]string{"SHARDKIT_INSTANCE_ID": "i-env", "SHARDKIT_PEER": "127.0.0.1:5001"},
			with(func(c *server.InstanceConfig) {
				c.InstanceID = "i-flag"
				c.Peers = []string{"127.0.0.1:6001", "127.0.0.1:6002"}
				c.FailureDomain = map[string]string{"dc": "ekb", "rack": "9"}
				c.Advertise = "10.0.0.1:4001"
				c.InitReplicationFactor = 2
			})},
		{"copy tables off by flag", []string{"--config", "/etc/sk.yaml", "--copy-tables=false"}, nil, with(func(c *server.InstanceConfig) { c.DisableCopyTables = true })},
		{"empty env var is unset", []string{"--config", "/etc/sk.yaml"}, map[string]string{"SHARDKIT_INSTANCE_ID": ""}, full},
		{"advertise defaults to listen, peers to advertise", []string{"--listen", "[::1]:4100"}, nil, server.InstanceConfig{
			ClusterID: "demo", Listen: "[::1]:4100", Advertise: "[::1]:4100", Peers: []string{"[::1]:4100"}, DataDir: ".", CacheSize: server.DefaultCacheSize,
			InitReplicationFactor: 1, InitBucketCount: 3000, AutoOfflineTimeout: 30 * time.Second, ShutdownTimeout: 30 * time.Second,
			LogLevel: "info", LogFormat: "text", HistoryRevisions: 1024, HistoryBytes: 1 << 20,
		}},
		{"listen on all interfaces with an advertise address", []string{"--listen", ":4100", "--advertise", "host.example:4100"}, nil, server.InstanceConfig{
			ClusterID: "demo", Listen: ":4100", Advertise: "host.example:4100", Peers: []string{"host.example:4100"}, DataDir: ".", CacheSize: server.DefaultCacheSize,
			InitReplicationFactor: 1, InitBucketCount: 3000, AutoOfflineTimeout: 30 * time.Second, ShutdownTimeout: 30 * time.Second,
			LogLevel: "info", LogFormat: "text", HistoryRevisions: 1024, HistoryBytes: 1 << 20,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := loadFor(t, tt.args, tt.env, files)
			if err != nil {
				t.Fatal(err)
			}
			if !equalConfig(got, tt.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRunConfigFileForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file string
		check      func(server.InstanceConfig) bool
	}{
		{"comma strings", "peer: 127.0.0.1:1,127.0.0.1:2\nfailure-domain: dc=a,rack=b\n", func(c server.InstanceConfig) bool {
			return slices.Equal(c.Peers, []string{"127.0.0.1:1", "127.0.0.1:2"}) && c.FailureDomain["rack"] == "b"
		}},
		{"empty file", "", func(c server.InstanceConfig) bool { return c.ClusterID == "demo" }},
		{"comments only", "# nothing\n", func(c server.InstanceConfig) bool { return c.ClusterID == "demo" }},
		{"null value is unset", "instance-id: ~\ncluster-id:\n", func(c server.InstanceConfig) bool {
			return c.InstanceID == "" && c.ClusterID == "demo"
		}},
		{"anchors and aliases", "listen: &a 127.0.0.1:7\npeer: [*a]\n", func(c server.InstanceConfig) bool {
			return slices.Equal(c.Peers, []string{"127.0.0.1:7"})
		}},
		{"copy tables off", "copy-tables: false\n", func(c server.InstanceConfig) bool { return c.DisableCopyTables }},
		{"copy tables on", "copy-tables: true\n", func(c server.InstanceConfig) bool { return !c.DisableCopyTables }},
		{"numbers as names", "instance-id: 1\nreplicaset-id: 2\n", func(c server.InstanceConfig) bool {
			return c.InstanceID == "1" && c.ReplicasetID == "2"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadFor(t, []string{"--config", "c.yaml"}, nil, map[string]string{"c.yaml": tt.file})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Errorf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestRunConfigRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		file  string
		wants []string // substrings of the one-line error
	}{
		{"failure domain without =", []string{"--failure-domain", "dc"}, nil, "", []string{"--failure-domain", `"dc"`, "key=value"}},
		{"failure domain empty value", []string{"--failure-domain", "dc="}, nil, "", []string{"--failure-domain", `"dc="`}},
		{"failure domain duplicate key", []string{"--failure-domain", "dc=a,dc=b"}, nil, "", []string{"--failure-domain", "twice"}},
		{"failure domain duplicate across flags", []string{"--failure-domain", "dc=a", "--failure-domain", "dc=b"}, nil, "", []string{"--failure-domain", "twice"}},
		{"failure domain bad character", []string{"--failure-domain", "dc=m s k"}, nil, "", []string{"--failure-domain", "not allowed"}},
		{"failure domain from env", nil, map[string]string{"SHARDKIT_FAILURE_DOMAIN": "dc=a,,rack=b"}, "", []string{"SHARDKIT_FAILURE_DOMAIN", `"dc=a,,rack=b"`}},
		{"log level", []string{"--log-level", "loud"}, nil, "", []string{"--log-level", `"loud"`, "debug, info, warn or error"}},
		{"log format", nil, map[string]string{"SHARDKIT_LOG_FORMAT": "xml"}, "", []string{"SHARDKIT_LOG_FORMAT", `"xml"`, "text or json"}},
		{"replication factor zero", []string{"--init-replication-factor", "0"}, nil, "", []string{"--init-replication-factor", `"0"`, "at least 1"}},
		{"bucket count zero", []string{"--init-bucket-count", "0"}, nil, "", []string{"--init-bucket-count", `"0"`, "from 1 to 1048576"}},
		{"bucket count too large", []string{"--init-bucket-count", "2000000"}, nil, "", []string{"--init-bucket-count", "from 1 to 1048576"}},
		{"replication factor negative", []string{"--init-replication-factor=-2"}, nil, "", []string{"--init-replication-factor", `"-2"`}},
		{"replication factor not a number", []string{"--init-replication-factor", "two"}, nil, "", []string{"--init-replication-factor", `"two"`}},
		{"listen without port", []string{"--listen", "127.0.0.1"}, nil, "", []string{"--listen", `"127.0.0.1"`, "host:port"}},
		{"listen bad port", []string{"--listen", "127.0.0.1:99999"}, nil, "", []string{"--listen", "99999"}},
		{"listen named port", []string{"--listen", "127.0.0.1:http"}, nil, "", []string{"--listen", "http"}},
		{"advertise without host", []string{"--advertise", ":3301"}, nil, "", []string{"--advertise", `":3301"`, "no host"}},
		{"advertise from listen without host", []string{"--listen", ":3301"}, nil, "", []string{"advertise", `":3301"`, "--advertise"}},
		{"peer empty item", []string{"--peer", "127.0.0.1:1,,127.0.0.1:2"}, nil, "", []string{"--peer", "empty address"}},
		{"peer not host:port", []string{"--peer", "localhost"}, nil, "", []string{"--peer", `"localhost"`}},
		{"cache size not a size", []string{"--cache-size", "lots"}, nil, "", []string{"--cache-size", `"lots"`, "MiB"}},
		{"cache size too small", []string{"--cache-size", "1MiB"}, nil, "", []string{"--cache-size", "smallest cache, 8MiB"}},
		{"cache size negative", nil, map[string]string{"SHARDKIT_CACHE_SIZE": "-1GiB"}, "", []string{"SHARDKIT_CACHE_SIZE", "non-negative"}},
		{"copy tables not a bool", nil, map[string]string{"SHARDKIT_COPY_TABLES": "maybe"}, "", []string{"SHARDKIT_COPY_TABLES", `"maybe"`, "true or false"}},
		{"duration", []string{"--shutdown-timeout", "soon"}, nil, "", []string{"--shutdown-timeout", `"soon"`, "duration"}},
		{"duration zero", []string{"--auto-offline-timeout", "0s"}, nil, "", []string{"--auto-offline-timeout", "positive"}},
		{"instance id", []string{"--instance-id", "i 1"}, nil, "", []string{"--instance-id", `"i 1"`}},
		{"http listen", []string{"--http-listen", "8080"}, nil, "", []string{"--http-listen", `"8080"`}},
		{"missing config file", []string{"--config", "/nope.yaml"}, nil, "", []string{"config file", "/nope.yaml"}},
		{"unknown yaml key", []string{"--config", "c.yaml"}, nil, "listen: 127.0.0.1:1\nlisten_addr: x\n", []string{"c.yaml line 2", `unknown key "listen_addr"`, "known keys"}},
		{"config key in the file", []string{"--config", "c.yaml"}, nil, "config: other.yaml\n", []string{`unknown key "config"`}},
		{"duplicate yaml key", []string{"--config", "c.yaml"}, nil, "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", []string{"line 2", "twice"}},
		{"yaml list for a scalar", []string{"--config", "c.yaml"}, nil, "listen: [127.0.0.1:1]\n", []string{"listen", "not a list"}},
		{"yaml mapping for peers", []string{"--config", "c.yaml"}, nil, "peer: {a: b}\n", []string{"peer", "not a mapping"}},
		{"yaml not a mapping", []string{"--config", "c.yaml"}, nil, "- a\n- b\n", []string{"c.yaml", "mapping"}},
		{"yaml two documents", []string{"--config", "c.yaml"}, nil, "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", []string{"one YAML document"}},
		{"yaml syntax", []string{"--config", "c.yaml"}, nil, "listen: [\n", []string{"c.yaml"}},
		{"yaml bad value", []string{"--config", "c.yaml"}, nil, "\nlog-level: trace\n", []string{"log-level (c.yaml line 2)", `"trace"`}},
		{"yaml nested failure domain", []string{"--config", "c.yaml"}, nil, "failure-domain: {dc: {x: y}}\n", []string{"failure-domain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadFor(t, tt.args, tt.env, map[string]string{"c.yaml": tt.file})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("error %v is not ErrBadConfig", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			for _, w := range tt.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]string{
		"instance-id": "SHARDKIT_INSTANCE_ID", "peer": "SHARDKIT_PEER",
		"init-replication-factor": "SHARDKIT_INIT_REPLICATION_FACTOR", "config": "SHARDKIT_CONFIG",
	} {
		if got := envName(setting); got != want {
			t.Errorf("envName(%q) = %q, want %q", setting, got, want)
		}
	}
}

func FuzzParseFailureDomain(f *testing.F) {
	for _, s := range []string{"dc=msk", "dc=msk,rack=3", " dc = msk , rack=3 ", "dc", "dc=", "=x", "a=b=c", "a=1,a=2", ",", "", "дц=мск", "a=b,\x00=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fd := map[string]string{}
		if err := parseFailureDomain(s, fd); err != nil {
			return
		}
		if len(fd) == 0 {
			t.Fatalf("%q accepted with no pairs", s)
		}
		// Accepted pairs print back to an equivalent value.
		again := map[string]string{}
		if err := parseFailureDomain(statusview.FormatFailureDomain(fd), again); err != nil || !maps.Equal(fd, again) {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, fd, again, err)
		}
		for k, v := range fd {
			if checkName(k) != nil || checkName(v) != nil {
				t.Fatalf("%q accepted bad pair %q=%q", s, k, v)
			}
		}
	})
}

func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"127.0.0.1:3301", "a:1,b:2,a:1", "[::1]:3301", "a:0", "a:65536", ":1", "a:1,,b:2", "a", "", "a:01", "a b:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := parsePeers(s, nil)
		if err != nil {
			return
		}
		if len(peers) == 0 {
			t.Fatalf("%q accepted with no peers", s)
		}
		seen := map[string]bool{}
		for _, p := range peers {
			if seen[p] {
				t.Fatalf("%q: duplicate %q in %v", s, p, peers)
			}
			seen[p] = true
			if err := checkHostPort(p, false); err != nil {
				t.Fatalf("%q: accepted bad address %q: %v", s, p, err)
			}
		}
		again, err := parsePeers(strings.Join(peers, ","), nil)
		if err != nil || !slices.Equal(again, peers) {
			t.Fatalf("%v does not round-trip: %v, %v", peers, again, err)
		}
	})
}

func FuzzParseConfigYAML(f *testing.F) {
	for _, s := range []string{
		"", "listen: 127.0.0.1:1\n", "peer: [a:1, b:2]\nfailure-domain: {dc: x}\n", "peer: &p a:1\nlisten: *p\n",
		"a: &a [*a]\n", "- x\n", "listen: [\n", "failure-domain: {dc: [x]}\n", "---\n---\n", "log-level: debug\nshutdown-timeout: 1s\n",
		"instance-id: !!binary aGVsbG8=\n", "{? [a]: b}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vals, err := parseConfigYAML("fuzz.yaml", data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		known := map[string]runSetting{}
		for _, s := range runSettings() {
			known[s.name] = s
		}
		for k, v := range vals {
			s, ok := known[k]
			if !ok {
				t.Fatalf("accepted unknown key %q", k)
			}
			if len(v.vals) == 0 {
				t.Fatalf("key %q with no values", k)
			}
			// Applying the values never panics.
			var cfg server.InstanceConfig
			for _, raw := range v.vals {
				_ = s.apply(&cfg, raw)
			}
		}
	})
}
