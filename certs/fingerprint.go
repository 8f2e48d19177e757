package certs

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"strings"
)

// KeyFingerprint is the short form of the fingerprint of a certificate's
// key: "sha256:" and the first 8 bytes, in hex, of the SHA-256 of its
// public key (the subjectPublicKey bit string, RFC 7093 method 1). A CA
// that CreateCA makes has the whole hash as its subject key id, and the
// first 4 bytes in its common name.
func KeyFingerprint(c *x509.Certificate) string {
	sum, err := spkiSHA256(c.RawSubjectPublicKeyInfo)
	if err != nil {
		return "an unreadable key"
	}
	return shortSHA256(sum)
}

func shortSHA256(sum []byte) string { return "sha256:" + hex.EncodeToString(sum[:8]) }

// publicKeySHA256 is the SHA-256 of a public key's subjectPublicKey bit
// string.
func publicKeySHA256(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return spkiSHA256(der)
}

func spkiSHA256(spkiDER []byte) ([]byte, error) {
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(spkiDER, &spki); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:], nil
}

// issuerKey names the key that signed a chain's leaf: its fingerprint
// when the chain holds the issuer's certificate or when the leaf's
// authority key id is a whole SHA-256 (as from a CA that CreateCA made);
// otherwise the authority key id as it is (other tools use other hashes,
// such as SHA-1, so it is not called a fingerprint).
func issuerKey(chain []*x509.Certificate) string {
	leaf := chain[0]
	for _, c := range chain[1:] {
		if leaf.CheckSignatureFrom(c) == nil {
			return "key " + KeyFingerprint(c)
		}
	}
	switch aki := leaf.AuthorityKeyId; {
	case len(aki) == sha256.Size:
		return "key " + shortSHA256(aki)
	case len(aki) > 0:
		return "key id " + hex.EncodeToString(aki)
	}
	return "no authority key id"
}

// describeCAs names each CA certificate by subject and key fingerprint.
func describeCAs(cas []*x509.Certificate) string {
	parts := make([]string, len(cas))
	for i, c := range cas {
		parts[i] = fmt.Sprintf("%q (key %s)", c.Subject.String(), KeyFingerprint(c))
	}
	if len(parts) == 1 {
		return "this cluster's CA is " + parts[0]
	}
	return "this cluster's CAs are " + strings.Join(parts, " and ")
}
