package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// loadKeyPair reads a certificate and its key; errors name the files,
// never their contents.
func loadKeyPair(certPath, keyPath string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s with %s: %w", ErrInvalid, certPath, keyPath, err)
	}
	return &pair, nil
}

// stamp tells whether a file changed: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

func stampOf(paths ...string) ([]stamp, error) {
	out := make([]stamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = stamp{fi.ModTime(), fi.Size()}
	}
	return out, nil
}

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// reloading holds what was read from some files and reads them again when
// their modification time or size changed, at most once per check (each
// handshake checks). A failed reread keeps the last good value (a
// certificate written before its key is caught half-way) and is retried
// at the next check.
type reloading[T any] struct {
	paths []string
	load  func() (T, error)

	mu     sync.Mutex
	stamps []stamp
	val    T
	gen    uint64 // bumped at each successful load
}

// loadTries and loadRetry bound the first read of files being replaced.
const (
	loadTries = 50
	loadRetry = 20 * time.Millisecond
)

func newReloading[T any](load func() (T, error), paths ...string) (*reloading[T], error) {
	r := &reloading[T]{paths: paths, load: load}
	// A rotation writes the key and then the certificate: a first read
	// between the two sees a pair that does not match. Such a read is
	// tried again for a while before it counts as a failure.
	var err error
	for try := 0; try < loadTries; try++ {
		if try > 0 {
			time.Sleep(loadRetry)
		}
		var st []stamp
		if st, err = stampOf(paths...); err != nil {
			return nil, err // a missing file does not come by waiting
		}
		var v T
		if v, err = load(); err == nil {
			r.stamps, r.val, r.gen = st, v, 1
			return r, nil
		}
	}
	return nil, err
}

// get returns the current value and its generation.
func (r *reloading[T]) get() (T, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := stampOf(r.paths...)
	if err == nil && !sameStamps(st, r.stamps) {
		if v, err := r.load(); err == nil {
			r.stamps, r.val = st, v
			r.gen++
		}
	}
	return r.val, r.gen
}

// CA is the cluster's certificate authority as ca.crt has it now (all its
// certificates: during a CA rotation it holds the old and the new).
type CA struct {
	path string
	r    *reloading[caCerts]
}

type caCerts struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
}

// LoadCA reads dir/ca.crt; it is read again when it changes.
func LoadCA(dir string) (*CA, error) {
	p := filepath.Join(dir, CACert)
	r, err := newReloading(func() (caCerts, error) {
		certs, err := readCerts(p)
		if err != nil {
			return caCerts{}, err
		}
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		return caCerts{pool: pool, certs: certs}, nil
	}, p)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA certificate: %w", err)
	}
	return &CA{path: p, r: r}, nil
}

// Generation changes whenever the CA is read again.
func (ca *CA) Generation() uint64 { _, g := ca.r.get(); return g }

// RefusedError is a certificate that CA.Verify refused. Error names the
// CA file the chain was checked against, for the side that holds that
// file; Peer says the same without it, for the peer that presented the
// certificate, which must not learn this side's paths.
type RefusedError struct {
	msg, peer string
	err       error // what crypto/x509 said, if anything
}

func (e *RefusedError) Error() string { return e.msg }

// Unwrap is crypto/x509's error, if the refusal came from one.
func (e *RefusedError) Unwrap() error { return e.err }

// Peer is the refusal in words for the peer: no path of this side.
func (e *RefusedError) Peer() string { return e.peer }

// PeerText is what a peer may be told of err: a RefusedError's Peer,
// else err's text.
func PeerText(err error) string {
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Peer()
	}
	return err.Error()
}

// refused makes a RefusedError whose text has no path, so the peer may
// read all of it; a %w in format is unwrapped as with fmt.Errorf.
func refused(format string, args ...any) *RefusedError {
	err := fmt.Errorf(format, args...)
	return &RefusedError{msg: err.Error(), peer: err.Error(), err: errors.Unwrap(err)}
}

// Verify checks a peer's chain (leaf first) against the CA for a use
// (x509.ExtKeyUsageClientAuth for a client, ServerAuth for a server);
// host, when not empty, must be one of the leaf's names or addresses. The
// error (a *RefusedError) says what was wrong in words a person can act
// on; one for a chain of another CA names the issuer's subject and key
// fingerprint and this CA's.
func (ca *CA) Verify(chain []*x509.Certificate, usage x509.ExtKeyUsage, host string, now time.Time) error {
	if len(chain) == 0 {
		return refused("no certificate was presented")
	}
	cur, _ := ca.r.get()
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: cur.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: now, DNSName: host})
	if err == nil {
		return nil
	}
	who := fmt.Sprintf("certificate %q (serial %x)", leaf.Subject.CommonName, leaf.SerialNumber)
	var inv x509.CertificateInvalidError
	var una x509.UnknownAuthorityError
	var hst x509.HostnameError
	switch {
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		if now.After(leaf.NotAfter) {
			return refused("%s expired at %s (now %s); make a new one", who, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		return refused("%s is not valid before %s (now %s)", who, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
		return refused("%s may not be used for %s", who, usageName(usage))
	case errors.As(err, &una):
		why := fmt.Sprintf("it was issued by %q (%s), and %s", leaf.Issuer.String(), issuerKey(chain), describeCAs(cur.certs))
		return &RefusedError{
			msg:  fmt.Sprintf("%s is not signed by this cluster's CA (%s): %s", who, ca.path, why),
			peer: fmt.Sprintf("%s is not signed by this cluster's CA: %s", who, why),
			err:  err,
		}
	case errors.As(err, &hst):
		return refused("%s is not valid for host %q: %w; make the node certificate with every name and address the instance is reached at", who, host, err)
	}
	return refused("%s: %w", who, err)
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "a server (an instance's node certificate)"
	}
	return "a client"
}

// keyPair is a certificate with its key that is read again when its files
// change.
type keyPair struct{ r *reloading[*tls.Certificate] }

func loadPair(dir, certName, keyName string) (*keyPair, error) {
	cp, kp := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	r, err := newReloading(func() (*tls.Certificate, error) { return loadKeyPair(cp, kp) }, cp, kp)
	if err != nil {
		return nil, err
	}
	return &keyPair{r: r}, nil
}

func (k *keyPair) get() *tls.Certificate { c, _ := k.r.get(); return c }

// Server is an instance's TLS material: its node certificate and the CA.
// Both are read again when their files change.
type Server struct {
	CA   *CA
	node *keyPair
}

// LoadServer reads the CA and the node certificate of dir.
func LoadServer(dir string) (*Server, error) {
	ca, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	node, err := loadPair(dir, NodeCert, NodeKey)
	if err != nil {
		return nil, fmt.Errorf("the node certificate: %w (make it with `shardkit cert create-node --certs-dir %s HOST...`)", err, dir)
	}
	return &Server{CA: ca, node: node}, nil
}

// NodeCertificate returns the node certificate as it is now.
func (s *Server) NodeCertificate() *tls.Certificate { return s.node.get() }

// ServerConfig is the tls.Config of an instance's listener, with
// nextProtos for ALPN ("h2" for gRPC). It asks every client for a
// certificate but does not check it: the server checks it per call, with
// Verify and Identify, so that a refusal reaches the client as an answer
// that says what was wrong instead of a broken handshake.
func (s *Server) ServerConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.node.get(), nil
		},
	}
}

// ClientConfig is the tls.Config an instance dials other instances with:
// its node certificate as client certificate.
func (s *Server) ClientConfig() *tls.Config { return clientConfig(s.CA, s.node) }

// LoadClient reads the CA and user's client certificate from dir: the
// tls.Config a user's program dials the cluster with. The files are read
// again when they change.
func LoadClient(dir, user string) (*tls.Config, error) {
	if err := CheckUser(user); err != nil {
		return nil, err
	}
	ca, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	pair, err := loadPair(dir, ClientCertFile(user), ClientKeyFile(user))
	if err != nil {
		return nil, fmt.Errorf("the client certificate of user %q: %w (make it with `shardkit cert create-client --certs-dir %s %s`)", user, err, dir, user)
	}
	return clientConfig(ca, pair), nil
}

// clientConfig verifies the server itself (InsecureSkipVerify only turns
// off the standard check, which could not see a CA that changed on disk):
// VerifyConnection checks the chain against the current CA and the name
// dialed.
func clientConfig(ca *CA, pair *keyPair) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies against the reloaded CA
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return pair.get(), nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := ca.Verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, cs.ServerName, time.Now()); err != nil {
				return fmt.Errorf("the server's %w", err)
			}
			return nil
		},
	}
}
