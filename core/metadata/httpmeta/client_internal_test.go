package httpmeta

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientDefaults pins upstream's HTTPStoragePlugin settings: 3000 ms per
// request, 1500 ms to connect (the dialer; TLS gets the same bound), no
// proxy, no redirects.
func TestClientDefaults(t *testing.T) {
	c, err := NewClient("http://127.0.0.1:1/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if DefaultRequestTimeout != 3000*time.Millisecond || DefaultConnectTimeout != 1500*time.Millisecond {
		t.Fatalf("defaults = %v/%v, want 3000ms/1500ms", DefaultRequestTimeout, DefaultConnectTimeout)
	}
	if c.hc.Timeout != DefaultRequestTimeout {
		t.Errorf("request timeout = %v, want %v", c.hc.Timeout, DefaultRequestTimeout)
	}
	if c.transport == nil || c.hc.Transport != c.transport {
		t.Fatal("client does not use its own transport")
	}
	if c.transport.TLSHandshakeTimeout != DefaultConnectTimeout {
		t.Errorf("TLS handshake timeout = %v, want %v", c.transport.TLSHandshakeTimeout, DefaultConnectTimeout)
	}
	if c.transport.Proxy != nil {
		t.Error("transport consults a proxy")
	}
	if c.hc.CheckRedirect == nil || c.hc.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("client follows redirects")
	}
	if c.maxResponse != DefaultMaxValueBytes {
		t.Errorf("max response = %d, want %d", c.maxResponse, DefaultMaxValueBytes)
	}

	c2, err := NewClient("http://127.0.0.1:1/metadata", WithRequestTimeout(time.Second), WithConnectTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.hc.Timeout != time.Second || c2.transport.TLSHandshakeTimeout != 250*time.Millisecond {
		t.Errorf("options not applied: %v / %v", c2.hc.Timeout, c2.transport.TLSHandshakeTimeout)
	}
}

// TestReadAllSizedAnnouncedLength: a body that announces 64 MiB and
// carries ten bytes fails without 64 MiB being allocated first (a peer
// announcing large bodies on many connections must not cost that much
// memory each), and bodies on both sides of the preallocation limit read
// back exactly.
func TestReadAllSizedAnnouncedLength(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readAllSized(strings.NewReader("0123456789"), DefaultMaxValueBytes)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "bytes allocated for a 10-byte body")

	for _, n := range []int{0, 1, preallocLimit, preallocLimit + 1, 3*preallocLimit + 5} {
		want := bytes.Repeat([]byte{7}, n)
		got, err := readAllSized(bytes.NewReader(want), int64(n))
		require.NoError(t, err, "%d bytes", n)
		require.Equal(t, want, got, "%d bytes", n)
		_, err = readAllSized(bytes.NewReader(want), int64(n)+1)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%d of %d bytes", n, n+1)
	}
}
