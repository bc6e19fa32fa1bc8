package tlsconfig

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
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

// HintSep separates a gRPC status message from the Hint that DialOptions'
// interceptor appends to it.
const HintSep = "; TLS: "

// DialOptions returns the gRPC dial options of a client of the pool:
// DialCredentials(c), and an interceptor that appends HintSep and Hint's
// explanation to the message of a call failing with code Unavailable (the
// code is kept, so retries still see it). Put it before other
// interceptors so that it sees the final error.
func DialOptions(c *Config) []grpc.DialOption {
	tlsOn := c != nil
	return []grpc.DialOption{
		grpc.WithTransportCredentials(DialCredentials(c)),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if st, ok := grpcstatus.FromError(err); ok && st.Code() == codes.Unavailable {
				if h := Hint(err, tlsOn); h != "" {
					return grpcstatus.Error(codes.Unavailable, st.Message()+HintSep+h)
				}
			}
			return err
		}),
	}
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

// Hint explains a connection error of a client of the pool (master gRPC,
// HTTP metadata) in TLS terms, for error messages: "" when err does not
// look like a TLS mismatch. tlsOn says whether the client used TLS. A
// plaintext client of a TLS server sees the connection closed before any
// answer; a TLS client of a plaintext server sees "first record does not
// look like a TLS handshake"; a refused certificate arrives as a TLS alert
// or as the connection closed right after the handshake.
func Hint(err error, tlsOn bool) string {
	return hint(err, tlsOn, "--tls-", EnvCA, EnvCert, EnvKey)
}

// EtcdHint is Hint for a client of etcd, naming the --etcd-tls-* settings.
func EtcdHint(err error, tlsOn bool) string {
	return hint(err, tlsOn, "--etcd-tls-", EnvEtcdCA, EnvEtcdCert, EnvEtcdKey)
}

func hint(err error, tlsOn bool, flag, envCA, envCert, envKey string) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case !tlsOn && has("error reading server preface", "connection closed before server preface", "broken pipe", "connection reset by peer",
		"speaks TLS and this client does not"):
		return fmt.Sprintf("the server closed the connection at once: does it require TLS? give this client %sca, %scert and %skey (%s, %s, %s)",
			flag, flag, flag, envCA, envCert, envKey)
	case tlsOn && has("first record does not look like a TLS handshake"):
		return "the server does not speak TLS: start it with TLS too, or drop TLS from this client"
	case tlsOn && has("certificate required"):
		return fmt.Sprintf("the server requires a client certificate and got none: give this client %scert and %skey", flag, flag)
	case tlsOn && has("unknown certificate authority", "bad certificate"):
		if flag == "--tls-" {
			return "the server refused this client's certificate: is it issued by a CA in the server's --tls-ca bundle?"
		}
		return "the server refused this client's certificate: is it issued by a CA etcd trusts (its --trusted-ca-file)?"
	case tlsOn && has("broken pipe", "connection reset by peer", "error reading server preface: EOF"):
		// The TLS 1.3 server's verdict on the client's certificate comes
		// after the client's handshake; a client writing at once may see
		// the closed connection instead of the alert.
		return "the server closed the connection right after the TLS handshake: it may refuse this client's certificate (the server's log says why)"
	case tlsOn && has("certificate signed by unknown authority"):
		return fmt.Sprintf("the server's certificate is not issued by a CA in this client's %sca bundle", flag)
	case tlsOn && has("certificate is valid for", "doesn't contain any IP SANs"):
		if flag == "--tls-" {
			return "the server's certificate does not name the address dialled: add it to the certificate, or set --tls-server-name (" + EnvServerName + ") to a name it has"
		}
		return "the server's certificate does not name the address dialled: add it to the certificate"
	}
	return ""
}

// Diagnose finds out why a client could not talk to the server at addr
// (host:port, optionally prefixed "http://" or "https://"), for clients
// whose library reports only a timeout (etcd's waits for a connection
// until its deadline): it dials addr and runs the TLS handshake tc
// describes (nil = a plaintext client: it checks whether the server
// speaks TLS), then waits briefly for the alert a TLS 1.3 server sends
// after the handshake when it refuses the client's certificate. It returns
// nil when it found nothing wrong, else an error naming addr and the
// cause: the dial's error, the handshake's, the refusal, or "speaks TLS"
// for a plaintext client of a TLS server. ctx bounds it.
func Diagnose(ctx context.Context, addr string, tc *tls.Config) error {
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if tc == nil {
		// Only to learn whether the server answers a TLS hello; nothing
		// is sent after the handshake.
		tconn := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // a probe, no data sent
		if tconn.HandshakeContext(ctx) == nil {
			return fmt.Errorf("%s speaks TLS and this client does not", addr)
		}
		return nil
	}
	cfg := tc.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"h2"}
	}
	tconn := tls.Client(conn, cfg)
	if err := tconn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	// A refusal of our certificate arrives now (TLS 1.3) or never.
	_ = tconn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := tconn.Read(b[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil
		}
		return fmt.Errorf("TLS with %s: the server refused this client after the handshake: %w", addr, err)
	}
	return nil
}
