package certs

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"slices"
)

// Identity is who a verified certificate speaks for.
type Identity struct {
	// User is the user's name; empty for an instance.
	User string
	// Node is true for an instance's certificate.
	Node bool
}

func (id Identity) String() string {
	if id.Node {
		return "instance (node certificate)"
	}
	return "user " + id.User
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// Identify reads who a certificate (already verified against the CA)
// speaks for: CN "node" with both server and client use is an instance;
// any other CN that is a valid user name, on a certificate for client use,
// is that user. A certificate with no CN or with several is refused.
func Identify(c *x509.Certificate) (Identity, error) {
	n := 0
	for _, a := range c.Subject.Names {
		if a.Type.Equal(oidCommonName) {
			n++
		}
	}
	cn := c.Subject.CommonName
	switch {
	case n == 0 || cn == "":
		return Identity{}, fmt.Errorf("%w: the certificate has no common name (CN); a client certificate's CN is the user's name", ErrInvalid)
	case n > 1:
		return Identity{}, fmt.Errorf("%w: the certificate has %d common names (CN); it must have one, the user's name", ErrInvalid, n)
	case cn == NodeCN:
		if !hasUsage(c, x509.ExtKeyUsageServerAuth) || !hasUsage(c, x509.ExtKeyUsageClientAuth) {
			return Identity{}, fmt.Errorf("%w: a certificate with CN %q must be an instance's node certificate, for server and client use", ErrInvalid, NodeCN)
		}
		return Identity{Node: true}, nil
	}
	if err := CheckUser(cn); err != nil {
		return Identity{}, fmt.Errorf("the certificate's CN: %w", err)
	}
	if !hasUsage(c, x509.ExtKeyUsageClientAuth) {
		return Identity{}, fmt.Errorf("%w: the certificate of user %q is not for client use", ErrInvalid, cn)
	}
	return Identity{User: cn}, nil
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}
