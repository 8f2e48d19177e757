package supervisor

import (
	"time"

	"github.com/shardkit/shardkit/retry"
)

// restartBackoff is the delays before restarts after crashes: initial,
// then doubling up to maxDelay (an initial above maxDelay is cut to it).
func restartBackoff(initial, maxDelay time.Duration) retry.Backoff {
	return retry.Backoff{Initial: min(initial, maxDelay), Max: maxDelay}
}
