package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// Mutual TLS on the pool's control plane (ours; upstream has none), with a
// certificate authority made in the test: a pool whose master requires
// client certificates serves clients and nodes that have one, and refuses
// plaintext clients, clients without a certificate and clients whose
// certificate another CA issued, on its gRPC port and on its HTTP metadata
// server; HA masters replicate through an etcd that requires client
// certificates.

// tlsIDs are the identities of one test: the pool's CA and a certificate
// it issued, and a certificate of another CA presented by a client that
// trusts both CAs (so that only the master's refusal can fail it).
type tlsIDs struct {
	ca, other *tlstest.CA
	foreign   tlsconfig.Files
	noCert    *tlsconfig.Config
}

func newTLSIDs(t *testing.T) tlsIDs {
	ca, other := tlstest.NewCA(t, "pool"), tlstest.NewCA(t, "other")
	foreign := other.Issue(t, "intruder")
	foreign.CA = tlstest.Bundle(t, ca, other)
	noCert, err := tlsconfig.LoadClient(tlsconfig.Files{CA: ca.File})
	require.NoError(t, err)
	return tlsIDs{ca: ca, other: other, foreign: foreign, noCert: noCert}
}

func TestTLSPool(t *testing.T) {
	ids := newTLSIDs(t)
	ctx := testContext(t)
	pool, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, SegmentSize: segmentSize, TLS: tlstest.Load(t, ids.ca.Issue(t, "master"))})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.True(t, strings.HasPrefix(pool.Master.MetadataURL, "https://"), pool.Master.MetadataURL)

	// A client with a certificate of the pool's CA: put and get through
	// the nodes, the master and the metadata server all over TLS.
	good := tlstest.Load(t, ids.ca.Issue(t, "client"))
	c, err := pool.NewClient(ctx, client.Config{LocalHostname: "tls-client", LocalBufferSize: localBuffer, TLS: good})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	val := randBytes(newRand(t, 7), 256<<10)
	for i := range 8 {
		require.NoError(t, c.Put(ctx, fmt.Sprintf("tls-%d", i), val, nil))
	}
	for i := range 8 {
		mustGet(t, ctx, c, fmt.Sprintf("tls-%d", i), val)
	}
	st := stats(t, ctx, c)
	assert.EqualValues(t, 2, st.Segments, "both nodes mounted over TLS")
	assert.EqualValues(t, 8, st.Objects)

	// Admin (mooncake ctl) over TLS.
	a, err := client.DialAdmin(pool.Master.RPCAddr, 5*time.Second, client.WithTLS(good))
	require.NoError(t, err)
	segs, err := a.ListSegments(ctx)
	require.NoError(t, err)
	assert.Len(t, segs, 2)
	require.NoError(t, a.Close())

	refused := []struct {
		name string
		tls  *tlsconfig.Config
		want []string // any of these in the error
	}{
		{"plaintext", nil, []string{"does it require TLS?"}},
		{"no certificate", ids.noCert, []string{"requires a client certificate", "closed the connection right after the TLS handshake"}},
		{"certificate of another CA", tlstest.Load(t, ids.foreign), []string{"refused this client's certificate", "closed the connection right after the TLS handshake"}},
		{"server of another CA", tlstest.Load(t, ids.other.Issue(t, "lost")), []string{"server's certificate is not issued by a CA in this client's --tls-ca bundle"}},
	}
	for _, tc := range refused {
		t.Run("gRPC/"+tc.name, func(t *testing.T) {
			_, err := client.New(ctx, client.Config{LocalHostname: "refused", MasterAddr: pool.Master.RPCAddr, Metadata: memmeta.New(),
				Transport: tcp.New(tcp.Config{}), TLS: tc.tls, RPCTimeout: 5 * time.Second})
			require.Error(t, err)
			assert.Equal(t, store.RPCFail, store.CodeOf(err), "%v", err)
			assert.Contains(t, err.Error(), "ping master "+pool.Master.RPCAddr)
			assertContainsAny(t, err.Error(), tc.want)

			a, err := client.DialAdmin(pool.Master.RPCAddr, 5*time.Second, client.WithTLS(tc.tls))
			require.NoError(t, err) // lazy
			defer a.Close()
			_, err = a.ListSegments(ctx)
			require.Error(t, err)
			assertContainsAny(t, err.Error(), tc.want)
		})
	}

	// The HTTP metadata server: the same client identities.
	metaURL := pool.Master.MetadataURL
	m, err := httpmeta.NewClient(metaURL, httpmeta.WithTLSConfig(good.Client()))
	require.NoError(t, err)
	require.NoError(t, m.Put(ctx, "tls-probe", []byte(`{"ok":true}`)))
	got, err := m.Get(ctx, "tls-probe")
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(got))
	_, err = m.Get(ctx, "mooncake/ram/tls-client")
	assert.NoError(t, err, "the client published its descriptor over TLS")

	for _, tc := range []struct {
		name string
		tls  *tlsconfig.Config
		want []string
	}{
		{"no certificate", ids.noCert, []string{"requires a client certificate and got none"}},
		{"certificate of another CA", tlstest.Load(t, ids.foreign), []string{"refused this client's certificate"}},
		{"server of another CA", tlstest.Load(t, ids.other.Issue(t, "lost2")), []string{"certificate signed by unknown authority"}},
	} {
		t.Run("metadata/"+tc.name, func(t *testing.T) {
			m, err := httpmeta.NewClient(metaURL, httpmeta.WithTLSConfig(tc.tls.Client()))
			require.NoError(t, err)
			_, err = m.Get(ctx, "tls-probe")
			require.Error(t, err)
			assertContainsAny(t, err.Error(), tc.want)
		})
	}
	t.Run("metadata/plaintext", func(t *testing.T) {
		plain := "http://" + strings.TrimPrefix(metaURL, "https://")
		m, err := httpmeta.NewClient(plain)
		require.NoError(t, err)
		_, err = m.Get(ctx, "tls-probe")
		var se *httpmeta.StatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusBadRequest, se.StatusCode)
		assert.Contains(t, se.Body, "HTTP request to an HTTPS server")
		_, err = httpmeta.NewClient(plain, httpmeta.WithTLSConfig(good.Client()))
		require.Error(t, err, "a TLS config with an http:// URL is refused")
		assert.Contains(t, err.Error(), "use https://")
	})
}

func assertContainsAny(t *testing.T, s string, subs []string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return
		}
	}
	t.Errorf("%q contains none of %q", s, subs)
}

// TestTLSMetrics: /metrics and /health of a TLS master need a client
// certificate too, unless MetricsPlaintext.
func TestTLSMetrics(t *testing.T) {
	ids := newTLSIDs(t)
	srv := tlstest.Load(t, ids.ca.Issue(t, "master"))
	good := tlstest.Load(t, ids.ca.Issue(t, "scraper"))
	for _, plaintext := range []bool{false, true} {
		t.Run(fmt.Sprintf("plaintext=%v", plaintext), func(t *testing.T) {
			p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", TLS: srv, MetricsPlaintext: plaintext, Logf: t.Logf})
			require.NoError(t, err)
			defer p.Close()
			get := func(url string, tc *tlsconfig.Config) (string, error) {
				hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc.Client()}}
				defer hc.CloseIdleConnections()
				resp, err := hc.Get(url)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return fmt.Sprintf("%d %s", resp.StatusCode, b), err
			}
			if plaintext {
				body, err := get("http://"+p.MetricsAddr+"/health", nil)
				require.NoError(t, err)
				assert.True(t, strings.HasPrefix(body, "200 "), body)
				return
			}
			body, err := get("https://"+p.MetricsAddr+"/metrics", good)
			require.NoError(t, err)
			assert.Contains(t, body, "200 ")
			_, err = get("https://"+p.MetricsAddr+"/metrics", ids.noCert)
			require.Error(t, err)
			body, err = get("http://"+p.MetricsAddr+"/health", nil)
			require.NoError(t, err)
			assert.Contains(t, body, "HTTP request to an HTTPS server")
		})
	}
}

// TestTLSHA: two HA masters with mutual TLS on their gRPC ports share an
// etcd that requires client certificates (the replicated table, the
// election and the clients' leader lookups all go through it); a client
// following the leader writes, the leader resigns, and every object reads
// back from the new leader. A master whose etcd certificate another CA
// issued cannot join: its start fails saying why.
func TestTLSHA(t *testing.T) {
	ids := newTLSIDs(t)
	etcdCA := tlstest.NewCA(t, "etcd")
	ep := etcdtest.StartTLS(t, etcdCA.Issue(t, "etcd-server")) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), haTestTimeout)
	defer cancel()

	masterTLS := tlstest.Load(t, ids.ca.Issue(t, "master"))
	start := func(i int, etcdTLS *tlsconfig.Config) (*server.Process, error) {
		return server.Start(server.ProcessConfig{
			RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", TLS: masterTLS, MetricsPlaintext: true,
			HA: &server.HAConfig{Endpoints: []string{ep}, ClusterID: "tls_ha", EtcdTLS: etcdTLS, DialTimeout: 2 * time.Second,
				Logf: func(format string, args ...any) { t.Logf("master %d: "+format, append([]any{i}, args...)...) }},
		})
	}
	h := &haCluster{t: t, opts: haOptions{Cluster: "tls_ha"}, ep: ep}
	for i := range 2 {
		p, err := start(i, tlstest.Load(t, etcdCA.Issue(t, fmt.Sprintf("master-%d-etcd", i))))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		h.masters = append(h.masters, p)
	}
	old := h.waitLeader(ctx)

	// Standbys that etcd refuses, or that refuse etcd, cannot start, and
	// say why.
	wrongCert := ids.other.Issue(t, "intruder-etcd")
	wrongCert.CA = tlstest.Bundle(t, etcdCA, ids.other) // trusts etcd, etcd does not trust it
	for _, tc := range []struct {
		name string
		tls  *tlsconfig.Config
		want []string
	}{
		{"certificate of another CA", tlstest.Load(t, wrongCert), []string{"unreachable (mutual TLS (certificate " + wrongCert.Cert,
			"the server refused this client after the handshake", "unknown certificate authority", "a CA etcd trusts"}},
		{"etcd server not trusted", tlstest.Load(t, ids.foreign), []string{"x509: certificate signed by unknown authority",
			"the server's certificate is not issued by a CA in this client's --etcd-tls-ca bundle"}},
		{"plaintext", nil, []string{"unreachable (plaintext)", ep + " speaks TLS and this client does not", "--etcd-tls-ca, --etcd-tls-cert and --etcd-tls-key"}},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			p, err := start(9, tc.tls)
			if err == nil {
				p.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "master: etcd ["+ep+"] unreachable")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	clientEtcd := tlstest.Load(t, etcdCA.Issue(t, "client-etcd"))
	meta, err := etcdmeta.New(ctx, []string{ep}, etcdmeta.WithTLSConfig(clientEtcd.Client()))
	require.NoError(t, err)
	t.Cleanup(func() { meta.Close() })
	clientTLS := tlstest.Load(t, ids.ca.Issue(t, "client"))
	newHAClient := func(name string, segment uint64) *client.Client {
		c, err := client.New(ctx, client.Config{LocalHostname: name, MasterAddr: "etcd://" + ep, ClusterID: "tls_ha", Metadata: meta,
			Transport: tcp.New(tcp.Config{}), PingInterval: 100 * time.Millisecond, GlobalSegmentSize: segment, LocalBufferSize: localBuffer,
			TLS: clientTLS, EtcdTLS: clientEtcd})
		require.NoError(t, err, name)
		t.Cleanup(func() { c.Close() })
		return c
	}
	newHAClient("tls-node", 8<<20)
	c := newHAClient("tls-writer", 0)
	vals := make([][]byte, 10)
	for i := range vals {
		vals[i] = valueFor(5, i, 32<<10)
		require.NoError(t, c.Put(ctx, fmt.Sprintf("ha-tls-%d", i), vals[i], nil))
	}
	old.Close() // resigns
	pollUntil(t, ctx, "a new leader", func() bool { l := h.leader(); return l != nil && l != old })
	for i, v := range vals {
		key := fmt.Sprintf("ha-tls-%d", i)
		eventually(t, 20*time.Second, "read "+key+" from the new leader", func() error {
			got, err := c.Get(ctx, key)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, v) {
				return fmt.Errorf("%s: wrong bytes", key)
			}
			return nil
		})
	}
}
