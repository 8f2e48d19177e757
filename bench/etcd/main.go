// Command etcd-bench loads an etcd cluster the way `shardkit bench` loads a
// shardkit one, so that the two can be compared side by side (see
// scripts/bench-vs-etcd.sh and docs/benchmarks.md).
//
//	etcd-bench --endpoints 127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793 \
//	    --workload put --clients 64 --duration 10s --format json
//
// N workers (--clients) share --conns client connections; each loops Put
// (or Get, etcd's default linearizable read) on the keys k/<worker>/<i mod
// keys> with a --timeout deadline per call, until --duration has passed.
// The result is one line of JSON (--format json) with the keys of `shardkit
// bench --format json` plus "system":"etcd", or a few lines of text.
//
// It is a module of its own so that etcd's client and its dependencies
// never enter shardkit's go.mod.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type config struct {
	endpoints []string
	workload  string
	clients   int
	conns     int
	duration  time.Duration
	valueSize int
	keys      int
	timeout   time.Duration
	format    string
	settle    bool
	watchers  int
}

const defaultEndpoints = "127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "etcd-bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	res, err := bench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "etcd-bench: %v\n", err)
		return 1
	}
	if err := writeResult(stdout, cfg.format, res); err != nil {
		fmt.Fprintf(stderr, "etcd-bench: %v\n", err)
		return 1
	}
	if res.Ops == 0 {
		fmt.Fprintf(stderr, "etcd-bench: no operation succeeded (%d errors)\n", res.Errors)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		cfg       config
		endpoints string
	)
	fs := flag.NewFlagSet("etcd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&endpoints, "endpoints", defaultEndpoints, "etcd client endpoints, comma-separated host:port (or http://host:port)")
	fs.StringVar(&cfg.workload, "workload", "put", "put or get (get: etcd's default, linearizable)")
	fs.IntVar(&cfg.clients, "clients", 1, "concurrent workers")
	fs.IntVar(&cfg.conns, "conns", 16, "client connections shared by the workers (at most one per worker)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the workers run")
	fs.IntVar(&cfg.valueSize, "value-size", 100, "bytes per value")
	fs.IntVar(&cfg.keys, "keys", 1000, "keys per worker: worker w uses k/<w>/<i mod keys>")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "deadline of each call")
	fs.StringVar(&cfg.format, "format", "text", "text or json")
	fs.IntVar(&cfg.watchers, "watchers", 0, "watches of the keys (prefix k/) beside the load; each put's value starts with its send time, and each event's delay from it is reported")
	fs.BoolVar(&cfg.settle, "settle", true, "get: after the preload, let etcd drop the preload's write buffer (see README)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: etcd-bench [flags]\n\n"+
			"Loads an etcd cluster with --clients workers for --duration and prints\n"+
			"ops/s, errors and latency percentiles.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.endpoints = append(cfg.endpoints, e)
		}
	}
	switch {
	case len(cfg.endpoints) == 0:
		return cfg, errors.New("--endpoints: no endpoint given")
	case cfg.workload != "put" && cfg.workload != "get":
		return cfg, fmt.Errorf("--workload %q: want put or get", cfg.workload)
	case cfg.clients < 1:
		return cfg, fmt.Errorf("--clients %d: want at least 1", cfg.clients)
	case cfg.conns < 1:
		return cfg, fmt.Errorf("--conns %d: want at least 1", cfg.conns)
	case cfg.duration <= 0:
		return cfg, fmt.Errorf("--duration %v: want a positive duration", cfg.duration)
	case cfg.valueSize < 0:
		return cfg, fmt.Errorf("--value-size %d: want 0 or more", cfg.valueSize)
	case cfg.keys < 1:
		return cfg, fmt.Errorf("--keys %d: want at least 1", cfg.keys)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("--timeout %v: want a positive duration", cfg.timeout)
	case cfg.format != "text" && cfg.format != "json":
		return cfg, fmt.Errorf("--format %q: want text or json", cfg.format)
	}
	return cfg, nil
}
