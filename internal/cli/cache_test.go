package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/server/servertest"
)

func runCache(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCacheInitLeases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "leases.db")
	code, out, errOut := runCache(t, "cache", "init-leases", "--dsn", db, "--dc", "dc1,dc2", "--shards", "3")
	if code != 0 || !strings.Contains(out, "dc dc2: 3 shards") {
		t.Fatalf("init-leases: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = runCache(t, "cache", "leases", "--dsn", db, "--dc", "dc1", "--dc", "dc2")
	if code != 0 || strings.Count(out, " free") != 6 || !strings.Contains(out, "[12297829382473034412, 18446744073709551616)") {
		t.Fatalf("leases: code %d, out %q, err %q", code, out, errOut)
	}
	// Same ranges again: nothing changes. Other ranges: refused.
	if code, _, errOut := runCache(t, "cache", "init-leases", "--dsn", db, "--dc", "dc1", "--shards", "3"); code != 0 {
		t.Fatalf("repeated init-leases: %d %s", code, errOut)
	}
	if code, _, errOut := runCache(t, "cache", "init-leases", "--dsn", db, "--dc", "dc1", "--shards", "4"); code == 0 || !strings.Contains(errOut, "already has other shards") {
		t.Fatalf("init-leases with other ranges: %d %s", code, errOut)
	}
	ranges := filepath.Join(dir, "ranges")
	if err := os.WriteFile(ranges, []byte("# counters\n0 1000\n1000 max\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCache(t, "cache", "init-leases", "--dsn", db, "--dc", "dc3", "--ranges", ranges); code != 0 {
		t.Fatalf("init-leases --ranges: %d %s", code, errOut)
	}
	if _, out, _ := runCache(t, "cache", "leases", "--dsn", db, "--dc", "dc3"); !strings.Contains(out, "[0, 1000)") {
		t.Fatalf("dc3 rows: %q", out)
	}
}

func TestCacheInitLeasesRejectsBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "leases.db")
	gap := filepath.Join(dir, "gap")
	if err := os.WriteFile(gap, []byte("0 10\n11 max\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--dc", "dc1", "--shards", "3"}, "--dsn is required"},
		{[]string{"--dsn", db, "--shards", "3"}, "--dc is required"},
		{[]string{"--dsn", db, "--dc", "dc1"}, "--shards N"},
		{[]string{"--dsn", db, "--dc", "dc1", "--shards", "0"}, "--shards N"},
		{[]string{"--dsn", db, "--dc", "dc1", "--shards", "3", "--ranges", gap}, "not both"},
		{[]string{"--dsn", db, "--dc", "dc1", "--ranges", gap}, "gap"},
		{[]string{"--dsn", db, "--dc", "dc1", "--ranges", filepath.Join(dir, "none")}, "no such file"},
		{[]string{"--dsn", db, "--dc", "dc1", "--shards", "3", "--driver", "oracle"}, "driver \"oracle\""},
		{[]string{"--dsn", db, "--dc", "dc1", "--shards", "3", "--table", "x;drop"}, "table name"},
	}
	for _, tc := range tests {
		code, _, errOut := runCache(t, append([]string{"cache", "init-leases"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("init-leases %v: code %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestCacheInitLeasesOnClusterLeases(t *testing.T) {
	t.Parallel()
	addr := servertest.OneInstanceCluster(t)
	code, out, errOut := runCache(t, "cache", "init-leases", "--driver", "shardkit", "--dsn", addr, "--dc", "dc1", "--shards", "2")
	if code != 0 || !strings.Contains(out, "dc dc1: 2 shards in cluster namespace") {
		t.Fatalf("init-leases on the cluster: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = runCache(t, "cache", "leases", "--driver", "shardkit", "--dsn", addr, "--dc", "dc1")
	if code != 0 || strings.Count(out, " free") != 2 {
		t.Fatalf("leases on the cluster: code %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := runCache(t, "cache", "init-leases", "--driver", "shardkit", "--dsn", addr, "--dc", "dc1", "--shards", "3"); code == 0 || !strings.Contains(errOut, "already has other shards") {
		t.Fatalf("init-leases with other ranges on the cluster: %d %s", code, errOut)
	}
}
