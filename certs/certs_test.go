package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/certs"
)

func mustCA(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := certs.CreateCA(dir, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCreateFilesModesAndOverwrite(t *testing.T) {
	t.Parallel()
	dir := mustCA(t)
	if err := certs.CreateNode(dir, []string{"localhost", "127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateClient(dir, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.key", "node.key", "client.alice.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	for _, f := range []string{"ca.crt", "node.crt", "client.alice.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	err := certs.CreateClient(dir, "alice", certs.Options{})
	if !errors.Is(err, certs.ErrExists) || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("second create-client: %v, want ErrExists naming --overwrite", err)
	}
	if err := certs.CreateCA(dir, certs.Options{}); !errors.Is(err, certs.ErrExists) {
		t.Fatalf("second create-ca: %v, want ErrExists", err)
	}
	if err := certs.CreateClient(dir, "alice", certs.Options{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	list, err := certs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("list: %+v", list)
	}
	for _, in := range list {
		if in.Err != nil || in.Subject == "" || in.NotAfter.IsZero() {
			t.Errorf("list entry %+v", in)
		}
		if in.File == "node.crt" && strings.Join(in.Hosts, ",") != "localhost,127.0.0.1" {
			t.Errorf("node hosts %v", in.Hosts)
		}
	}
	// No CA in another dir: the refusal says how to make one.
	if err := certs.CreateClient(t.TempDir(), "bob", certs.Options{}); err == nil || !strings.Contains(err.Error(), "create-ca") {
		t.Fatalf("client without CA: %v", err)
	}
	for _, bad := range []string{"", "node", ".x", "a/b", "a b", strings.Repeat("x", 65)} {
		if err := certs.CreateClient(dir, bad, certs.Options{}); !errors.Is(err, certs.ErrInvalid) {
			t.Errorf("user %q: %v, want ErrInvalid", bad, err)
		}
	}
	if err := certs.CreateNode(dir, []string{"bad host"}, certs.Options{Overwrite: true}); !errors.Is(err, certs.ErrInvalid) {
		t.Errorf("bad host: %v", err)
	}
}

// handshake runs one TLS handshake of client against a server using srv
// and returns the client's error and the chain the server saw.
func handshake(t *testing.T, srv *certs.Server, client *tls.Config, serverName string) ([]*x509.Certificate, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	got := make(chan []*x509.Certificate, 1)
	go func() {
		s := tls.Server(a, srv.ServerConfig())
		if err := s.Handshake(); err != nil {
			got <- nil
			return
		}
		got <- s.ConnectionState().PeerCertificates
	}()
	cfg := client.Clone()
	cfg.ServerName = serverName
	c := tls.Client(b, cfg)
	err := c.Handshake()
	if err != nil {
		b.Close()
	}
	return <-got, err
}

func TestHandshakeVerifyIdentify(t *testing.T) {
	t.Parallel()
	dir := mustCA(t)
	if err := certs.CreateNode(dir, []string{"localhost", "127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateClient(dir, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	srv, err := certs.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := certs.LoadClient(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := handshake(t, srv, cl, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CA.Verify(chain, x509.ExtKeyUsageClientAuth, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	id, err := certs.Identify(chain[0])
	if err != nil || id.User != "alice" || id.Node {
		t.Fatalf("identity %+v, %v", id, err)
	}
	// The instances' own client side: the node certificate.
	chain, err = handshake(t, srv, srv.ClientConfig(), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := certs.Identify(chain[0]); err != nil || !id.Node {
		t.Fatalf("node identity %+v, %v", id, err)
	}
	// A name the node certificate does not carry is refused by the client.
	_, err = handshake(t, srv, cl, "db.example.com")
	if err == nil || !strings.Contains(err.Error(), `not valid for host "db.example.com"`) {
		t.Fatalf("wrong host: %v", err)
	}
	// A client of another CA: the handshake passes (the server checks per
	// call) but Verify names the issuer.
	other := mustCA(t)
	if err := certs.CreateClient(other, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateNode(other, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	ocl, err := certs.LoadClient(other, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// ... and it refuses our server, whose CA it does not know.
	if _, err := handshake(t, srv, ocl, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "not signed by this cluster's CA") {
		t.Fatalf("other CA's client dialing us: %v", err)
	}
	osrv, err := certs.LoadServer(other)
	if err != nil {
		t.Fatal(err)
	}
	chain, _ = handshake(t, osrv, ocl, "127.0.0.1")
	err = srv.CA.Verify(chain, x509.ExtKeyUsageClientAuth, "", time.Now())
	if err == nil || !strings.Contains(err.Error(), "not signed by this cluster's CA") {
		t.Fatalf("other CA: %v", err)
	}
	// The refusal names both CAs by subject and key fingerprint; the
	// path of ca.crt is for this side only, never for the peer.
	ours, theirs := readCert(t, filepath.Join(dir, certs.CACert)), readCert(t, filepath.Join(other, certs.CACert))
	peer := certs.PeerText(err)
	for _, want := range []string{ours.Subject.String(), theirs.Subject.String(), certs.KeyFingerprint(ours), certs.KeyFingerprint(theirs)} {
		if !strings.Contains(peer, want) {
			t.Errorf("the refusal for the peer does not name %q: %s", want, peer)
		}
	}
	if strings.Contains(peer, dir) || strings.Contains(peer, certs.CACert) {
		t.Errorf("the refusal for the peer names this side's path %s: %s", dir, peer)
	}
	if want := filepath.Join(dir, certs.CACert); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal for this side does not name %s: %v", want, err)
	}
	// Expired.
	past := func() time.Time { return time.Now().Add(-48 * time.Hour) }
	if err := certs.CreateClient(dir, "old", certs.Options{Now: past, Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ocfg, err := certs.LoadClient(dir, "old")
	if err != nil {
		t.Fatal(err)
	}
	chain, _ = handshake(t, srv, ocfg, "127.0.0.1")
	if err := srv.CA.Verify(chain, x509.ExtKeyUsageClientAuth, "", time.Now()); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("expired: %v", err)
	}
	// A client certificate cannot serve.
	if err := srv.CA.Verify(chain[:1], x509.ExtKeyUsageServerAuth, "", past()); err == nil {
		t.Fatal("a client certificate verified as a server")
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every CA has its own subject (two CAs made in a row differ), with the
// cluster's id when given and the start of its key's fingerprint; the
// certificates it signs carry its whole key hash, so that a refusal
// names the issuer's fingerprint from the leaf alone.
func TestEachCAHasItsOwnSubject(t *testing.T) {
	t.Parallel()
	a, b := mustCA(t), mustCA(t)
	ca, cb := readCert(t, filepath.Join(a, certs.CACert)), readCert(t, filepath.Join(b, certs.CACert))
	if ca.Subject.String() == cb.Subject.String() {
		t.Fatalf("two CAs have the same subject %q", ca.Subject)
	}
	for _, c := range []*x509.Certificate{ca, cb} {
		id := strings.TrimPrefix(certs.KeyFingerprint(c), "sha256:")[:8]
		if c.Subject.CommonName != "shardkit CA "+id {
			t.Errorf("CA common name %q, want %q", c.Subject.CommonName, "shardkit CA "+id)
		}
		if got, want := hex.EncodeToString(c.SubjectKeyId), strings.TrimPrefix(certs.KeyFingerprint(c), "sha256:"); len(c.SubjectKeyId) != 32 || !strings.HasPrefix(got, want) {
			t.Errorf("CA subject key id %s, want the SHA-256 of its key (starting %s)", got, want)
		}
	}
	named := t.TempDir()
	if err := certs.CreateCA(named, certs.Options{ClusterID: "prod-eu"}); err != nil {
		t.Fatal(err)
	}
	if cn := readCert(t, filepath.Join(named, certs.CACert)).Subject.CommonName; !strings.HasPrefix(cn, "shardkit CA prod-eu ") {
		t.Errorf("CA of cluster prod-eu: common name %q", cn)
	}
	for _, bad := range []string{"a b", "a/b", "a,b", strings.Repeat("x", 65)} {
		if err := certs.CreateCA(t.TempDir(), certs.Options{ClusterID: bad}); !errors.Is(err, certs.ErrInvalid) || !strings.Contains(err.Error(), "cluster id") {
			t.Errorf("cluster id %q: %v, want ErrInvalid naming the cluster id", bad, err)
		}
	}
	// A client of CA b checked against CA a: its issuer's fingerprint
	// comes from its authority key id.
	if err := certs.CreateClient(b, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	leaf := readCert(t, filepath.Join(b, certs.ClientCertFile("alice")))
	caA, err := certs.LoadCA(a)
	if err != nil {
		t.Fatal(err)
	}
	err = caA.Verify([]*x509.Certificate{leaf}, x509.ExtKeyUsageClientAuth, "", time.Now())
	want := fmt.Sprintf("it was issued by %q (key %s), and this cluster's CA is %q (key %s)", cb.Subject.String(), certs.KeyFingerprint(cb), ca.Subject.String(), certs.KeyFingerprint(ca))
	if err == nil || !strings.Contains(certs.PeerText(err), want) {
		t.Fatalf("client of another CA: %v\nwant it to say: %s", err, want)
	}
}

// A CA that another tool made (its key id of another hash, here 20 bytes
// as SHA-1's) is named by that key id, not as a fingerprint; when the
// client sends its CA's certificate along, by that certificate's
// fingerprint.
func TestRefusalNamesAForeignIssuer(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	skid := []byte("0123456789abcdefghij")
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "elsewhere CA"}, SubjectKeyId: skid,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(8), Subject: pkix.Name{CommonName: "alice"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, foreignCA, leafKey.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadCA(mustCA(t))
	if err != nil {
		t.Fatal(err)
	}
	err = ca.Verify([]*x509.Certificate{leaf}, x509.ExtKeyUsageClientAuth, "", time.Now())
	if want := `it was issued by "CN=elsewhere CA" (key id ` + hex.EncodeToString(skid) + ")"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("leaf alone: %v\nwant it to say: %s", err, want)
	}
	err = ca.Verify([]*x509.Certificate{leaf, foreignCA}, x509.ExtKeyUsageClientAuth, "", time.Now())
	if want := `it was issued by "CN=elsewhere CA" (key ` + certs.KeyFingerprint(foreignCA) + ")"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("leaf and its CA: %v\nwant it to say: %s", err, want)
	}
}

func TestReloadOnChange(t *testing.T) {
	t.Parallel()
	dir := mustCA(t)
	if err := certs.CreateNode(dir, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	srv, err := certs.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := srv.NodeCertificate().Leaf.SerialNumber
	// A broken file keeps the last good certificate.
	if err := os.WriteFile(filepath.Join(dir, "node.crt"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := srv.NodeCertificate().Leaf.SerialNumber; got.Cmp(first) != 0 {
		t.Fatal("a broken file replaced the certificate")
	}
	if err := certs.CreateNode(dir, []string{"127.0.0.1"}, certs.Options{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if got := srv.NodeCertificate().Leaf.SerialNumber; got.Cmp(first) == 0 {
		t.Fatal("the new certificate was not picked up")
	}
}

// FuzzIdentify feeds Identify certificates with arbitrary subjects and
// usages: it must never panic, and whatever it accepts names a valid user
// or is a node certificate.
func FuzzIdentify(f *testing.F) {
	f.Add("alice", "", uint8(1))
	f.Add("node", "", uint8(3))
	f.Add("node", "", uint8(1))
	f.Add("", "", uint8(1))
	f.Add("a", "b", uint8(1))
	f.Add("root\x00", "", uint8(1))
	f.Add("../../etc", "", uint8(2))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cn, cn2 string, usage uint8) {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<31, 0)}
		tmpl.Subject = pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn}}}
		if cn2 != "" {
			tmpl.Subject.ExtraNames = append(tmpl.Subject.ExtraNames, pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn2})
		}
		if usage&1 != 0 {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		if usage&2 != 0 {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return // not encodable (e.g. invalid UTF-8 in a PrintableString)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return
		}
		id, err := certs.Identify(c)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		switch {
		case id.Node:
			if c.Subject.CommonName != "node" || usage&3 != 3 || cn2 != "" {
				t.Fatalf("node identity from cn=%q cn2=%q usage=%d", cn, cn2, usage)
			}
		default:
			if certs.CheckUser(id.User) != nil || id.User != cn || cn2 != "" || usage&1 == 0 {
				t.Fatalf("user %q from cn=%q cn2=%q usage=%d", id.User, cn, cn2, usage)
			}
		}
	})
}
