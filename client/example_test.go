package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/client"
)

// A client of a cluster of three instances asks whichever answers; the
// lease calls go to the group-0 leader wherever they land.
func Example() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Peers: []string{"127.0.0.1:3301", "127.0.0.1:3302", "127.0.0.1:3303"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	st, err := c.Status(ctx, false)
	if err != nil {
		fmt.Println("status:", err, "retryable:", client.IsRetryable(err))
		return
	}
	fmt.Println("cluster", st.GetClusterId(), "with", len(st.GetInstances()), "instances")

	lease, granted, err := c.Leases().Acquire(ctx, "reports/daily", "worker-7", 30*time.Second)
	if err != nil || !granted {
		fmt.Println("not granted:", err, lease.Holder)
		return
	}
	// ... work, passing lease.Ticket along with every write it fences ...
	_, _ = c.Leases().Release(ctx, "reports/daily", "worker-7", lease.Ticket)
}
