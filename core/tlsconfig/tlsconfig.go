package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// ErrInvalid is matched (errors.Is) by every error of Load and LoadClient:
// a setting missing beside the others, or a file that is missing,
// unreadable or wrong. The message names the file.
var ErrInvalid = errors.New("tlsconfig: invalid TLS settings")

// Command-line flags of the `mooncake` subcommands (master, node, ctl,
// replay) for the pool's connections (master gRPC, HTTP metadata,
// /metrics) and for etcd. Each takes a file path; ServerName a host name.
const (
	FlagCA         = "tls-ca"
	FlagCert       = "tls-cert"
	FlagKey        = "tls-key"
	FlagServerName = "tls-server-name"
	FlagEtcdCA     = "etcd-tls-ca"
	FlagEtcdCert   = "etcd-tls-cert"
	FlagEtcdKey    = "etcd-tls-key"
)

// Environment variables read by clients embedded in engines (the vLLM
// connector through connectors/config, the C and Python store API) where
// no flag exists; the same meanings as the flags.
const (
	EnvCA         = "MC_TLS_CA_FILE"
	EnvCert       = "MC_TLS_CERT_FILE"
	EnvKey        = "MC_TLS_KEY_FILE"
	EnvServerName = "MC_TLS_SERVER_NAME"
	EnvEtcdCA     = "MC_ETCD_TLS_CA_FILE"
	EnvEtcdCert   = "MC_ETCD_TLS_CERT_FILE"
	EnvEtcdKey    = "MC_ETCD_TLS_KEY_FILE"
)

// Files names the PEM files of one TLS identity. The zero value means
// plaintext (upstream's only mode).
type Files struct {
	// CA is the CA bundle (one or more PEM CERTIFICATE blocks): a peer's
	// certificate must chain to one of them, and so must Cert.
	CA string
	// Cert is this process's certificate, PEM, leaf first, optionally
	// followed by intermediates.
	Cert string
	// Key is Cert's private key, PEM (PKCS#8, PKCS#1 or SEC 1 EC).
	Key string
	// ServerName, when set, is the name a client verifies in the server's
	// certificate instead of the host it dials (for certificates that do
	// not name the address, such as an IP, clients use). Ignored by
	// servers.
	ServerName string
}

// Enabled reports whether any file is named: TLS is then on and Load
// requires the rest.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// FromEnv returns the pool's Files from EnvCA, EnvCert, EnvKey and
// EnvServerName, looked up with getenv (os.Getenv, or a map's lookup).
func FromEnv(getenv func(string) string) Files {
	return Files{CA: getenv(EnvCA), Cert: getenv(EnvCert), Key: getenv(EnvKey), ServerName: getenv(EnvServerName)}
}

// EtcdFromEnv returns etcd's Files from EnvEtcdCA, EnvEtcdCert and
// EnvEtcdKey.
func EtcdFromEnv(getenv func(string) string) Files {
	return Files{CA: getenv(EnvEtcdCA), Cert: getenv(EnvEtcdCert), Key: getenv(EnvEtcdKey)}
}

// Config is a loaded TLS identity: the CA bundle, and this process's
// certificate and key (absent only from LoadClient without them). A nil
// *Config means plaintext: its methods return nil.
type Config struct {
	files Files
	roots *x509.CertPool
	cert  *tls.Certificate // nil: no client certificate (LoadClient)
	leaf  *x509.Certificate
}

// Load reads and checks f for mutual TLS: CA, Cert and Key are all
// required once one is named. It returns nil, nil when f names no file
// (plaintext). Errors wrap ErrInvalid and name the file: missing or
// unreadable; no PEM CERTIFICATE block (CA, Cert) or private key block
// (Key), or one that does not parse; a key that does not match the
// certificate; a certificate not yet valid or expired; a certificate not
// issued by a CA of the bundle.
func Load(f Files) (*Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	var missing []string
	for _, s := range []struct{ what, v string }{{"CA bundle", f.CA}, {"certificate", f.Cert}, {"private key", f.Key}} {
		if s.v == "" {
			missing = append(missing, s.what)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: mutual TLS needs a CA bundle, a certificate and its private key; %s not given (%s)",
			ErrInvalid, strings.Join(missing, " and "), f.given())
	}
	return load(f, time.Now())
}

// LoadClient is Load for a client of a server that may not ask for a
// client certificate (etcd started without --client-cert-auth): CA is
// required, Cert and Key are optional but go together. It returns nil,
// nil when f names no file. Errors: as Load's.
func LoadClient(f Files) (*Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	switch {
	case f.CA == "":
		return nil, fmt.Errorf("%w: TLS needs the CA bundle that issued the server's certificate; none given (%s)", ErrInvalid, f.given())
	case f.Cert == "" && f.Key != "":
		return nil, fmt.Errorf("%w: private key %s given without its certificate", ErrInvalid, f.Key)
	case f.Cert != "" && f.Key == "":
		return nil, fmt.Errorf("%w: certificate %s given without its private key", ErrInvalid, f.Cert)
	}
	return load(f, time.Now())
}

// given lists the files named, for errors.
func (f Files) given() string {
	var g []string
	for _, s := range []struct{ what, v string }{{"CA bundle", f.CA}, {"certificate", f.Cert}, {"key", f.Key}} {
		if s.v != "" {
			g = append(g, s.what+" "+s.v)
		}
	}
	return "given: " + strings.Join(g, ", ")
}

func load(f Files, now time.Time) (*Config, error) {
	caPEM, err := readFile("CA bundle", f.CA)
	if err != nil {
		return nil, err
	}
	cas, err := parseCerts("CA bundle", f.CA, caPEM)
	if err != nil {
		return nil, err
	}
	c := &Config{files: f, roots: x509.NewCertPool()}
	for _, ca := range cas {
		c.roots.AddCert(ca)
	}
	if f.Cert == "" {
		return c, nil
	}
	certPEM, err := readFile("certificate", f.Cert)
	if err != nil {
		return nil, err
	}
	chain, err := parseCerts("certificate", f.Cert, certPEM)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile("private key", f.Key)
	if err != nil {
		return nil, err
	}
	if err := checkKeyPEM(f.Key, keyPEM); err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s and private key %s: %s", ErrInvalid, f.Cert, f.Key, strings.TrimPrefix(err.Error(), "tls: "))
	}
	leaf := chain[0]
	switch {
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("%w: certificate %s (%s) is not valid before %s", ErrInvalid, f.Cert, subject(leaf), leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("%w: certificate %s (%s) expired at %s", ErrInvalid, f.Cert, subject(leaf), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: certificate %s (%s) is not issued by a CA in %s, so peers trusting that bundle refuse it: %v",
			ErrInvalid, f.Cert, subject(leaf), f.CA, err)
	}
	pair.Leaf = leaf
	c.cert, c.leaf = &pair, leaf
	return c, nil
}

func readFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%w: %s %s: %v", ErrInvalid, what, path, err)
	}
	return b, nil
}

// parseCerts returns every CERTIFICATE block of data, in order; other
// block types are skipped. Errors: none found; one that does not parse.
func parseCerts(what, path string, data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: certificate %d does not parse: %v", ErrInvalid, what, path, len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s %s holds no PEM CERTIFICATE block", ErrInvalid, what, path)
	}
	return out, nil
}

// checkKeyPEM finds a PEM private key block in data.
func checkKeyPEM(path string, data []byte) error {
	var types []string
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "PRIVATE KEY" || strings.HasSuffix(b.Type, " PRIVATE KEY") {
			return nil
		}
		types = append(types, b.Type)
	}
	if len(types) > 0 {
		return fmt.Errorf("%w: private key %s holds no PEM private key block (found %s)", ErrInvalid, path, strings.Join(types, ", "))
	}
	return fmt.Errorf("%w: private key %s holds no PEM private key block", ErrInvalid, path)
}

func subject(c *x509.Certificate) string {
	if s := c.Subject.String(); s != "" {
		return s
	}
	return "no subject"
}

// Files returns the files c was loaded from (nil c: the zero Files).
func (c *Config) Files() Files {
	if c == nil {
		return Files{}
	}
	return c.files
}

// Leaf is this process's certificate, or nil (nil c, or LoadClient
// without one).
func (c *Config) Leaf() *x509.Certificate {
	if c == nil {
		return nil
	}
	return c.leaf
}

// Server returns a fresh server-side *tls.Config: TLS 1.3 at least, this
// process's certificate, and a client certificate required and verified
// against the CA bundle. Nil for a nil c. A Config from LoadClient without
// a certificate gives one that fails every handshake.
func (c *Config) Server() *tls.Config {
	if c == nil {
		return nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS13, ClientCAs: c.roots, ClientAuth: tls.RequireAndVerifyClientCert}
	if c.cert != nil {
		t.Certificates = []tls.Certificate{*c.cert}
	}
	return t
}

// Client returns a fresh client-side *tls.Config: TLS 1.3 at least, the
// server's certificate verified against the CA bundle (for the dialled
// host, or Files.ServerName), and this process's certificate presented
// when it has one, whichever CAs the server asks for. Nil for a nil c.
func (c *Config) Client() *tls.Config {
	if c == nil {
		return nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.roots, ServerName: c.files.ServerName}
	if cert := c.cert; cert != nil {
		// Always present it, even when the server names CAs that did not
		// issue it (Go's default with Certificates sends none then): the
		// server can then say why it refuses it.
		t.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return t
}

// String describes c for start-up logs: "mutual TLS (certificate FILE:
// SUBJECT, expires DATE; CA bundle FILE)", or "plaintext" for nil.
func (c *Config) String() string {
	if c == nil {
		return "plaintext"
	}
	if c.leaf == nil {
		return fmt.Sprintf("TLS (no client certificate; CA bundle %s)", c.files.CA)
	}
	return fmt.Sprintf("mutual TLS (certificate %s: %s, expires %s; CA bundle %s)",
		c.files.Cert, subject(c.leaf), c.leaf.NotAfter.UTC().Format("2006-01-02"), c.files.CA)
}
