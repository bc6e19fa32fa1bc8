package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
)

// TestTLSFromEnv: upstream's setup() has no TLS arguments; the
// MC_TLS_*_FILE variables give the C and Python store API mutual TLS to a
// master that requires it (its metadata server is then https://).
func TestTLSFromEnv(t *testing.T) {
	ca := tlstest.NewCA(t, "abi")
	p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0", TLS: tlstest.Load(t, ca.Issue(t, "master"))})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.True(t, strings.HasPrefix(p.MetadataURL, "https://"))

	// No variables: the master refuses the plaintext client.
	_, err = newStore(args(p, 0, mib))
	require.Error(t, err)

	f := ca.Issue(t, "engine")
	t.Setenv(tlsconfig.EnvCA, f.CA)
	t.Setenv(tlsconfig.EnvCert, f.Cert)
	t.Setenv(tlsconfig.EnvKey, f.Key)
	node := mustStore(t, args(p, 16*mib, 0))
	a := mustStore(t, args(p, 0, mib))
	b := mustStore(t, args(p, 0, mib))
	assert.NotEmpty(t, node.name)
	val := bytes.Repeat([]byte("tls"), 1000)
	require.NoError(t, b.put("k", val))
	got := make([]byte, len(val))
	n, err := a.get("k", got)
	require.NoError(t, err)
	assert.Equal(t, val, got[:n])
	size, err := a.getSize("k") // through the handle's own connection
	require.NoError(t, err)
	assert.EqualValues(t, len(val), size)

	plain := args(p, 0, mib)
	plain.MetadataServer = "http://" + strings.TrimPrefix(p.MetadataURL, "https://")
	_, err = newStore(plain)
	wantCode(t, "http:// metadata with TLS", err, cbridge.InvalidArgument)

	t.Setenv(tlsconfig.EnvKey, f.CA) // a certificate, not a key
	_, err = newStore(args(p, 0, mib))
	wantCode(t, "bad key file", err, cbridge.InvalidArgument)
	assert.True(t, errors.Is(err, tlsconfig.ErrInvalid))
	assert.Contains(t, err.Error(), "MC_TLS_CA_FILE/MC_TLS_CERT_FILE/MC_TLS_KEY_FILE")
	assert.Contains(t, err.Error(), "private key "+f.CA+" holds no PEM private key block")
}
