package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
)

// TestTLSMetadata: with MC_TLS_*_FILE in the environment, an engine
// publishes its descriptor to a master's https:// metadata server over
// mutual TLS; without them it is refused, and with them an http:// URL
// or P2P handshake mode is refused rather than run in the clear.
func TestTLSMetadata(t *testing.T) {
	ca := tlstest.NewCA(t, "te")
	p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0", TLS: tlstest.Load(t, ca.Issue(t, "master"))})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	_, err = newEngine(engineArgs{Conn: p.MetadataURL, Name: "te-plain", Host: "127.0.0.1", Env: map[string]string{}})
	require.Error(t, err, "no client certificate")

	f := ca.Issue(t, "engine")
	env := map[string]string{tlsconfig.EnvCA: f.CA, tlsconfig.EnvCert: f.Cert, tlsconfig.EnvKey: f.Key}
	e := mustEngineArgs(t, engineArgs{Conn: p.MetadataURL, Name: "te-tls", Host: "127.0.0.1", Env: env})
	_, err = e.meta.Get(context.Background(), metadata.RPCMetaKey("", "te-tls"))
	assert.NoError(t, err, "published over TLS")

	_, err = newEngine(engineArgs{Conn: "http://" + strings.TrimPrefix(p.MetadataURL, "https://"), Name: "te-http", Host: "127.0.0.1", Env: env})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "use https://")
	_, err = newEngine(engineArgs{Conn: metadata.P2PHandshake, Name: "te-p2p", Host: "127.0.0.1", Env: env})
	assert.Equal(t, cbridge.Unsupported, cbridge.CodeOf(err), "%v", err)

	half := map[string]string{tlsconfig.EnvCA: f.CA, tlsconfig.EnvKey: f.Key}
	_, err = newEngine(engineArgs{Conn: p.MetadataURL, Name: "te-half", Host: "127.0.0.1", Env: half})
	assert.Equal(t, cbridge.InvalidArgument, cbridge.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "certificate not given")
}
