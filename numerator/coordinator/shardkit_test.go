package coordinator_test

// The shardkit backend runs the conformance suite against a real
// one-instance cluster started in this test process (internal/server, the
// code behind `shardkit run`, without its supervisor). Only this test file
// imports internal/server/servertest; the backend speaks only api/cluster/v1.

import (
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/coordinator/coordtest"
)

func TestShardkitConformance(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	coordtest.Run(t, coordtest.Harness{
		New: func(t *testing.T, record string) coordinator.Coordinator {
			t.Helper()
			c, err := coordinator.NewShardkit(addr + "/test/" + recordKey(record))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		// Expiry is judged by the cluster leader's clock: time must pass.
		Advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			time.Sleep(d)
		},
		// Long enough that an RPC under -race on a loaded machine never
		// outlives a lock the suite expects to hold (renew leaves Timeout/3).
		Timeout: 3 * time.Second,
	})
}

func TestParseShardkitAddr(t *testing.T) {
	for _, tc := range []struct {
		in    string
		hosts int
		name  string
		bad   bool
	}{
		{in: "127.0.0.1:3301", hosts: 1, name: coordinator.DefaultShardkitLease},
		{in: "a:1,b:2/idx/main", hosts: 2, name: "idx/main"},
		{in: "", bad: true},
		{in: "a:1/", bad: true},
		{in: "/only-a-name", bad: true},
	} {
		hosts, name, err := coordinator.ParseShardkitAddr(tc.in)
		if tc.bad != (err != nil) {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		if !tc.bad && (len(hosts) != tc.hosts || name != tc.name) {
			t.Errorf("%q: %v %q", tc.in, hosts, name)
		}
	}
}
