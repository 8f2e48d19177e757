package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
	"github.com/shardkit/shardkit/internal/storage"
)

// RaftDemoOptions configures RunRaftDemo.
type RaftDemoOptions struct {
	Members  int           // group members (default 3)
	Dir      string        // data root (default: a new temp dir, removed at the end)
	Duration time.Duration // 0: until ctx ends
	Logger   *slog.Logger
}

type demoMember struct {
	id   multiraft.NodeID
	db   *pebble.DB
	host *multiraft.Host
	tr   *multiraft.GRPCTransport
	srv  *grpc.Server
	grp  *multiraft.Group
}

// RunRaftDemo runs one raft group of several members in this process, each
// with its own Pebble database and gRPC server on loopback, writes a key
// every 100ms and prints the members' status every second.
func RunRaftDemo(ctx context.Context, o RaftDemoOptions, out io.Writer) error {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "shardkit-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	resolver := multiraft.NewStaticResolver(nil)
	var ids []multiraft.NodeID
	for i := 1; i <= o.Members; i++ {
		ids = append(ids, multiraft.NodeID(i))
	}
	var members []*demoMember
	defer func() {
		for _, m := range members {
			m.srv.Stop()
			m.host.Stop()
			m.tr.Close()
			_ = m.db.Close()
		}
	}()
	for _, id := range ids {
		m, err := startDemoMember(o, id, ids, resolver)
		if err != nil {
			return err
		}
		members = append(members, m)
	}
	fmt.Fprintf(out, "raft demo: %d members on loopback, data in %s; Ctrl+C to stop\n", o.Members, o.Dir)
	write := time.NewTicker(100 * time.Millisecond)
	defer write.Stop()
	report := time.NewTicker(time.Second)
	defer report.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "stopping after %d writes\n", n)
			return nil
		case <-write.C:
			for _, m := range members {
				if m.grp.Status().Role != "leader" {
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				cmd := kvsm.Command{Op: kvsm.OpPut, Key: []byte("counter"), Value: fmt.Appendf(nil, "%d", n+1)}
				if _, err := m.grp.Propose(pctx, cmd.Encode()); err == nil {
					n++
				}
				cancel()
			}
		case <-report.C:
			fmt.Fprintf(out, "%-6s %-10s %-6s %-8s %-8s %-8s\n", "member", "role", "term", "leader", "commit", "applied")
			for _, m := range members {
				st := m.grp.Status()
				fmt.Fprintf(out, "%-6d %-10s %-6d %-8d %-8d %-8d\n", st.Node, st.Role, st.Term, st.Leader, st.Commit, st.Applied)
			}
		}
	}
}

func startDemoMember(o RaftDemoOptions, id multiraft.NodeID, ids []multiraft.NodeID, resolver *multiraft.StaticResolver) (*demoMember, error) {
	dir := filepath.Join(o.Dir, fmt.Sprintf("member-%d", id))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	resolver.Set(id, lis.Addr().String())
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{Logger: o.Logger})
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	tr := multiraft.NewGRPCTransport(multiraft.GRPCTransportConfig{NodeID: id, Resolver: resolver, Logger: o.Logger})
	h, err := multiraft.NewHost(multiraft.Config{
		NodeID: id, DB: db, SnapshotDir: filepath.Join(dir, "snapshots"), Transport: tr, Logger: o.Logger,
	})
	if err != nil {
		_ = lis.Close()
		_ = db.Close()
		return nil, err
	}
	tr.SetHandler(h)
	srv := grpc.NewServer(multiraft.ServerOptions()...)
	tr.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	m := &demoMember{id: id, db: db, host: h, tr: tr, srv: srv}
	if err := h.Start(); err != nil {
		return m, err
	}
	g, err := h.OpenGroup(multiraft.GroupConfig{ID: 1, Members: ids, StateMachine: kvsm.New(1)})
	if err != nil {
		return m, err
	}
	m.grp = g
	return m, nil
}
