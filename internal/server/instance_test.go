package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
)

// proc is an instance run in-process, with the supervisor's rebootstrap
// loop around it.
type proc struct {
	cfg    InstanceConfig
	cancel context.CancelFunc
	done   chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startProc(t *testing.T, cfg InstanceConfig) *proc {
	t.Helper()
	if os.Getenv("SHARDKIT_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("listen", cfg.Listen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() {
		entry := ""
		for {
			err := RunInstance(ctx, cfg, entry)
			var rb *RebootstrapError
			if errors.As(err, &rb) {
				entries, _ := os.ReadDir(cfg.DataDir)
				for _, e := range entries {
					_ = os.RemoveAll(filepath.Join(cfg.DataDir, e.Name()))
				}
				entry = rb.Entrypoint
				continue
			}
			if err != nil && ctx.Err() == nil {
				t.Logf("instance %s ended: %v", cfg.Listen, err)
			}
			p.done <- err
			return
		}
	}()
	t.Cleanup(func() { _ = p.stop() })
	return p
}

func (p *proc) stop() error {
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(60 * time.Second):
		return errors.New("instance did not stop")
	}
}

func getStatus(t *testing.T, addr string) (*clusterv1.GetStatusResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return clusterv1.NewClusterServiceClient(conn).GetStatus(ctx, &clusterv1.GetStatusRequest{})
}

func waitAllOnline(t *testing.T, addr string, n int) *clusterv1.GetStatusResponse {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *clusterv1.GetStatusResponse
	for time.Now().Before(deadline) {
		st, err := getStatus(t, addr)
		if err == nil {
			last = st
			online := 0
			for _, is := range st.GetInstances() {
				if is.GetInstance().GetCurrentGrade().GetVariant() == meta.Online {
					online++
				}
			}
			if online == n && len(st.GetInstances()) == n {
				return st
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("not all %d instances Online: %v", n, last)
	return nil
}

func TestThreeInstancesFormOneCluster(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, freeAddr(t))
	}
	var procs []*proc
	for i, a := range addrs {
		procs = append(procs, startProc(t, InstanceConfig{
			Listen: a, Peers: addrs, DataDir: filepath.Join(t.TempDir(), fmt.Sprint(i)),
			AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
		}))
	}
	st := waitAllOnline(t, addrs[0], 3)
	ids := map[uint64]bool{}
	for _, is := range st.GetInstances() {
		ids[is.GetInstance().GetRaftId()] = true
	}
	if !ids[1] || len(ids) != 3 {
		t.Fatalf("raft ids %v, want 1, 2, 3", ids)
	}
	if len(st.GetVoters()) != 3 {
		t.Fatalf("voters %v, want 3", st.GetVoters())
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			if err := p.stop(); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	wg.Wait()
}
