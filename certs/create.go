package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// File names in a certs directory.
const (
	CACert   = "ca.crt"
	CAKey    = "ca.key"
	NodeCert = "node.crt"
	NodeKey  = "node.key"
)

// NodeCN is the common name of every instance's certificate: a chain to
// the cluster's CA with this CN and server use is an instance, which may
// do everything the cluster needs. No user may be called so.
const NodeCN = "node"

// RootUser is the user every cluster has: admin, cannot be dropped.
const RootUser = "root"

// Default lifetimes (cockroach's defaults): 10 years for a CA, 5 for the
// others.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 5 * 365 * 24 * time.Hour
)

// ErrExists is returned when a file would be overwritten and Options.Overwrite
// is not set.
var ErrExists = errors.New("certs: file exists")

// ErrInvalid is returned for a bad user name, host, or an unusable file.
var ErrInvalid = errors.New("certs: invalid")

// ClientCertFile and ClientKeyFile name a user's files.
func ClientCertFile(user string) string { return "client." + user + ".crt" }

// ClientKeyFile names a user's private key file.
func ClientKeyFile(user string) string { return "client." + user + ".key" }

var userPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// CheckUser refuses what cannot name a user: 1-64 letters, digits, '_',
// '.' or '-', not starting with '.' or '-', and not "node" (the instances'
// name).
func CheckUser(name string) error {
	if !userPattern.MatchString(name) {
		return fmt.Errorf("%w: user name %q: use 1-64 letters, digits, '_', '.' or '-', starting with a letter, digit or '_'", ErrInvalid, name)
	}
	if name == NodeCN {
		return fmt.Errorf("%w: user name %q is reserved for the instances' certificates", ErrInvalid, name)
	}
	return nil
}

// Options tune the making of a certificate.
type Options struct {
	// Overwrite replaces existing files; without it an existing file is
	// refused with ErrExists.
	Overwrite bool
	// Lifetime is how long the certificate is valid (default:
	// DefaultCALifetime for a CA, DefaultCertLifetime otherwise).
	Lifetime time.Duration
	// Now tells the time (default time.Now): the certificate is valid from
	// an hour before it, for clocks a little behind.
	Now func() time.Time
	// ClusterID, the cluster's name, goes into a CA's common name
	// (CreateCA only; optional, a name as CheckClusterID allows).
	ClusterID string
}

func (o Options) validity(def time.Duration) (time.Time, time.Time) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	life := o.Lifetime
	if life == 0 {
		life = def
	}
	t := now()
	return t.Add(-time.Hour), t.Add(life)
}

var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckClusterID refuses what cannot name a cluster in its CA's common
// name: 1-64 letters, digits, '_', '.' or '-' (as `shardkit run
// --cluster-id` takes).
func CheckClusterID(id string) error {
	if !clusterIDPattern.MatchString(id) {
		return fmt.Errorf("%w: cluster id %q: use 1-64 letters, digits, '_', '.' or '-'", ErrInvalid, id)
	}
	return nil
}

// CreateCA makes ca.crt and ca.key in dir (created if missing, 0700).
//
// Every CA has its own subject, so that a refusal that names an issuer
// tells two CAs apart: CN "shardkit CA [<cluster id> ]<key id>", where key id is
// the start of the key's fingerprint (KeyFingerprint), fresh with each new
// key. Its subject key id is the whole SHA-256 of its public key, so every
// certificate it signs carries that fingerprint as its authority key id
// (CA.Verify names it when it refuses a certificate of another CA).
func CreateCA(dir string, o Options) error {
	if o.ClusterID != "" {
		if err := CheckClusterID(o.ClusterID); err != nil {
			return err
		}
	}
	if err := checkFree(dir, o, CACert, CAKey); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyID, err := publicKeySHA256(key.Public())
	if err != nil {
		return err
	}
	cn := "shardkit CA "
	if o.ClusterID != "" {
		cn += o.ClusterID + " "
	}
	cn += hex.EncodeToString(keyID[:4])
	from, to := o.validity(DefaultCALifetime)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"shardkit"}},
		SubjectKeyId:          keyID,
		NotBefore:             from,
		NotAfter:              to,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	return writePair(dir, CACert, CAKey, der, key)
}

// CreateNode makes node.crt and node.key in dir, signed by the CA there,
// valid for hosts (DNS names or IP addresses: every name and address the
// instance is reached at).
func CreateNode(dir string, hosts []string, o Options) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%w: a node certificate needs at least one host name or address (e.g. localhost 127.0.0.1)", ErrInvalid)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: NodeCN, Organization: []string{"shardkit"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		if h == "" || !hostPattern.MatchString(h) {
			return fmt.Errorf("%w: host %q is neither an IP address nor a DNS name", ErrInvalid, h)
		}
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	return createSigned(dir, NodeCert, NodeKey, tmpl, o)
}

var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62})?)*$`)

// CreateClient makes client.<user>.crt and .key in dir, signed by the CA
// there, with CN user.
func CreateClient(dir, user string, o Options) error {
	if err := CheckUser(user); err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: []string{"shardkit"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return createSigned(dir, ClientCertFile(user), ClientKeyFile(user), tmpl, o)
}

func createSigned(dir, certName, keyName string, tmpl *x509.Certificate, o Options) error {
	if err := checkFree(dir, o, certName, keyName); err != nil {
		return err
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = o.validity(DefaultCertLifetime)
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter // a certificate outliving its CA would fail anyway
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	return writePair(dir, certName, keyName, der, key)
}

// loadCA reads the CA certificate (the first of ca.crt) and its key.
func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	pair, err := loadKeyPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("the CA of %s: %w (make it first with `shardkit cert create-ca --certs-dir %s`)", dir, err, dir)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s is not a signing key", ErrInvalid, filepath.Join(dir, CAKey))
	}
	return pair.Leaf, signer, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func checkFree(dir string, o Options, names ...string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if o.Overwrite {
		return nil
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%w: %s; pass --overwrite to replace it", ErrExists, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writePair writes the key (0600) and then the certificate (0644), each
// to a temporary file renamed into place, so a reader sees either the old
// or the new file, never half of one.
func writePair(dir, certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, keyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, certName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing to remove
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Info describes one certificate file, as `shardkit cert list` shows it.
type Info struct {
	File    string
	Subject string
	// KeyFingerprint is the short fingerprint of the certificate's key
	// (see KeyFingerprint): how a refusal names a CA.
	KeyFingerprint string
	Hosts          []string // DNS names and IP addresses
	NotAfter       time.Time
	IsCA           bool
	Err            error // the file could not be read or parsed
}

// List describes every certificate (*.crt) in dir, by file name.
func List(dir string) ([]Info, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
	}
	var out []Info
	for _, p := range names {
		in := Info{File: filepath.Base(p)}
		certs, err := readCerts(p)
		if err != nil {
			in.Err = err
			out = append(out, in)
			continue
		}
		c := certs[0]
		in.Subject, in.NotAfter, in.IsCA, in.KeyFingerprint = c.Subject.String(), c.NotAfter, c.IsCA, KeyFingerprint(c)
		in.Hosts = append(in.Hosts, c.DNSNames...)
		for _, ip := range c.IPAddresses {
			in.Hosts = append(in.Hosts, ip.String())
		}
		out = append(out, in)
	}
	return out, nil
}

// readCerts parses every CERTIFICATE block of a PEM file (at least one).
func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalid, path)
	}
	return out, nil
}
