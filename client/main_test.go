package client_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/tuple"
)

// clusterAddr is a one-instance cluster that this package's data tests and
// examples run against (started by TestMain, in this process: the code
// behind `shardkit run`).
var clusterAddr string

func TestMain(m *testing.M) {
	os.Exit(runWithCluster(m))
}

func runWithCluster(m *testing.M) int {
	dir, err := os.MkdirTemp("", "shardkit-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clusterAddr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// "boot": this instance bootstraps the cluster (no discovery, so
		// no rebootstrap for a supervisor to do).
		done <- server.RunInstance(ctx, server.InstanceConfig{Listener: lis, DataDir: dir, ShutdownTimeout: 5 * time.Second}, "boot")
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintln(os.Stderr, "the test cluster stopped with:", err)
			}
		case <-time.After(30 * time.Second):
		}
	}()
	if err := waitWritable(clusterAddr, done); err != nil {
		fmt.Fprintln(os.Stderr, "the test cluster did not start:", err)
		return 1
	}
	return m.Run()
}

// waitWritable waits until the cluster stores a row (the buckets are
// bootstrapped), with a space "ready" for the probe.
func waitWritable(addr string, done chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Peers: []string{addr}, Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	def := client.SpaceDef{Name: "ready", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}}, PrimaryKey: []string{"k"}}
	for {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("the instance ended: %w", err)
		default:
		}
		_, err := c.CreateSpace(ctx, def, true)
		if err == nil {
			_, err = c.Space("ready").Replace(ctx, tuple.Tuple{tuple.Uint(1)})
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
