package server

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/proc"
)

// LogSecurity writes the line that says how the instance's ports are
// secured: the first line of its log (docs/security.md).
func LogSecurity(log *slog.Logger, cfg InstanceConfig) {
	if cfg.CertsDir == "" {
		log.Warn("security: plaintext: started without --certs-dir, so anyone who reaches the gRPC and HTTP ports may read, write and expel; see docs/security.md")
		return
	}
	log.Info("security: mutual TLS on the gRPC port, HTTPS on the HTTP port", "certs_dir", cfg.CertsDir)
}

// security is an instance's TLS material and authorization (nil fields:
// plaintext).
type security struct {
	srv  *certs.Server
	peer credentials.TransportCredentials // dialing other instances
}

// loadSecurity reads --certs-dir and checks that the node certificate is
// valid for the address others reach this instance at.
func loadSecurity(cfg InstanceConfig) (*security, error) {
	if cfg.CertsDir == "" {
		return &security{}, nil
	}
	srv, err := certs.LoadServer(cfg.CertsDir)
	if err != nil {
		return nil, fmt.Errorf("--certs-dir %s: %w", cfg.CertsDir, err)
	}
	host, _, err := net.SplitHostPort(cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("advertise address %q: %w", cfg.Advertise, err)
	}
	leaf := srv.NodeCertificate().Leaf
	if err := srv.CA.Verify([]*x509.Certificate{leaf}, x509.ExtKeyUsageServerAuth, host, time.Now()); err != nil {
		return nil, fmt.Errorf("--certs-dir %s: the node %w", cfg.CertsDir, err)
	}
	if id, err := certs.Identify(leaf); err != nil || !id.Node {
		return nil, fmt.Errorf("--certs-dir %s: %s is not a node certificate (CN %q); make one with `shardkit cert create-node`", cfg.CertsDir, certs.NodeCert, leaf.Subject.CommonName)
	}
	return &security{srv: srv, peer: credentials.NewTLS(srv.ClientConfig())}, nil
}

func (s *security) secure() bool { return s.srv != nil }

// authorizer checks every call against the users of group 0.
func (s *security) authorizer(node *cluster.Node, procs *proc.Registry, sessions *auth.Sessions, log *slog.Logger) *auth.Authorizer {
	return auth.New(auth.Config{
		Sessions: sessions,
		PasswordHash: func(name string) string {
			return node.Meta().State().Users[name].GetPasswordHash()
		},
		CA: s.srv.CA,
		UserRole: func(name string) (auth.Role, bool) {
			r, ok := node.Meta().State().UserRole(name)
			if !ok {
				return auth.None, false
			}
			switch r {
			case metapb.UserRole_USER_ROLE_READER:
				return auth.Reader, true
			case metapb.UserRole_USER_ROLE_WRITER:
				return auth.Writer, true
			case metapb.UserRole_USER_ROLE_ADMIN:
				return auth.Admin, true
			}
			return auth.None, true
		},
		ProcedureWrites: func(name string) bool {
			p, ok := procs.Lookup(name)
			return ok && p.Mode != proc.RO
		},
		Logger: log,
	})
}

// serverOptions are the gRPC server's security options (none: plaintext).
func (s *security) serverOptions(authz *auth.Authorizer) []grpc.ServerOption {
	if !s.secure() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(s.srv.ServerConfig("h2"))),
		grpc.ChainStreamInterceptor(authz.Stream()),
	}
}

// httpHandler guards the HTTP handler; open are the console's login page
// and its static files (no secret in them), and the health probes when
// told.
func (s *security) httpHandler(h http.Handler, authz *auth.Authorizer, openHealth bool) http.Handler {
	if !s.secure() {
		return h
	}
	return authz.HTTP(h, func(path string) bool {
		return path == "/login" || strings.HasPrefix(path, "/console/") || (openHealth && strings.HasPrefix(path, "/health/"))
	})
}
