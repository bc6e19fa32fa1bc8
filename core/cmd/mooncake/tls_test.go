package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
)

func tlsArgs(f tlsconfig.Files) []string {
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls_key", f.Key} // either spelling
}

// TestTLSTwoProcessPool: `mooncake master --tls-*` and `mooncake node
// --tls-*` form a pool over mutual TLS that `ctl` and `replay` with a
// certificate of the same CA use; without one, ctl is refused saying
// why.
func TestTLSTwoProcessPool(t *testing.T) {
	ca := tlstest.NewCA(t, "cli")
	ports := freePorts(t, 3)
	rpc := "127.0.0.1:" + strconv.Itoa(ports[0])
	meta := "https://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metadata"
	m, ready := startDaemon(t, append([]string{"master", "--rpc_port", strconv.Itoa(ports[0]), "--metrics_port", strconv.Itoa(ports[1]),
		"--http_metadata_server_port", strconv.Itoa(ports[2]), "--rpc_address", "127.0.0.1",
		"--metrics_host", "127.0.0.1", "--http_metadata_server_host", "127.0.0.1"}, tlsArgs(ca.Issue(t, "master"))...)...)
	assert.Contains(t, ready, "metadata "+meta)
	assert.Contains(t, ready, "; mutual TLS (certificate ")

	n, ready := startDaemon(t, append([]string{"node", "--master", rpc, "--metadata_server", meta, "--segment-size", "16MiB", "--bind", "127.0.0.1:0"},
		tlsArgs(ca.Issue(t, "node"))...)...)
	assert.Contains(t, ready, "contributes 16.0 MiB to "+rpc)

	ctl := ca.Issue(t, "operator")
	segs := ctlOK(t, rpc, append(tlsArgs(ctl), "segments")...)
	require.Len(t, segs, 2, "header and the node's segment")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(segs[1]), " standalone"), segs[1])

	// The environment stands in for the flags.
	t.Run("env", func(t *testing.T) {
		t.Setenv(tlsconfig.EnvCA, ctl.CA)
		t.Setenv(tlsconfig.EnvCert, ctl.Cert)
		t.Setenv(tlsconfig.EnvKey, ctl.Key)
		assert.Len(t, ctlOK(t, rpc, "segments"), 2)
	})

	r := mooncake(t, 30*time.Second, "ctl", "--master", rpc, "--timeout", "5s", "segments")
	assert.Equal(t, 1, r.code)
	line := oneLine(t, r.stderr)
	assert.Contains(t, line, "does it require TLS? give this client --tls-ca, --tls-cert and --tls-key")

	rep := report(t, mooncake(t, 60*time.Second, append([]string{"replay", "--master", rpc, "--metadata-server", meta, "--limit", "50", "--json"}, tlsArgs(ca.Issue(t, "replay"))...)...))
	assert.EqualValues(t, 50, rep["requests"])
	assert.EqualValues(t, 16<<20, rep["pool_bytes"])

	n.stop(t)
	m.stop(t)
	assert.Contains(t, m.log(), "tls: refused connection from 127.0.0.1:", "the master logs the refused ctl")
}

// TestTLSInProcessReplay: replay's in-process pool runs over mutual TLS
// when given certificates.
func TestTLSInProcessReplay(t *testing.T) {
	ca := tlstest.NewCA(t, "replay")
	rep := report(t, mooncake(t, 60*time.Second, append([]string{"replay", "--limit", "20", "--json"}, tlsArgs(ca.Issue(t, "pool"))...)...))
	assert.EqualValues(t, 20, rep["requests"])
}

// TestTLSBadFiles: every subcommand refuses unusable TLS files at start,
// exit status 2, one line naming the file.
func TestTLSBadFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "bad")
	good := ca.Issue(t, "good")
	other := tlstest.NewCA(t, "other").Issue(t, "other")
	missing := t.TempDir() + "/missing.pem"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"master: missing certificate", []string{"master", "--tls-ca", good.CA, "--tls-cert", missing, "--tls-key", good.Key},
			"mooncake master: --tls-ca/--tls-cert/--tls-key: tlsconfig: invalid TLS settings: certificate " + missing + ": no such file or directory"},
		{"master: key of another certificate", []string{"master", "--tls-ca", good.CA, "--tls-cert", good.Cert, "--tls-key", other.Key},
			"certificate " + good.Cert + " and private key " + other.Key},
		{"master: no key", []string{"master", "--tls-ca", good.CA, "--tls-cert", good.Cert}, "private key not given"},
		{"master: metrics_plaintext without TLS", []string{"master", "--metrics_plaintext"}, "--metrics_plaintext needs --tls-ca"},
		{"master: etcd CA missing", []string{"master", "--etcd-tls-ca", missing}, "--etcd-tls-ca/--etcd-tls-cert/--etcd-tls-key: tlsconfig: invalid TLS settings: CA bundle " + missing},
		{"node: CA of another CA's certificate", []string{"node", "--tls-ca", good.CA, "--tls-cert", other.Cert, "--tls-key", other.Key},
			"mooncake node: --tls-ca/--tls-cert/--tls-key: tlsconfig: invalid TLS settings: certificate " + other.Cert},
		{"ctl: missing CA", []string{"ctl", "segments", "--tls-ca", missing, "--tls-cert", good.Cert, "--tls-key", good.Key}, "mooncake ctl segments: --tls-ca/--tls-cert/--tls-key: tlsconfig: invalid TLS settings: CA bundle " + missing},
		{"ctl: server name alone", []string{"ctl", "segments", "--tls-server-name", "master.example"}, "--tls-server-name \"master.example\" without --tls-ca"},
		{"replay: garbage key", []string{"replay", "--tls-ca", good.CA, "--tls-cert", good.Cert, "--tls-key", good.CA}, "private key " + good.CA + " holds no PEM private key block (found CERTIFICATE)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mooncake(t, 30*time.Second, tc.args...)
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, oneLine(t, r.stderr), tc.want)
		})
	}
}

// TestTLSMetadataServer: `mooncake metadata-server --tls-*` serves
// https:// to clients with a certificate of its CA only.
func TestTLSMetadataServer(t *testing.T) {
	ca := tlstest.NewCA(t, "meta")
	d, ready := startDaemon(t, append([]string{"metadata-server", "--host", "127.0.0.1", "--port", "0"}, tlsArgs(ca.Issue(t, "server"))...)...)
	m := regexp.MustCompile(`serving (https://127\.0\.0\.1:\d+/metadata); mutual TLS`).FindStringSubmatch(ready)
	require.NotNil(t, m, ready)
	ctx := context.Background()
	good, err := httpmeta.NewClient(m[1], httpmeta.WithTLSConfig(tlstest.Load(t, ca.Issue(t, "engine")).Client()))
	require.NoError(t, err)
	require.NoError(t, good.Put(ctx, "mooncake/ram/x", []byte(`{"name":"x"}`)))
	got, err := good.Get(ctx, "mooncake/ram/x")
	require.NoError(t, err)
	assert.Equal(t, `{"name":"x"}`, string(got))
	noCert, err := tlsconfig.LoadClient(tlsconfig.Files{CA: ca.File})
	require.NoError(t, err)
	bad, err := httpmeta.NewClient(m[1], httpmeta.WithTLSConfig(noCert.Client()))
	require.NoError(t, err)
	_, err = bad.Get(ctx, "mooncake/ram/x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "requires a client certificate")
	code, body := httpGet(t, "http://"+strings.TrimPrefix(m[1], "https://")+"?key=mooncake/ram/x")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "HTTP request to an HTTPS server")
	d.stop(t)
	assert.Contains(t, d.log(), "TLS handshake error", "refusals are logged")
}
