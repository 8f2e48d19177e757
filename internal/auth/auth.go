package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/certs"
)

// UserHeader carries, on a call an instance makes on behalf of a user
// (forwarding), that user's name. It is trusted only on a connection made
// with a node certificate; from a user it is replaced by the user's own
// name before the call goes on.
const UserHeader = "x-shardkit-user"

// Config configures an Authorizer.
type Config struct {
	// CA verifies the callers' certificates (required).
	CA *certs.CA
	// UserRole returns a user's role as group 0 has it now (root: Admin);
	// false when the cluster does not know the user (required).
	UserRole func(name string) (Role, bool)
	// ProcedureWrites reports whether a stored procedure is declared rw;
	// false for ro and unknown ones (the call is then refused by the
	// handler, not here). Nil: every procedure needs a writer.
	ProcedureWrites func(name string) bool
	// Now tells the time (default time.Now).
	Now func() time.Time
	// Logger gets one line per refusal (discarded when nil).
	Logger *slog.Logger
	// Sessions, when set, admits the web console's password logins over
	// HTTPS (HTTP), and PasswordHash returns a user's password hash now
	// ("" for none): a session ends when it changes.
	Sessions     *Sessions
	PasswordHash func(user string) string
}

// Authorizer checks every call of a secure instance. Make it with New.
type Authorizer struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	cache map[*x509.Certificate]verdict // per connection's leaf; bounded
}

type verdict struct {
	id  certs.Identity
	err error  // for the caller: names no path of this instance
	log string // the whole refusal, for this instance's log
	gen uint64 // the CA's generation it was checked with
}

const maxCache = 4096

// New returns an Authorizer.
func New(cfg Config) *Authorizer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{cfg: cfg, log: log, cache: map[*x509.Certificate]verdict{}}
}

// Caller is who a call is made by.
type Caller struct {
	// User is the user the call is checked for ("" for an instance acting
	// on its own).
	User string
	// Via is true when an instance made the call on User's behalf.
	Via bool
}

// Identify reads and verifies the certificate of the connection a call
// came on. The error is a gRPC Unauthenticated status that says what was
// wrong without naming this instance's paths (the caller has not
// authenticated); Authorize logs the whole refusal.
func (a *Authorizer) Identify(ctx context.Context) (certs.Identity, error) {
	id, v := a.identify(ctx)
	return id, v.err
}

func (a *Authorizer) identify(ctx context.Context) (certs.Identity, verdict) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return certs.Identity{}, refusal(status.Error(codes.Unauthenticated, "no peer information on the call"))
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return certs.Identity{}, refusal(status.Error(codes.Unauthenticated, "this cluster requires TLS with a client certificate: pass --certs-dir DIR (with ca.crt and client.<user>.crt) and --user NAME"))
	}
	v := a.identifyChain(ti.State.PeerCertificates)
	return v.id, v
}

// refusal is a verdict whose caller may read all of it.
func refusal(err error) verdict { return verdict{err: err, log: status.Convert(err).Message()} }

func (a *Authorizer) identifyChain(chain []*x509.Certificate) verdict {
	if len(chain) == 0 {
		return refusal(status.Error(codes.Unauthenticated, "no client certificate was presented: this cluster requires one; pass --certs-dir DIR (with client.<user>.crt) and --user NAME"))
	}
	leaf, now, gen := chain[0], a.cfg.Now(), a.cfg.CA.Generation()
	a.mu.Lock()
	v, ok := a.cache[leaf]
	a.mu.Unlock()
	if ok && v.gen == gen && now.Before(leaf.NotAfter) && now.After(leaf.NotBefore) {
		return v
	}
	v = verdict{gen: gen}
	if err := a.cfg.CA.Verify(chain, x509.ExtKeyUsageClientAuth, "", now); err != nil {
		v.err = status.Errorf(codes.Unauthenticated, "client certificate refused: %s", certs.PeerText(err))
		v.log = "client certificate refused: " + err.Error()
	} else if v.id, err = certs.Identify(leaf); err != nil {
		v.err = status.Errorf(codes.Unauthenticated, "client certificate refused: %v", err)
		v.log = status.Convert(v.err).Message()
	}
	a.mu.Lock()
	if len(a.cache) >= maxCache {
		clear(a.cache)
	}
	a.cache[leaf] = v
	a.mu.Unlock()
	return v
}

// remoteAddr is the address a call came from, for the log.
func remoteAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// Authorize decides one call of method (a full gRPC method name; req is
// its request, nil for a stream) and returns the context the handler gets:
// for a user's call, with UserHeader set to that user, so that a forwarded
// call is checked for the same user where it lands.
func (a *Authorizer) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	id, v := a.identify(ctx)
	if v.err != nil {
		a.log.Warn("call refused: the caller did not authenticate", "remote", remoteAddr(ctx), "method", method, "err", v.log)
		return ctx, v.err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var c Caller
	if id.Node {
		vs := md.Get(UserHeader)
		if len(vs) == 0 {
			return ctx, nil // an instance on its own: everything the cluster needs
		}
		c = Caller{User: vs[0], Via: true}
		if err := certs.CheckUser(c.User); err != nil && c.User != certs.RootUser {
			return ctx, status.Errorf(codes.PermissionDenied, "%s on behalf of an invalid user: %v", method, err)
		}
	} else {
		c = Caller{User: id.User}
		md = md.Copy()
		md.Set(UserHeader, c.User)
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	if err := a.check(c, method, req); err != nil {
		a.log.Info("call refused", "user", c.User, "method", method, "err", err)
		return ctx, err
	}
	return ctx, nil
}

// itemMethod is the unary method a Multi item stands for, and its request.
func itemMethod(it *datav1.MultiItem) (string, any) {
	if w := it.GetWrite(); w != nil {
		return datav1.DataService_Write_FullMethodName, w
	}
	return datav1.DataService_Get_FullMethodName, it.GetGet()
}

// AuthorizeItem checks one item of a Multi, or call of a data Stream, as
// its own unary call: the refusal that call would get, or nil. The router
// calls it for each (router.Config.AuthorizeItem); the interceptor checks
// only that the caller may read (ByItems).
func (a *Authorizer) AuthorizeItem(ctx context.Context, it *datav1.MultiItem) error {
	m, r := itemMethod(it)
	_, err := a.Authorize(ctx, m, r)
	return err
}

// Need returns the role a call of method with req needs; false when no
// rule names the method.
func (a *Authorizer) Need(method string, req any) (Role, bool) {
	m, ok := methods[method]
	need := m.Role
	if need == ByItems {
		// The call as a whole: what every item needs at least. Each item
		// is then checked as its own call (AuthorizeItem, by the router).
		return Reader, ok
	}
	if !ok || need != ByProcedure {
		return need, ok
	}
	var name string
	switch r := req.(type) {
	case *datav1.CallRequest:
		name = r.GetProcedure()
	case *datav1.MapCallRequest:
		name = r.GetProcedure()
	}
	if a.cfg.ProcedureWrites == nil || a.cfg.ProcedureWrites(name) {
		return Writer, true
	}
	return Reader, true
}

func (a *Authorizer) check(c Caller, method string, req any) error {
	need, ok := a.Need(method, req)
	switch {
	case !ok:
		return status.Errorf(codes.PermissionDenied, "user %q may not call %s: no access rule opens it to users", c.User, method)
	case need == Node:
		return status.Errorf(codes.PermissionDenied, "user %q may not call %s: only instances (node certificates) may", c.User, method)
	}
	if why := a.roleRefusal(c.User, "call "+method, need); why != "" {
		return status.Error(codes.PermissionDenied, why)
	}
	return nil
}

// roleRefusal says why user may not do action ("call <method>", "read
// <path>"), which needs role need: the user is unknown (and how an admin
// adds it) or its role is too low. Empty when the user may. gRPC and
// HTTP refuse in these same words.
func (a *Authorizer) roleRefusal(user, action string, need Role) string {
	have, known := a.cfg.UserRole(user)
	if !known {
		return fmt.Sprintf("user %q may not %s (it needs role %s): the cluster has no user %q; an admin adds it with `shardkit user create %s --role %s`",
			user, action, need, user, user, need)
	}
	if have < need {
		return fmt.Sprintf("user %q (role %s) may not %s: it needs role %s", user, have, action, need)
	}
	return ""
}

// Unary is the unary server interceptor.
func (a *Authorizer) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.Authorize(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor.
func (a *Authorizer) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.Authorize(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// HTTP guards an HTTP handler served over TLS: every request needs a
// client certificate of an instance or of a user, or the session cookie of
// a user's password login (Config.Sessions), except on the paths open says
// are open (health probes when the instance is told so, the login page).
// A user needs role reader to read (GET, HEAD) and admin for anything
// else, and for the runtime profiles; the API's requests (APIPrefix) need
// a known user only, as each is a gRPC call made for the user, which the
// method table checks. A session's request that changes something must
// carry the session's CSRF token in CSRFHeader.
func (a *Authorizer) HTTP(next http.Handler, open func(path string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open != nil && open(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS == nil {
			http.Error(w, "this instance requires HTTPS with a client certificate", http.StatusUnauthorized)
			return
		}
		var user string
		switch sess, ok := a.session(r); {
		case len(r.TLS.PeerCertificates) == 0 && ok:
			user = sess.User
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !SameToken(r.Header.Get(CSRFHeader), sess.CSRF) {
				a.log.Warn("HTTP request refused: no valid CSRF token", "user", user, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
				http.Error(w, "the request carries no valid CSRF token ("+CSRFHeader+"): reload the console and try again", http.StatusForbidden)
				return
			}
		case len(r.TLS.PeerCertificates) == 0 && a.cfg.Sessions != nil:
			if r.Method == http.MethodGet && (r.URL.Path == "/" || r.URL.Path == "/index.html") {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "not logged in: log in to the web console at /login, or present a client certificate (this cluster requires one of them)", http.StatusUnauthorized)
			return
		default:
			v := a.identifyChain(r.TLS.PeerCertificates)
			if v.err != nil {
				a.log.Warn("HTTP request refused: the caller did not authenticate", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "err", v.log)
				http.Error(w, status.Convert(v.err).Message(), http.StatusUnauthorized)
				return
			}
			if v.id.Node {
				next.ServeHTTP(w, r)
				return
			}
			user = v.id.User
		}
		// Reading needs role reader; anything else (the failpoints of
		// test builds change an instance) needs admin, and so do the
		// runtime profiles (they show the instance's insides).
		need, what := Reader, "read"
		switch {
		case strings.HasPrefix(r.URL.Path, APIPrefix):
			// The API's operations are gRPC calls made for the user
			// (UserHeader), which the method table checks: a reader may
			// reach them, and is refused by that check in the words a
			// gRPC caller gets.
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			need, what = Admin, "change"
		case strings.HasPrefix(r.URL.Path, "/debug/pprof/"):
			need = Admin
		}
		if why := a.roleRefusal(user, what+" "+r.URL.Path, need); why != "" {
			a.log.Info("HTTP request refused", "user", user, "method", r.Method, "path", r.URL.Path, "err", why)
			http.Error(w, why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithHTTPUser(r.Context(), user)))
	})
}

// session is the live session r's cookie names, if any.
func (a *Authorizer) session(r *http.Request) (Session, bool) {
	if a.cfg.Sessions == nil {
		return Session{}, false
	}
	id := SessionID(r)
	if id == "" {
		return Session{}, false
	}
	var hash string
	if a.cfg.PasswordHash != nil {
		hash = a.cfg.PasswordHash(a.peekSessionUser(id))
	}
	return a.cfg.Sessions.Get(id, hash)
}

// peekSessionUser is the user of session id ("" for none), to look up
// the user's password hash now.
func (a *Authorizer) peekSessionUser(id string) string {
	s := a.cfg.Sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id].User
}

// APIPrefix is the path of the HTTP API whose requests are made as gRPC
// calls checked for the user (see HTTP).
const APIPrefix = "/api/v1/"

type httpUserKey struct{}

// WithHTTPUser records in an HTTP request's context the user it was
// authenticated as.
func WithHTTPUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, httpUserKey{}, user)
}

// HTTPUser is the user an HTTP request was authenticated as: "" for an
// instance's node certificate, or when the request was not authenticated
// (a plaintext instance).
func HTTPUser(ctx context.Context) string {
	u, _ := ctx.Value(httpUserKey{}).(string)
	return u
}
