// Package tlstest makes a real certificate authority inside a test: an
// ECDSA P-256 CA and leaf certificates it signs, written as PEM files in
// t.TempDir(), for tests of the pool's mutual TLS (core/tlsconfig). It is
// a non-test package so that every package's tests can import it;
// production code must not.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// CA is a certificate authority of one test.
type CA struct {
	Name string
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// File is the CA certificate as a PEM file (a CA bundle of one).
	File string
	dir  string
}

// serial numbers: random 128-bit, as real CAs.
func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

// NewCA creates a self-signed CA named name, valid from an hour ago for a
// day, and writes it to <tempdir>/<name>-ca.pem. It fails t on error.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: CA key: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name + " test CA", Organization: []string{"mooncake-go tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: CA certificate: %v", err)
	}
	ca := &CA{Name: name, Cert: cert, Key: key, dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Leaf describes a certificate to issue; the zero value is a certificate
// valid from an hour ago for a day, for 127.0.0.1, ::1 and localhost,
// usable by servers and clients.
type Leaf struct {
	NotBefore, NotAfter time.Time // zero: now-1h, now+24h
	DNS                 []string  // nil: localhost
	IPs                 []net.IP  // nil: 127.0.0.1, ::1
}

// Issue signs a default Leaf named name (its CommonName) and returns the
// Files of that identity: this CA's file, name.pem and name-key.pem.
func (ca *CA) Issue(t testing.TB, name string) tlsconfig.Files {
	t.Helper()
	return ca.IssueLeaf(t, name, Leaf{})
}

// IssueLeaf is Issue for the certificate l describes.
func (ca *CA) IssueLeaf(t testing.TB, name string, l Leaf) tlsconfig.Files {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: key: %v", err)
	}
	now := time.Now()
	if l.NotBefore.IsZero() {
		l.NotBefore = now.Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = now.Add(24 * time.Hour)
	}
	if l.DNS == nil {
		l.DNS = []string{"localhost"}
	}
	if l.IPs == nil {
		l.IPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"mooncake-go tests"}},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     l.DNS,
		IPAddresses:  l.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("tlstest: certificate %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: key %s: %v", name, err)
	}
	f := tlsconfig.Files{CA: ca.File, Cert: filepath.Join(ca.dir, name+".pem"), Key: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, f.Cert, "CERTIFICATE", der)
	writePEM(t, f.Key, "PRIVATE KEY", keyDER)
	return f
}

// Load is tlsconfig.Load that fails t on error.
func Load(t testing.TB, f tlsconfig.Files) *tlsconfig.Config {
	t.Helper()
	c, err := tlsconfig.Load(f)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return c
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}

// Bundle writes the certificates of cas into one CA bundle file and
// returns its path.
func Bundle(t testing.TB, cas ...*CA) string {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...)
	}
	path := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return path
}
