package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/internal/auth"
)

// TestRulesCover fails when a method of any shardkit gRPC service has no
// entry in the rules table: every new method must say who may call it.
func TestRulesCover(t *testing.T) {
	t.Parallel()
	n := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "shardkit.") {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				m := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				n++
				if _, ok := auth.Rule(m); !ok {
					t.Errorf("%s has no access rule in internal/auth/rules.go", m)
				}
			}
		}
		return true
	})
	if n < 40 {
		t.Fatalf("only %d methods found: are the services' packages linked into the test?", n)
	}
	_ = raftv1.RaftTransportService_RaftMessages_FullMethodName
}

func chainOf(t *testing.T, dir, crt string) []*x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, crt))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return []*x509.Certificate{c}
}

func ctxWith(chain []*x509.Certificate, md metadata.MD) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: chain}},
	})
	if md != nil {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return ctx
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateNode(dir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"root", "rita", "walt", "ada", "nobody"} {
		if err := certs.CreateClient(dir, u, certs.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := certs.CreateClient(dir, "old", certs.Options{Now: func() time.Time { return time.Now().Add(-72 * time.Hour) }, Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := certs.CreateCA(other, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateClient(other, "root", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]auth.Role{"root": auth.Admin, "rita": auth.Reader, "walt": auth.Writer, "ada": auth.Admin}
	a := auth.New(auth.Config{
		CA:              ca,
		UserRole:        func(n string) (auth.Role, bool) { r, ok := roles[n]; return r, ok },
		ProcedureWrites: func(n string) bool { return n == "put" },
	})
	write, expel, raft := datav1.DataService_Write_FullMethodName, clusterv1.ClusterService_Expel_FullMethodName, raftv1.RaftTransportService_RaftMessages_FullMethodName
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
		req    any
		code   codes.Code
		want   string
	}{
		{"plaintext", context.Background(), write, nil, codes.Unauthenticated, "no peer information"},
		{"tls without a certificate", ctxWith(nil, nil), write, nil, codes.Unauthenticated, "no client certificate was presented"},
		{"another CA", ctxWith(chainOf(t, other, "client.root.crt"), nil), write, nil, codes.Unauthenticated, "not signed by this cluster's CA"},
		{"expired", ctxWith(chainOf(t, dir, "client.old.crt"), nil), write, nil, codes.Unauthenticated, "expired at"},
		{"unknown user", ctxWith(chainOf(t, dir, "client.nobody.crt"), nil), write, nil, codes.PermissionDenied, `the cluster has no user "nobody"`},
		{"reader writes", ctxWith(chainOf(t, dir, "client.rita.crt"), nil), write, nil, codes.PermissionDenied,
			`user "rita" (role reader) may not call /shardkit.data.v1.DataService/Write: it needs role writer`},
		{"reader DDL", ctxWith(chainOf(t, dir, "client.rita.crt"), nil), datav1.DataService_CreateSpace_FullMethodName, nil, codes.PermissionDenied, "it needs role admin"},
		{"reader reads", ctxWith(chainOf(t, dir, "client.rita.crt"), nil), datav1.DataService_Get_FullMethodName, nil, codes.OK, ""},
		{"reader calls ro", ctxWith(chainOf(t, dir, "client.rita.crt"), nil), datav1.DataService_Call_FullMethodName, &datav1.CallRequest{Procedure: "count"}, codes.OK, ""},
		{"reader calls rw", ctxWith(chainOf(t, dir, "client.rita.crt"), nil), datav1.DataService_MapCall_FullMethodName, &datav1.MapCallRequest{Procedure: "put"}, codes.PermissionDenied, "needs role writer"},
		{"writer writes", ctxWith(chainOf(t, dir, "client.walt.crt"), nil), write, nil, codes.OK, ""},
		{"writer leases", ctxWith(chainOf(t, dir, "client.walt.crt"), nil), clusterv1.ClusterService_AcquireLease_FullMethodName, nil, codes.OK, ""},
		{"writer expels", ctxWith(chainOf(t, dir, "client.walt.crt"), nil), expel, nil, codes.PermissionDenied, `user "walt" (role writer) may not call /shardkit.cluster.v1.ClusterService/Expel: it needs role admin`},
		{"admin expels", ctxWith(chainOf(t, dir, "client.ada.crt"), nil), expel, nil, codes.OK, ""},
		{"admin is no instance", ctxWith(chainOf(t, dir, "client.root.crt"), nil), raft, nil, codes.PermissionDenied, "only instances (node certificates) may"},
		{"node", ctxWith(chainOf(t, dir, "node.crt"), nil), raft, nil, codes.OK, ""},
		{"node on behalf of a reader", ctxWith(chainOf(t, dir, "node.crt"), metadata.Pairs(auth.UserHeader, "rita")), write, nil, codes.PermissionDenied, `user "rita" (role reader)`},
		{"node on behalf of a writer", ctxWith(chainOf(t, dir, "node.crt"), metadata.Pairs(auth.UserHeader, "walt")), write, nil, codes.OK, ""},
		{"a user's header is not trusted", ctxWith(chainOf(t, dir, "client.rita.crt"), metadata.Pairs(auth.UserHeader, "root")), write, nil, codes.PermissionDenied, `user "rita"`},
		{"unknown method", ctxWith(chainOf(t, dir, "client.root.crt"), nil), "/x.Y/Z", nil, codes.PermissionDenied, "no access rule"},
	} {
		ctx, err := a.Authorize(tc.ctx, tc.method, tc.req)
		if status.Code(err) != tc.code || (tc.want != "" && !strings.Contains(status.Convert(err).Message(), tc.want)) {
			t.Errorf("%s: %v, want %v containing %q", tc.name, err, tc.code, tc.want)
			continue
		}
		// No caller learns where the instance keeps its files.
		if err != nil && strings.Contains(err.Error(), dir) {
			t.Errorf("%s: the refusal names the instance's directory %s: %v", tc.name, dir, err)
		}
		if err == nil && tc.name == "writer writes" {
			md, _ := metadata.FromIncomingContext(ctx)
			if got := md.Get(auth.UserHeader); len(got) != 1 || got[0] != "walt" {
				t.Errorf("the user's call carries %s=%v, want walt", auth.UserHeader, got)
			}
		}
	}
}

// The HTTP guard lets a reader read and only an admin (or an instance)
// change or read the runtime profiles: a reader must not reach a test
// build's failpoints, nor an instance's insides.
func TestHTTPChangesNeedAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"rita", "ada", "nobody"} {
		if err := certs.CreateClient(dir, u, certs.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := certs.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]auth.Role{"rita": auth.Reader, "ada": auth.Admin}
	a := auth.New(auth.Config{CA: ca, UserRole: func(n string) (auth.Role, bool) { r, ok := roles[n]; return r, ok }})
	h := a.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := auth.HTTPUser(r.Context()); u == "" {
			t.Errorf("%s %s reached the handler with no user", r.Method, r.URL.Path)
		}
		w.WriteHeader(http.StatusNoContent)
	}), nil)
	for _, tc := range []struct {
		user, method, path string
		code               int
	}{
		{"rita", http.MethodGet, "/debug/failpoints/f", http.StatusNoContent},
		{"rita", http.MethodPut, "/debug/failpoints/f", http.StatusForbidden},
		{"rita", http.MethodDelete, "/debug/failpoints/f", http.StatusForbidden},
		{"ada", http.MethodPut, "/debug/failpoints/f", http.StatusNoContent},
		{"rita", http.MethodGet, "/metrics", http.StatusNoContent},
		{"rita", http.MethodGet, "/debug/pprof/heap", http.StatusForbidden},
		{"ada", http.MethodGet, "/debug/pprof/heap", http.StatusNoContent},
		// The API's operations reach the handler, which makes them as gRPC
		// calls for the user: the method table refuses there.
		{"rita", http.MethodPost, "/api/v1/replicasets/r1/weight", http.StatusNoContent},
		{"nobody", http.MethodPost, "/api/v1/replicasets/r1/weight", http.StatusForbidden},
	} {
		req := httptest.NewRequest(tc.method, "https://x"+tc.path, nil)
		req.TLS = &tls.ConnectionState{PeerCertificates: chainOf(t, dir, "client."+tc.user+".crt")}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("%s %s by %s: HTTP %d (%s), want %d", tc.method, req.URL.Path, tc.user, rec.Code, rec.Body.String(), tc.code)
		}
	}
}

// TestItemsAreCheckedAsTheirUnaryCalls: a Multi and a data Stream are
// open to readers, and each of their items is checked as its unary call
// would be (the router answers a refused item with AuthorizeItem's error).
func TestItemsAreCheckedAsTheirUnaryCalls(t *testing.T) {
	t.Parallel()
	a, dir := readerAndWriter(t)
	get := &datav1.MultiItem{Op: &datav1.MultiItem_Get{Get: &datav1.GetRequest{Space: "a"}}}
	write := &datav1.MultiItem{Op: &datav1.MultiItem_Write{Write: &datav1.WriteRequest{Bucket: 7}}}
	for _, c := range []struct {
		user              string
		stream, get, item string // "" allowed, else a part of the refusal
	}{
		{user: "rita", item: `user "rita" (role reader) may not call /shardkit.data.v1.DataService/Write: it needs role writer`},
		{user: "walt"},
		{user: "nobody", stream: `the cluster has no user "nobody"`, get: `the cluster has no user "nobody"`, item: `the cluster has no user "nobody"`},
	} {
		ctx := ctxWith(chainOf(t, dir, "client."+c.user+".crt"), nil)
		for _, check := range []struct {
			what, want string
			err        error
		}{
			{"the stream", c.stream, func() error { _, err := a.Authorize(ctx, datav1.DataService_Stream_FullMethodName, nil); return err }()},
			{"a Multi", c.stream, func() error {
				_, err := a.Authorize(ctx, datav1.DataService_Multi_FullMethodName, &datav1.MultiRequest{Items: []*datav1.MultiItem{get, write}})
				return err
			}()},
			{"a get", c.get, a.AuthorizeItem(ctx, get)},
			{"a write", c.item, a.AuthorizeItem(ctx, write)},
		} {
			switch {
			case check.want == "" && check.err != nil:
				t.Errorf("%s: %s refused: %v", c.user, check.what, check.err)
			case check.want != "" && (status.Code(check.err) != codes.PermissionDenied || !strings.Contains(check.err.Error(), check.want)):
				t.Errorf("%s: %s: %v, want PermissionDenied naming %q", c.user, check.what, check.err, check.want)
			}
		}
	}
}

// readerAndWriter is an authorizer whose cluster has users rita (reader)
// and walt (writer), and the directory of their certificates and of
// nobody's (a user the cluster does not have).
func readerAndWriter(t *testing.T) (*auth.Authorizer, string) {
	t.Helper()
	dir := t.TempDir()
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"rita", "walt", "nobody"} {
		if err := certs.CreateClient(dir, u, certs.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := certs.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]auth.Role{"rita": auth.Reader, "walt": auth.Writer}
	return auth.New(auth.Config{CA: ca, UserRole: func(n string) (auth.Role, bool) { r, ok := roles[n]; return r, ok }}), dir
}
