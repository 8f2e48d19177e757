package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// syncBuffer collects the instances' logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustCreate(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func userClient(t *testing.T, dir, user string, peers []string) *client.Client {
	t.Helper()
	creds, err := client.LoadCredentials(dir, user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(t.Context(), client.Config{Peers: peers, Timeout: 5 * time.Second, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A secure cluster of three instances forms over mutual TLS; users get
// exactly what their roles allow, also when their calls are forwarded to
// the group-0 leader; bad certificates are refused in words; the
// certificates rotate under load without a failed request; and no private
// key reaches the logs.
func TestSecureCluster(t *testing.T) {
	dir := t.TempDir()
	mustCreate(t, certs.CreateCA(dir, certs.Options{}))
	mustCreate(t, certs.CreateNode(dir, []string{"127.0.0.1", "localhost"}, certs.Options{}))
	for _, u := range []string{"root", "rita", "walt"} {
		mustCreate(t, certs.CreateClient(dir, u, certs.Options{}))
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var addrs []string
	var liss []net.Listener
	for range 3 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	for i := range 3 {
		servertest.Run(t, server.InstanceConfig{Listener: liss[i], Peers: addrs[:1], InitReplicationFactor: 3, CertsDir: dir,
			AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second, Logger: log.With("instance", addrs[i])})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := userClient(t, dir, "root", addrs)
	pollOK(t, "three instances online", func() error {
		st, err := root.Status(ctx, false)
		if err != nil {
			return err
		}
		n := 0
		for _, in := range st.GetInstances() {
			if in.GetInstance().GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of 3 online", n)
		}
		if st.GetSecurity() != "mutual TLS" {
			return fmt.Errorf("status says security %q", st.GetSecurity())
		}
		return nil
	})
	def := client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}}, PrimaryKey: []string{"k"}}
	pollOK(t, "the space", func() error {
		_, err := root.CreateSpace(ctx, def, true)
		if err == nil {
			_, err = root.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(0), tuple.String("v0")})
		}
		return err
	})
	mustCreate(t, root.CreateUser(ctx, "rita", "reader"))
	mustCreate(t, root.CreateUser(ctx, "walt", "writer"))

	// Each user asks every instance: the followers forward what only the
	// leader serves, and the leader checks the same user again.
	for _, addr := range addrs {
		rita := userClient(t, dir, "rita", []string{addr})
		walt := userClient(t, dir, "walt", []string{addr})
		pollOK(t, "rita reads at "+addr, func() error {
			_, _, err := rita.Space("kv").Select(ctx, []tuple.Value{tuple.Uint(0)}, client.RW)
			return err
		})
		_, err := rita.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("x")})
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `user "rita" (role reader) may not call /shardkit.data.v1.DataService/Write: it needs role writer`) {
			t.Fatalf("rita writes at %s: %v", addr, err)
		}
		if _, err := rita.CreateSpace(ctx, client.SpaceDef{Name: "x", Format: def.Format, PrimaryKey: []string{"k"}}, false); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "needs role admin") {
			t.Fatalf("rita's DDL at %s: %v", addr, err)
		}
		pollOK(t, "walt writes at "+addr, func() error {
			_, err := walt.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("w")})
			return err
		})
		if _, _, err := walt.Leases().Acquire(ctx, "sec/"+addr, "walt", time.Second); err != nil {
			t.Fatalf("walt's lease at %s: %v", addr, err)
		}
		_, err = walt.Expel(ctx, "i3", client.ExpelOptions{Force: true, Wait: time.Second})
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `user "walt" (role writer) may not call /shardkit.cluster.v1.ClusterService/Expel: it needs role admin`) {
			t.Fatalf("walt expels at %s: %v", addr, err)
		}
		if err := walt.CreateUser(ctx, "eve", "admin"); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("walt creates a user at %s: %v", addr, err)
		}
	}
	if err := root.DropUser(ctx, "root"); err == nil || !strings.Contains(err.Error(), "root cannot be dropped") {
		t.Fatalf("drop root: %v", err)
	}

	t.Run("refusals", func(t *testing.T) {
		// Plaintext to a TLS port: no answer.
		plain, err := client.New(ctx, client.Config{Peers: addrs[:1], Timeout: 2 * time.Second})
		mustCreate(t, err)
		defer plain.Close()
		if _, err := plain.Status(ctx, false); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("plaintext client: %v", err)
		}
		// A client certificate of another CA (trusting ours).
		other := t.TempDir()
		mustCreate(t, certs.CreateCA(other, certs.Options{}))
		mustCreate(t, certs.CreateClient(other, "root", certs.Options{}))
		mixed := t.TempDir()
		for _, f := range []string{"client.root.crt", "client.root.key"} {
			copyFile(t, filepath.Join(other, f), filepath.Join(mixed, f))
		}
		copyFile(t, filepath.Join(dir, "ca.crt"), filepath.Join(mixed, "ca.crt"))
		if _, err := userClient(t, mixed, "root", addrs[:1]).Status(ctx, false); !errors.Is(err, client.ErrUnauthenticated) || !strings.Contains(err.Error(), "not signed by this cluster's CA") {
			t.Errorf("client of another CA: %v", err)
		}
		// An expired certificate.
		mustCreate(t, certs.CreateClient(dir, "old", certs.Options{Now: func() time.Time { return time.Now().Add(-72 * time.Hour) }, Lifetime: time.Hour}))
		if _, err := userClient(t, dir, "old", addrs[:1]).Status(ctx, false); !errors.Is(err, client.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired at") {
			t.Errorf("expired client certificate: %v", err)
		}
		// A user the cluster does not know.
		mustCreate(t, certs.CreateClient(dir, "nobody", certs.Options{}))
		if _, err := userClient(t, dir, "nobody", addrs[:1]).Status(ctx, false); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `no user "nobody"`) {
			t.Errorf("unknown user: %v", err)
		}
		// The server's node certificate names other hosts than the one
		// dialed: the client refuses it.
		creds, err := client.LoadCredentials(dir, "root")
		mustCreate(t, err)
		elsewhere, err := client.New(ctx, client.Config{Peers: addrs[:1], Timeout: 2 * time.Second, Credentials: creds,
			DialOptions: []grpc.DialOption{grpc.WithAuthority("db.example.com")}})
		mustCreate(t, err)
		defer elsewhere.Close()
		if _, err := elsewhere.Status(ctx, false); err == nil || !strings.Contains(err.Error(), "is not valid for host") || !strings.Contains(err.Error(), "db.example.com") {
			t.Errorf("node certificate for another host: %v", err)
		}
		// An instance whose node certificate is for another host refuses to start.
		wrong := t.TempDir()
		copyFile(t, filepath.Join(dir, "ca.crt"), filepath.Join(wrong, "ca.crt"))
		copyFile(t, filepath.Join(dir, "ca.key"), filepath.Join(wrong, "ca.key"))
		mustCreate(t, certs.CreateNode(wrong, []string{"db.example.com"}, certs.Options{}))
		l, a := servertest.Listen(t)
		err = server.RunInstance(ctx, server.InstanceConfig{Listener: l, Peers: []string{a}, CertsDir: wrong, DataDir: t.TempDir()}, "")
		var ref *server.RefusedError
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), `not valid for host "127.0.0.1"`) {
			t.Errorf("instance with a node certificate for another host: %v", err)
		}
	})

	t.Run("rotation under load", func(t *testing.T) {
		// Writers go on while the node and client certificates are made
		// anew on disk; new clients (new handshakes) keep coming. Not one
		// request may fail.
		serial := func() string {
			conn, err := tls.Dial("tcp", addrs[0], &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // only reads the served certificate
			if err != nil {
				return err.Error()
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		before := serial()
		var done atomic.Bool
		var writes atomic.Int64
		errs := make(chan error, 64)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; !done.Load(); i++ {
					c := userClient(t, dir, "walt", addrs)
					for j := range 20 {
						k := uint64(1000 + w*100000 + i*20 + j)
						if _, err := c.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("r")}); err != nil {
							errs <- fmt.Errorf("write %d: %w", k, err)
							return
						}
						writes.Add(1)
					}
					c.Close()
				}
			})
		}
		for range 3 {
			mustCreate(t, certs.CreateNode(dir, []string{"127.0.0.1", "localhost"}, certs.Options{Overwrite: true}))
			mustCreate(t, certs.CreateClient(dir, "walt", certs.Options{Overwrite: true}))
			start := writes.Load()
			pollOK(t, "writes after a rotation", func() error {
				if writes.Load() < start+40 {
					return errors.New("not yet")
				}
				return nil
			})
		}
		done.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if after := serial(); after == before {
			t.Errorf("instance %s still serves certificate serial %s after the rotation", addrs[0], before)
		}
	})

	// No private key in the logs: neither a PEM block nor any line of one.
	text := logs.String()
	if strings.Contains(text, "PRIVATE KEY") {
		t.Fatal("the logs hold a PEM private key")
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "*.key"))
	for _, k := range keys {
		data, err := os.ReadFile(k)
		mustCreate(t, err)
		for _, line := range strings.Split(string(data), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(text, line) {
				t.Fatalf("the logs hold a line of %s", filepath.Base(k))
			}
		}
	}
	if !strings.Contains(text, "security: mutual TLS") {
		t.Error("no instance logged how it is secured")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	mustCreate(t, err)
	mustCreate(t, os.WriteFile(to, data, 0o600))
}

// A stranger (a client certificate of another CA) learns no path of the
// instance, over gRPC or HTTPS: the refusal names both CAs by subject and
// key fingerprint, so that the operator sees they differ, and the
// instance logs the whole refusal, with the path of its ca.crt and the
// stranger's address, at warn. A user the cluster does not know is told
// over HTTPS, as over gRPC, how an admin adds it.
func TestSecureRefusalsNameNoServerPath(t *testing.T) {
	dir := t.TempDir()
	mustCreate(t, certs.CreateCA(dir, certs.Options{}))
	mustCreate(t, certs.CreateNode(dir, []string{"127.0.0.1"}, certs.Options{}))
	for _, u := range []string{"root", "nobody"} {
		mustCreate(t, certs.CreateClient(dir, u, certs.Options{}))
	}
	other := t.TempDir()
	mustCreate(t, certs.CreateCA(other, certs.Options{}))
	mustCreate(t, certs.CreateClient(other, "root", certs.Options{}))
	// The stranger trusts our CA (so that it talks to us) but holds a
	// certificate of its own CA.
	stranger := t.TempDir()
	for _, f := range []string{"client.root.crt", "client.root.key"} {
		copyFile(t, filepath.Join(other, f), filepath.Join(stranger, f))
	}
	copyFile(t, filepath.Join(dir, "ca.crt"), filepath.Join(stranger, "ca.crt"))
	var want []string // what the refusal names: both CAs
	for _, d := range []string{dir, other} {
		list, err := certs.List(d)
		mustCreate(t, err)
		for _, in := range list {
			if in.IsCA {
				want = append(want, in.Subject, in.KeyFingerprint)
			}
		}
	}
	if len(want) != 4 || want[0] == want[2] || want[1] == want[3] {
		t.Fatalf("the two CAs are not told apart by subject and fingerprint: %q", want)
	}
	checkRefusal := func(how, text string) {
		t.Helper()
		if !strings.Contains(text, "not signed by this cluster's CA") {
			t.Errorf("%s: the refusal does not say the certificate is of another CA: %s", how, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the refusal does not name %q: %s", how, w, text)
			}
		}
		if strings.Contains(text, dir) || strings.Contains(text, "ca.crt") {
			t.Errorf("%s: the refusal names the instance's path %s: %s", how, dir, text)
		}
	}

	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, addr := servertest.Listen(t)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	mustCreate(t, err)
	httpAddr := hl.Addr().String()
	mustCreate(t, hl.Close())
	servertest.Run(t, server.InstanceConfig{Listener: l, Peers: []string{addr}, InitReplicationFactor: 1, CertsDir: dir, HTTPListen: httpAddr,
		AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second, Logger: log})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	root := userClient(t, dir, "root", []string{addr})
	pollOK(t, "the instance online", func() error {
		_, _, err := root.Leases().Acquire(ctx, "sec/ready", "probe", time.Millisecond)
		return err
	})

	// gRPC.
	sc := userClient(t, stranger, "root", []string{addr})
	var grpcErr error
	pollOK(t, "the stranger's call answered", func() error {
		_, grpcErr = sc.Status(ctx, false)
		if !errors.Is(grpcErr, client.ErrUnauthenticated) {
			return fmt.Errorf("want Unauthenticated, got %w", grpcErr)
		}
		return nil
	})
	checkRefusal("gRPC", grpcErr.Error())

	// HTTPS.
	get := func(user, certsDir string) (int, string, error) {
		cfg, err := certs.LoadClient(certsDir, user)
		if err != nil {
			return 0, "", err
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + httpAddr + "/api/v1/cluster")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	var code int
	var body string
	pollOK(t, "the stranger's HTTPS request answered", func() error {
		code, body, err = get("root", stranger)
		return err
	})
	if code != http.StatusUnauthorized {
		t.Errorf("the stranger over HTTPS: HTTP %d, want 401: %s", code, body)
	}
	checkRefusal("HTTPS", body)
	pollOK(t, "the unknown user's HTTPS request answered", func() error {
		code, body, err = get("nobody", dir)
		return err
	})
	if hint := "the cluster has no user \"nobody\"; an admin adds it with `shardkit user create nobody --role reader`"; code != http.StatusForbidden || !strings.Contains(body, hint) {
		t.Errorf("an unknown user over HTTPS: HTTP %d %s; want 403 saying: %s", code, body, hint)
	}

	// The instance's log has the whole refusal: its path, the stranger's
	// address, at warn.
	caPath := filepath.Join(dir, "ca.crt")
	for _, what := range []string{"call refused: the caller did not authenticate", "HTTP request refused: the caller did not authenticate"} {
		found := false
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, what) && strings.Contains(line, "level=WARN") && strings.Contains(line, caPath) && strings.Contains(line, "remote=127.0.0.1:") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no WARN line %q naming %s and the remote address in the log:\n%s", what, caPath, logs.String())
		}
	}
}
