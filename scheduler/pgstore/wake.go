package pgstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/scheduler"
)

// listenRetry is how long a lost LISTEN connection waits before it
// connects again.
const listenRetry = time.Second

// Wakeups implements scheduler.Store: a connection of its own LISTENs on
// the schema's channel, where every write that queues an entry, marks an
// offer changed or records an after-save sends "<shard> <stage>" at commit
// ("<shard> " for a changed offer). After a lost connection it connects
// again and sends a Wakeup for everything (Shard -1), since notifications
// sent meanwhile are lost.
func (s *Store) Wakeups(ctx context.Context) (<-chan scheduler.Wakeup, error) {
	conn, err := s.listen(ctx, s.channel)
	if err != nil {
		return nil, err
	}
	ch := make(chan scheduler.Wakeup, 256)
	send := scheduler.NewWakeupSender(ch)
	go func() {
		defer close(ch)
		defer func() {
			if conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
		}()
		for ctx.Err() == nil {
			if conn == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(listenRetry):
				}
				if conn, err = s.listen(ctx, s.channel); err != nil {
					conn = nil
					continue
				}
				send.Send(scheduler.Wakeup{Shard: -1})
			}
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
				continue
			}
			if w, ok := parseWakeup(n.Payload); ok {
				send.Send(w)
			}
		}
	}()
	return ch, nil
}

func parseWakeup(p string) (scheduler.Wakeup, bool) {
	shard, stage, ok := strings.Cut(p, " ")
	if !ok {
		return scheduler.Wakeup{}, false
	}
	n, err := strconv.Atoi(shard)
	if err != nil {
		return scheduler.Wakeup{}, false
	}
	return scheduler.Wakeup{Shard: n, Stage: stage}, true
}

// listen opens a connection outside the pool that LISTENs on channel.
func (s *Store) listen(ctx context.Context, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, wrap("listen: connect", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, wrap("listen", err)
	}
	return conn, nil
}
