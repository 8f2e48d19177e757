package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// On a cluster with security on, a backup is an admin's: a writer's is
// refused, naming the call and the role it needs; root's goes through
// (and the cluster it came from, having a space, refuses its restore).
func TestBackupNeedsTheAdminRole(t *testing.T) {
	dir := t.TempDir()
	for _, err := range []error{
		certs.CreateCA(dir, certs.Options{}),
		certs.CreateNode(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}),
		certs.CreateClient(dir, "root", certs.Options{}),
		certs.CreateClient(dir, "walt", certs.Options{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	lis, addr := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: lis, CertsDir: dir, InitBucketCount: backupBuckets,
		AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second})
	creds, err := client.LoadCredentials(dir, "root")
	if err != nil {
		t.Fatal(err)
	}
	root, err := client.New(t.Context(), client.Config{Peers: []string{addr}, Timeout: 2 * time.Second, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	pollFor(t, "a row stored", func() bool {
		_, err := root.CreateSpace(t.Context(), client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}}, PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = root.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(1)})
		}
		return err == nil
	})
	if err := root.CreateUser(t.Context(), "walt", client.RoleWriter); err != nil {
		t.Fatal(err)
	}
	as := func(user string, args ...string) (int, string, string) {
		return runMain(t, append(args, "--peer", addr, "--certs-dir", dir, "--user", user)...)
	}
	code, _, errOut := as("walt", "backup", "create", "--to", filepath.Join(t.TempDir(), "w"))
	if code == 0 || !strings.Contains(errOut, `user "walt" (role writer) may not call`) || !strings.Contains(errOut, "it needs role admin") {
		t.Fatalf("a writer's backup: exit %d: %s", code, errOut)
	}
	// The capture's own call, asked directly.
	wcreds, err := client.LoadCredentials(dir, "walt")
	if err != nil {
		t.Fatal(err)
	}
	walt, err := client.New(t.Context(), client.Config{Peers: []string{addr}, Timeout: 2 * time.Second, Credentials: wcreds})
	if err != nil {
		t.Fatal(err)
	}
	defer walt.Close()
	conn, err := walt.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := rspb.NewBucketServiceClient(conn).BackupBuckets(t.Context(), &rspb.BackupBucketsRequest{ReplicasetId: "r1", Buckets: []uint32{1}})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "BackupBuckets: it needs role admin") {
		t.Fatalf("a writer's BackupBuckets: %v", err)
	}
	b := filepath.Join(t.TempDir(), "r")
	if code, out, errOut := as("root", "backup", "create", "--to", b); code != 0 {
		t.Fatalf("root's backup: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = as("walt", "backup", "restore", "--from", b)
	if code == 0 || !strings.Contains(errOut, "the cluster has spaces (kv)") {
		t.Fatalf("a restore into the source cluster: exit %d: %s", code, errOut)
	}
}
