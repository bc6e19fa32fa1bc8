package tlsconfig

import (
	"net"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DialCredentials returns the gRPC transport credentials of a client: TLS
// from c.Client(), or plaintext (insecure.NewCredentials, upstream's only
// mode) for a nil c.
func DialCredentials(c *Config) credentials.TransportCredentials {
	if c == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(c.Client())
}

// ServerCredentials returns the gRPC transport credentials of a server
// requiring mutual TLS (c.Server()); nil for a nil c (plaintext). logf,
// when not nil, receives one line per refused handshake naming the peer
// and the reason (no certificate, an unknown CA, a plaintext client), as
// net/http logs "TLS handshake error"; gRPC itself says nothing.
func ServerCredentials(c *Config, logf func(format string, args ...any)) credentials.TransportCredentials {
	if c == nil {
		return nil
	}
	tc := credentials.NewTLS(c.Server())
	if logf == nil {
		return tc
	}
	return loggingCreds{TransportCredentials: tc, logf: logf}
}

// loggingCreds logs failed server handshakes.
type loggingCreds struct {
	credentials.TransportCredentials
	logf func(format string, args ...any)
}

func (l loggingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ai, err := l.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		l.logf("tls: refused connection from %s: %v", conn.RemoteAddr(), err)
	}
	return c, ai, err
}

func (l loggingCreds) Clone() credentials.TransportCredentials {
	return loggingCreds{TransportCredentials: l.TransportCredentials.Clone(), logf: l.logf}
}

// Hint explains a connection error of a client in TLS terms, for error
// messages: "" when err does not look like a TLS mismatch. tlsOn says
// whether the client used TLS. A plaintext client of a TLS server sees
// the connection closed before any answer; a TLS client of a plaintext
// server sees "first record does not look like a TLS handshake"; a
// refused certificate arrives as a TLS alert.
func Hint(err error, tlsOn bool) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	switch {
	case !tlsOn && (strings.Contains(s, "error reading server preface") || strings.Contains(s, "connection closed before server preface") ||
		strings.Contains(s, "broken pipe") || strings.Contains(s, "connection reset by peer")):
		return "the server closed the connection at once: does it require TLS? give this client --tls-ca, --tls-cert and --tls-key (" + EnvCA + ", " + EnvCert + ", " + EnvKey + ")"
	case tlsOn && strings.Contains(s, "first record does not look like a TLS handshake"):
		return "the server does not speak TLS: start it with --tls-ca, --tls-cert and --tls-key, or drop TLS from this client"
	case tlsOn && strings.Contains(s, "certificate required"):
		return "the server requires a client certificate and got none: give this client --tls-cert and --tls-key"
	case tlsOn && (strings.Contains(s, "unknown certificate authority") || strings.Contains(s, "bad certificate")):
		return "the server refused this client's certificate: is it issued by a CA in the server's --tls-ca bundle?"
	case tlsOn && (strings.Contains(s, "broken pipe") || strings.Contains(s, "connection reset by peer") || strings.Contains(s, "error reading server preface: EOF")):
		// The TLS 1.3 server's verdict on the client's certificate comes
		// after the client's handshake; a client writing at once may see
		// the closed connection instead of the alert.
		return "the server closed the connection right after the TLS handshake: it may refuse this client's certificate (the server's log says why)"
	case tlsOn && strings.Contains(s, "certificate signed by unknown authority"):
		return "the server's certificate is not issued by a CA in this client's --tls-ca bundle"
	case tlsOn && (strings.Contains(s, "certificate is valid for") || strings.Contains(s, "doesn't contain any IP SANs")):
		return "the server's certificate does not name the address dialled: add it to the certificate, or set --tls-server-name (" + EnvServerName + ") to a name it has"
	}
	return ""
}
