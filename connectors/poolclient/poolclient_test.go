package poolclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/connectors/config"
	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestOpenTLS: a client opened from mc_tls_* settings joins a pool whose
// master requires mutual TLS, through its https:// metadata server; bad
// TLS settings fail Open naming the file or the setting.
func TestOpenTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca := tlstest.NewCA(t, "engine")
	pool, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20, TLS: tlstest.Load(t, ca.Issue(t, "master"))})
	require.NoError(t, err)
	defer pool.Close()

	f := ca.Issue(t, "engine")
	base := config.Defaults(config.Generic)
	base.LocalHostname = "127.0.0.1"
	base.MasterServerAddress = pool.Master.RPCAddr
	base.MetadataServer = pool.Master.MetadataURL
	base.GlobalSegmentSize = 0
	cfg := base
	cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile = f.CA, f.Cert, f.Key
	p, err := poolclient.Open(ctx, cfg, poolclient.Options{NoShm: true, Timeout: 20 * time.Second, Env: map[string]string{}})
	require.NoError(t, err)
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.Segments, "the node's segment, seen over TLS")
	m, err := httpmeta.NewClient(pool.Master.MetadataURL, httpmeta.WithTLSConfig(tlstest.Load(t, f).Client()))
	require.NoError(t, err)
	_, err = m.Get(ctx, "mooncake/rpc_meta/"+p.Name)
	assert.NoError(t, err, "the engine published its descriptor over https")
	require.NoError(t, p.Close())

	missing := t.TempDir() + "/gone.pem"
	for _, tc := range []struct {
		name string
		mod  func(c *config.Config)
		want []string
	}{
		{"missing key file", func(c *config.Config) { c.TLSKeyFile = missing },
			[]string{"mc_tls_ca_file/mc_tls_cert_file/mc_tls_key_file", "private key " + missing + ": no such file"}},
		{"plaintext metadata URL", func(c *config.Config) {
			c.MetadataServer = "http://" + strings.TrimPrefix(pool.Master.MetadataURL, "https://")
		},
			[]string{"plaintext http:// while TLS is configured; use https://"}},
		{"P2P handshake", func(c *config.Config) { c.MetadataServer = config.DefaultMetadataServer }, []string{"unsupported", "P2P handshake has no TLS"}},
		{"etcd CA missing", func(c *config.Config) { c.EtcdTLSCAFile = missing }, []string{"mc_etcd_tls_ca_file/", "CA bundle " + missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.mod(&c)
			_, err := poolclient.Open(ctx, c, poolclient.Options{NoShm: true, Timeout: 10 * time.Second, Env: map[string]string{}})
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			if strings.Contains(tc.name, "missing") {
				assert.True(t, errors.Is(err, tlsconfig.ErrInvalid))
			}
		})
	}
	// Without TLS settings, the master refuses the client.
	_, err = poolclient.Open(ctx, base, poolclient.Options{NoShm: true, Timeout: 10 * time.Second, Env: map[string]string{}})
	require.Error(t, err)
}
