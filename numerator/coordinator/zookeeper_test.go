package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/coordinator/coordtest"
)

// TestZooKeeperConformance runs the suite against a real ZooKeeper named by
// SHARDKIT_TEST_ZOOKEEPER (host:port[,host:port]); each run uses its own
// znode tree.
func TestZooKeeperConformance(t *testing.T) {
	addr := os.Getenv("SHARDKIT_TEST_ZOOKEEPER")
	if addr == "" {
		t.Skip("SHARDKIT_TEST_ZOOKEEPER is unset: no ZooKeeper to test against (eval \"$(bash scripts/services.sh env)\")")
	}
	t.Parallel()
	base := fmt.Sprintf("/shardkit-test/numerator-%d", time.Now().UnixNano())
	cl := &clocks{m: map[*testing.T]*fakeClock{}}
	coordtest.Run(t, coordtest.Harness{
		New: func(t *testing.T, record string) coordinator.Coordinator {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			c, err := coordinator.NewZooKeeper(ctx, addr+base+"/"+recordKey(record), nil, cl.of(t).Now)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			cl.of(t).Advance(d)
		},
		Timeout: time.Minute,
	})
}
