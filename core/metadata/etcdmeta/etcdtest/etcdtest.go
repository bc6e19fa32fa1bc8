// Package etcdtest starts a real, embedded, single-member etcd server for
// tests of packages that talk to etcd (etcdmeta, HA leader election, ...).
//
// The server keeps its data in t.TempDir(), listens on 127.0.0.1 at free
// ports (client and peer), logs nothing, and is stopped by t.Cleanup. Under
// "go test -short" Start skips the test. It is a non-test file so that other
// packages' tests can import it; production code must not.
//
// Unix sockets are not used: etcd takes a unix listen address from the
// URL's host part, relative to the working directory, which would put socket
// files in the package source tree.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// MaxRequestBytes is the server's --max-request-bytes: large enough for the
// metadatatest suite's 4 MiB value (etcd's default is 1.5 MiB).
const MaxRequestBytes = 16 << 20

// ReadyTimeout bounds how long Start waits for the server to be ready.
const ReadyTimeout = 30 * time.Second

// startAttempts is how often Start retries with fresh ports when another
// process took a port between choosing it and etcd binding it.
const startAttempts = 3

// Start starts an embedded etcd server and returns its client endpoint
// "127.0.0.1:<port>", usable as a bare metadata connection string. It calls
// t.Skip under testing.Short() and t.Fatal if the server does not become
// ready within ReadyTimeout. The server is closed by t.Cleanup.
func Start(t testing.TB) (endpoint string) {
	t.Helper()
	return StartTLS(t, tlsconfig.Files{})
}

// StartTLS is Start for a server whose client port speaks TLS with the
// certificate and key of f and requires client certificates issued by
// f.CA (etcd's --client-cert-auth with --trusted-ca-file); the zero f is
// Start. The endpoint is host:port as Start's: clients select TLS by
// their own configuration.
func StartTLS(t testing.TB, f tlsconfig.Files) (endpoint string) {
	t.Helper()
	if testing.Short() {
		t.Skip("etcdtest: skipping embedded etcd server under -short")
	}
	var lastErr error
	for attempt := range startAttempts {
		e, ep, err := start(filepath.Join(t.TempDir(), "etcd"+strconv.Itoa(attempt)), f)
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(e.Close)
		select {
		case <-e.Server.ReadyNotify():
			return ep
		case err := <-e.Err():
			t.Fatalf("etcdtest: embedded etcd failed before ready: %v", err)
		case <-time.After(ReadyTimeout):
			t.Fatalf("etcdtest: embedded etcd not ready within %v", ReadyTimeout)
		}
	}
	t.Fatalf("etcdtest: starting embedded etcd (%d attempts): %v", startAttempts, lastErr)
	return ""
}

// start configures and starts one server in dir on two free ports.
func start(dir string, f tlsconfig.Files) (*embed.Etcd, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	scheme := "http"
	if f.Enabled() {
		scheme = "https"
	}
	clientURL := url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "etcdtest-" + strconv.Itoa(ports[0])
	cfg.MaxRequestBytes = MaxRequestBytes
	cfg.UnsafeNoFsync = true // a test server's data dies with the test
	cfg.EnableGRPCGateway = false
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if f.Enabled() {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, ClientCertAuth: true}
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start on %s (peer %s): %w", clientURL.Host, peerURL.Host, err)
	}
	return e, clientURL.Host, nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Another process may take one before etcd binds it; Start retries.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		addr, ok := ln.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("finding a free port: listener has no TCP address")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// Serve starts an embedded server keeping its data under dir and waits
// until it is ready (ReadyTimeout), for test helpers outside `go test` (the
// Python tests start one through integration-tests/cmd/embedded-etcd). It
// returns the client endpoint "127.0.0.1:<port>" and a function that stops
// the server. Errors: the server failed to start (after startAttempts
// tries with fresh ports) or to become ready.
func Serve(dir string) (endpoint string, stop func(), err error) {
	var lastErr error
	for attempt := range startAttempts {
		e, ep, err := start(filepath.Join(dir, "etcd"+strconv.Itoa(attempt)), tlsconfig.Files{})
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			return ep, e.Close, nil
		case err := <-e.Err():
			e.Close()
			return "", nil, fmt.Errorf("etcdtest: embedded etcd failed before ready: %w", err)
		case <-time.After(ReadyTimeout):
			e.Close()
			return "", nil, fmt.Errorf("etcdtest: embedded etcd not ready within %v", ReadyTimeout)
		}
	}
	return "", nil, fmt.Errorf("etcdtest: starting embedded etcd (%d attempts): %w", startAttempts, lastErr)
}
