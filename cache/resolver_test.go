package cache_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shardkit/shardkit/cache"
)

func TestParseEndpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []cache.Endpoint
		ok   bool
	}{
		{"two", "# goals\ndc1 127.0.0.1:7001\n\n  dc2   [::1]:7002  \n", []cache.Endpoint{{"dc1", "127.0.0.1:7001"}, {"dc2", "[::1]:7002"}}, true},
		{"empty", "", nil, true},
		{"no port", "dc1 127.0.0.1\n", nil, false},
		{"one field", "127.0.0.1:7001\n", nil, false},
		{"three fields", "dc1 a:1 b:2\n", nil, false},
		{"duplicate", "dc1 a:1\ndc2 a:1\n", nil, false},
		{"long dc", string(make([]byte, 65)) + " a:1\n", nil, false},
	}
	for _, tc := range tests {
		got, err := cache.ParseEndpoints([]byte(tc.in))
		if tc.ok != (err == nil) {
			t.Fatalf("%s: ParseEndpoints = %v, %v", tc.name, got, err)
		}
		if !tc.ok && !errors.Is(err, cache.ErrInvalid) {
			t.Fatalf("%s: error %v is not ErrInvalid", tc.name, err)
		}
		if tc.ok && !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseEndpoints(f *testing.F) {
	f.Add([]byte("dc1 127.0.0.1:7001\ndc2 [::1]:7002\n"))
	f.Add([]byte("# c\n\ndc a:b\n"))
	f.Add([]byte("dc1 a:1\ndc1 a:1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		eps, err := cache.ParseEndpoints(data)
		if err != nil {
			if !errors.Is(err, cache.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, ep := range eps {
			if ep.DC == "" || seen[ep.Addr] {
				t.Fatalf("accepted %v", eps)
			}
			if _, _, err := net.SplitHostPort(ep.Addr); err != nil {
				t.Fatalf("accepted address %q: %v", ep.Addr, err)
			}
			seen[ep.Addr] = true
		}
	})
}

func TestFileResolverRereads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hosts")
	r := cache.FileResolver{Path: path}
	if _, err := r.Resolve(t.Context()); err == nil {
		t.Fatalf("Resolve of a missing file succeeded")
	}
	for _, content := range []string{"dc1 a:1\n", "dc1 a:1\ndc2 b:2\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := r.Resolve(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want, _ := cache.ParseEndpoints([]byte(content))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Resolve = %v, want %v", got, want)
		}
	}
}

func TestDNSResolver(t *testing.T) {
	t.Parallel()
	r := cache.DNSResolver{Names: map[string]string{"dc1": "localhost:7001"}}
	got, err := r.Resolve(t.Context())
	if err != nil {
		t.Fatalf("Resolve localhost: %v", err)
	}
	found := false
	for _, ep := range got {
		if ep.DC != "dc1" {
			t.Fatalf("endpoint %v has the wrong dc", ep)
		}
		if ep.Addr == "127.0.0.1:7001" {
			found = true
		}
	}
	if !found {
		t.Fatalf("localhost did not resolve to 127.0.0.1: %v", got)
	}
	if _, err := (cache.DNSResolver{Names: map[string]string{"dc1": "no-port"}}).Resolve(t.Context()); err == nil {
		t.Fatalf("a name without port resolved")
	}
}
