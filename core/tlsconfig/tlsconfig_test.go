package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestLoadOff(t *testing.T) {
	c, err := tlsconfig.Load(tlsconfig.Files{})
	require.NoError(t, err)
	assert.Nil(t, c)
	assert.Nil(t, c.Server())
	assert.Nil(t, c.Client())
	assert.Equal(t, "plaintext", c.String())
	c, err = tlsconfig.LoadClient(tlsconfig.Files{ServerName: "x"})
	require.NoError(t, err)
	assert.Nil(t, c, "a server name alone does not turn TLS on")
}

func TestLoad(t *testing.T) {
	ca := tlstest.NewCA(t, "pool")
	f := ca.Issue(t, "master")
	c, err := tlsconfig.Load(f)
	require.NoError(t, err)
	assert.Equal(t, f, c.Files())
	assert.Equal(t, "master", c.Leaf().Subject.CommonName)
	s := c.Server()
	assert.Equal(t, uint16(tls.VersionTLS13), s.MinVersion)
	assert.Equal(t, tls.RequireAndVerifyClientCert, s.ClientAuth)
	require.Len(t, s.Certificates, 1)
	cl := c.Client()
	assert.Equal(t, uint16(tls.VersionTLS13), cl.MinVersion)
	require.NotNil(t, cl.GetClientCertificate)
	got, err := cl.GetClientCertificate(&tls.CertificateRequestInfo{})
	require.NoError(t, err)
	assert.Equal(t, c.Leaf(), got.Leaf)
	assert.NotNil(t, cl.RootCAs)
	assert.NotSame(t, c.Client(), cl, "a fresh config per call")
	assert.Contains(t, c.String(), "mutual TLS (certificate "+f.Cert)

	// CA-only client (etcd without client-cert-auth).
	oc, err := tlsconfig.LoadClient(tlsconfig.Files{CA: ca.File})
	require.NoError(t, err)
	assert.Nil(t, oc.Client().GetClientCertificate)
	assert.Nil(t, oc.Leaf())

	env := map[string]string{tlsconfig.EnvCA: "a", tlsconfig.EnvCert: "b", tlsconfig.EnvKey: "c", tlsconfig.EnvServerName: "d",
		tlsconfig.EnvEtcdCA: "e", tlsconfig.EnvEtcdCert: "f", tlsconfig.EnvEtcdKey: "g"}
	get := func(k string) string { return env[k] }
	assert.Equal(t, tlsconfig.Files{CA: "a", Cert: "b", Key: "c", ServerName: "d"}, tlsconfig.FromEnv(get))
	assert.Equal(t, tlsconfig.Files{CA: "e", Cert: "f", Key: "g"}, tlsconfig.EtcdFromEnv(get))
}

// TestLoadErrors: every start-up error names the file at fault.
func TestLoadErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "pool")
	other := tlstest.NewCA(t, "other")
	good := ca.Issue(t, "node")
	foreign := other.Issue(t, "foreign")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	garbage := write("garbage.pem", "not a PEM file\n")
	unreadable := write("unreadable.pem", "x")
	require.NoError(t, os.Chmod(unreadable, 0))
	expired := ca.IssueLeaf(t, "expired", tlstest.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	future := ca.IssueLeaf(t, "future", tlstest.Leaf{NotBefore: time.Now().Add(time.Hour)})
	missing := filepath.Join(dir, "missing.pem")

	cases := []struct {
		name   string
		f      tlsconfig.Files
		client bool     // LoadClient instead of Load
		want   []string // substrings of the error
	}{
		{"only a CA", tlsconfig.Files{CA: ca.File}, false, []string{"certificate and private key not given", ca.File}},
		{"no key", tlsconfig.Files{CA: ca.File, Cert: good.Cert}, false, []string{"private key not given"}},
		{"no CA", tlsconfig.Files{Cert: good.Cert, Key: good.Key}, false, []string{"CA bundle not given"}},
		{"client: no CA", tlsconfig.Files{Cert: good.Cert, Key: good.Key}, true, []string{"CA bundle", "none given"}},
		{"client: cert without key", tlsconfig.Files{CA: ca.File, Cert: good.Cert}, true, []string{"certificate " + good.Cert + " given without its private key"}},
		{"client: key without cert", tlsconfig.Files{CA: ca.File, Key: good.Key}, true, []string{"private key " + good.Key + " given without its certificate"}},
		{"missing CA", tlsconfig.Files{CA: missing, Cert: good.Cert, Key: good.Key}, false, []string{"CA bundle " + missing + ": no such file or directory"}},
		{"missing cert", tlsconfig.Files{CA: ca.File, Cert: missing, Key: good.Key}, false, []string{"certificate " + missing + ": no such file"}},
		{"missing key", tlsconfig.Files{CA: ca.File, Cert: good.Cert, Key: missing}, false, []string{"private key " + missing + ": no such file"}},
		{"garbage CA", tlsconfig.Files{CA: garbage, Cert: good.Cert, Key: good.Key}, false, []string{"CA bundle " + garbage + " holds no PEM CERTIFICATE block"}},
		{"garbage cert", tlsconfig.Files{CA: ca.File, Cert: garbage, Key: good.Key}, false, []string{"certificate " + garbage + " holds no PEM CERTIFICATE block"}},
		{"garbage key", tlsconfig.Files{CA: ca.File, Cert: good.Cert, Key: garbage}, false, []string{"private key " + garbage + " holds no PEM private key block"}},
		{"key is a certificate", tlsconfig.Files{CA: ca.File, Cert: good.Cert, Key: good.Cert}, false, []string{"private key " + good.Cert + " holds no PEM private key block (found CERTIFICATE)"}},
		{"key of another certificate", tlsconfig.Files{CA: ca.File, Cert: good.Cert, Key: foreign.Key}, false,
			[]string{"certificate " + good.Cert + " and private key " + foreign.Key, "does not match"}},
		{"certificate of another CA", tlsconfig.Files{CA: ca.File, Cert: foreign.Cert, Key: foreign.Key}, false,
			[]string{"certificate " + foreign.Cert, "is not issued by a CA in " + ca.File}},
		{"expired", expired, false, []string{"certificate " + expired.Cert, "expired at"}},
		{"not yet valid", future, false, []string{"certificate " + future.Cert, "is not valid before"}},
	}
	if os.Geteuid() != 0 { // root reads a file whatever its mode
		cases = append(cases, struct {
			name   string
			f      tlsconfig.Files
			client bool
			want   []string
		}{"unreadable key", tlsconfig.Files{CA: ca.File, Cert: good.Cert, Key: unreadable}, false, []string{"private key " + unreadable + ": permission denied"}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			load := tlsconfig.Load
			if tc.client {
				load = tlsconfig.LoadClient
			}
			c, err := load(tc.f)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.True(t, errors.Is(err, tlsconfig.ErrInvalid), "%v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestGRPCHandshakes runs a gRPC server with mutual TLS and one without,
// and dials them with every kind of client: only a client with a
// certificate of the pool's CA gets an answer; the others fail with an
// error that Hint explains, and the server logs the refusal.
func TestGRPCHandshakes(t *testing.T) {
	ca := tlstest.NewCA(t, "pool")
	other := tlstest.NewCA(t, "other")
	logs := make(chan string, 16)
	logf := func(format string, args ...any) {
		select {
		case logs <- format:
		default:
		}
	}
	serve := func(c *tlsconfig.Config) string {
		var opts []grpc.ServerOption
		if c != nil {
			opts = append(opts, grpc.Creds(tlsconfig.ServerCredentials(c, logf)))
		}
		s := grpc.NewServer(opts...)
		healthpb.RegisterHealthServer(s, health.NewServer())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go s.Serve(ln)
		t.Cleanup(s.Stop)
		return ln.Addr().String()
	}
	tlsAddr := serve(tlstest.Load(t, ca.Issue(t, "master")))
	plainAddr := serve(nil)

	noCert, err := tlsconfig.LoadClient(tlsconfig.Files{CA: ca.File})
	require.NoError(t, err)
	// Trusts the pool's CA, but presents a certificate of another CA.
	foreign := other.Issue(t, "foreign")
	foreign.CA = tlstest.Bundle(t, ca, other)
	wrongName := ca.Issue(t, "named")
	wrongName.ServerName = "not-the-master.example"
	cases := []struct {
		name    string
		addr    string
		c       *tlsconfig.Config
		ok      bool
		hint    string // substring of Hint (or the hint of a connection closed after the handshake)
		refused bool   // the TLS server logs a refusal
	}{
		{"pool certificate", tlsAddr, tlstest.Load(t, ca.Issue(t, "node")), true, "", false},
		{"no certificate", tlsAddr, noCert, false, "requires a client certificate", true},
		{"certificate of another CA", tlsAddr, tlstest.Load(t, foreign), false, "refused this client's certificate", true},
		{"plaintext client", tlsAddr, nil, false, "does it require TLS?", true},
		{"server of another CA", tlsAddr, tlstest.Load(t, other.Issue(t, "lost")), false, "server's certificate is not issued by a CA", true},
		{"wrong server name", tlsAddr, tlstest.Load(t, wrongName), false, "does not name the address dialled", true},
		{"TLS client of a plaintext server", plainAddr, tlstest.Load(t, ca.Issue(t, "node2")), false, "does not speak TLS", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for len(logs) > 0 {
				<-logs
			}
			conn, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(tlsconfig.DialCredentials(tc.c)))
			require.NoError(t, err)
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if tc.ok {
				require.NoError(t, err)
				dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
				assert.NoError(t, tlsconfig.Diagnose(dctx, "https://"+tc.addr, tc.c.Client()))
				dcancel()
				assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status)
				assert.Empty(t, tlsconfig.Hint(err, true))
				return
			}
			require.Error(t, err)
			assert.Equal(t, codes.Unavailable, grpcstatus.Code(err), "%v", err)
			hint := tlsconfig.Hint(err, tc.c != nil)
			if tc.c == nil || !strings.Contains(hint, "closed the connection right after the TLS handshake") {
				assert.Contains(t, hint, tc.hint, "%v", err)
			}
			// Diagnose finds the same cause without gRPC.
			dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
			derr := tlsconfig.Diagnose(dctx, tc.addr, tc.c.Client())
			dcancel()
			require.Error(t, derr)
			assert.Contains(t, derr.Error(), tc.addr)
			assert.Contains(t, tlsconfig.Hint(derr, tc.c != nil), tc.hint, "%v", derr)
			if tc.refused {
				select {
				case l := <-logs:
					assert.Contains(t, l, "tls: refused connection from")
				case <-ctx.Done():
					t.Fatal("the server logged no refusal")
				}
			}
		})
	}
}
