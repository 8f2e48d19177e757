package cluster

import (
	"context"
	"time"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/retry"
)

// selfSentinel runs on every instance: while the instance is alive and not
// shutting down, a target grade of Offline (set by the leader's sentinel
// while it could not hear from us) is answered by asking for Online again,
// with growing pauses. It starts once the start's own request for Online
// is recorded (started), and ignores a view of its record older than its
// latest request: a restarted instance, still catching up, sees the
// Offline of its absence, and asking again would add a second incarnation
// for one start.
func (n *Node) selfSentinel(ctx context.Context, started <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-started:
	}
	backoff := retry.Backoff{Initial: time.Second, Max: 30 * time.Second}
	wait := backoff.Next()
	for {
		if retry.Sleep(ctx, wait) != nil {
			return
		}
		if n.shuttingDown.Load() {
			return
		}
		inst := n.selfInstance()
		if inst == nil || inst.GetTargetGrade().GetVariant() != meta.Offline || inst.GetCommitIndex() < n.onlineIndex.Load() {
			backoff.Reset()
			wait = backoff.Next()
			continue
		}
		n.log.Info("target grade is Offline while this instance runs; asking for Online", "reason", inst.GetTargetReason())
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.PeerCall)
		ok := n.requestTarget(rctx, meta.Online, "auto-online")
		cancel()
		if !ok {
			wait = backoff.Next()
		}
	}
}
