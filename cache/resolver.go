package cache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"

	"github.com/shardkit/shardkit/cache/internal/lines"
)

// Endpoint is one cache server: its datacenter and gRPC address.
type Endpoint struct {
	DC   string
	Addr string // host:port
}

// Resolver lists the cache servers. The client calls it every PingPeriod;
// an error keeps the previous list.
type Resolver interface {
	Resolve(ctx context.Context) ([]Endpoint, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context) ([]Endpoint, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context) ([]Endpoint, error) { return f(ctx) }

// StaticResolver always returns the same endpoints.
func StaticResolver(eps ...Endpoint) Resolver {
	eps = slices.Clone(eps)
	return ResolverFunc(func(context.Context) ([]Endpoint, error) { return slices.Clone(eps), nil })
}

// DNSResolver resolves one DNS name per datacenter (name:port, e.g.
// "goals.dc1.example:7000") to all its A/AAAA addresses. Resolver nil means
// net.DefaultResolver.
type DNSResolver struct {
	Names    map[string]string // dc -> host:port
	Resolver *net.Resolver
}

// Resolve implements Resolver.
func (r DNSResolver) Resolve(ctx context.Context) ([]Endpoint, error) {
	res := r.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	var out []Endpoint
	dcs := make([]string, 0, len(r.Names))
	for dc := range r.Names {
		dcs = append(dcs, dc)
	}
	slices.Sort(dcs)
	for _, dc := range dcs {
		host, port, err := net.SplitHostPort(r.Names[dc])
		if err != nil {
			return nil, fmt.Errorf("cache: DNS name of dc %q: %w; want host:port", dc, err)
		}
		addrs, err := res.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("cache: resolve dc %q: %w", dc, err)
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			out = append(out, Endpoint{DC: dc, Addr: net.JoinHostPort(a, port)})
		}
	}
	return out, nil
}

// FileResolver re-reads a file of endpoints on every Resolve: one
// "DC HOST:PORT" per line; blank lines and '#' comments are ignored.
type FileResolver struct{ Path string }

// Resolve implements Resolver.
func (r FileResolver) Resolve(context.Context) ([]Endpoint, error) {
	data, err := os.ReadFile(r.Path)
	if err != nil {
		return nil, fmt.Errorf("cache: read hosts file: %w", err)
	}
	eps, err := ParseEndpoints(data)
	if err != nil {
		return nil, fmt.Errorf("cache: hosts file %s: %w", r.Path, err)
	}
	return eps, nil
}

// ParseEndpoints reads the FileResolver format. Duplicate addresses are an
// error (a server lives in one datacenter).
func ParseEndpoints(data []byte) ([]Endpoint, error) {
	var out []Endpoint
	seen := map[string]string{}
	err := lines.Each(data, func(line int, text string, f []string) error {
		if len(f) != 2 {
			return fmt.Errorf("%w: line %d %q: want \"DC HOST:PORT\"", ErrInvalid, line, text)
		}
		ep := Endpoint{DC: f[0], Addr: f[1]}
		if err := ep.validate(); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if dc, dup := seen[ep.Addr]; dup {
			return fmt.Errorf("%w: line %d: address %s is listed twice (dc %q and %q)", ErrInvalid, line, ep.Addr, dc, ep.DC)
		}
		seen[ep.Addr] = ep.DC
		out = append(out, ep)
		return nil
	})
	if errors.Is(err, lines.ErrRead) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (ep Endpoint) validate() error {
	if ep.DC == "" || len(ep.DC) > 64 {
		return fmt.Errorf("%w: datacenter %q must have 1..64 bytes", ErrInvalid, ep.DC)
	}
	host, port, err := net.SplitHostPort(ep.Addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%w: address %q: want host:port", ErrInvalid, ep.Addr)
	}
	return nil
}
