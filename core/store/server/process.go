package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// logWriter sends each line net/http logs (a refused TLS handshake) to a
// Logf.
type logWriter func(format string, args ...any)

func (w logWriter) Write(b []byte) (int, error) {
	w("%s", strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// ProcessConfig is what `mooncake master` runs: the gRPC service, the
// metrics/health HTTP endpoint and, optionally, the embedded HTTP metadata
// server for transfer-engine descriptors.
type ProcessConfig struct {
	Master master.Config
	// RPCAddr is the gRPC listen address; upstream default port 50051.
	RPCAddr string
	// SessionAddr is the framed session listen address
	// (Server.ServeFramedSessions): "" = RPCAddr's host on a free port
	// (clients learn it from the master), "off" = none (clients then use
	// the gRPC Session stream). Ours: upstream has no such listener.
	SessionAddr string
	// MetricsAddr serves /metrics and /health; upstream default port 9003;
	// "" = off.
	MetricsAddr string
	// MetadataAddr serves the HTTP metadata protocol at /metadata; upstream
	// default port 8080 (--enable_http_metadata_server); "" = off.
	MetadataAddr string
	// TickInterval as Options.TickInterval.
	TickInterval time.Duration
	// HA, when set, runs this master as one of several sharing an etcd
	// (leader election, replicated table); see HAConfig. nil = single master.
	HA *HAConfig
	// TLS, when set, makes every listener require mutual TLS
	// (tlsconfig.Config.Server: TLS 1.3, a client certificate issued by
	// its CA bundle): the gRPC service, the HTTP metadata server (its URL
	// becomes https://) and, unless MetricsPlaintext, /metrics and
	// /health. nil = plaintext everywhere, as upstream. Ours: upstream has
	// no transport security.
	TLS *tlsconfig.Config
	// MetricsPlaintext keeps /metrics and /health on plain HTTP when TLS
	// is set, for probes and scrapers that cannot present a client
	// certificate; they carry no object data.
	MetricsPlaintext bool
	// Logf receives one line per connection refused by TLS, on any
	// listener (peer and reason); nil = none (gRPC's are dropped, net/http
	// writes its own to the standard logger).
	Logf func(format string, args ...any)
}

// Process is a running master.
type Process struct {
	Server *Server
	// RPCAddr, MetricsAddr, MetadataURL are the bound addresses (useful with
	// port 0). MetadataURL is "http://host:port/metadata" ("https://" with
	// TLS) or "".
	RPCAddr, MetricsAddr, MetadataURL string
	// SessionAddr is the framed session listener's bound address; "" when
	// ProcessConfig.SessionAddr is "off".
	SessionAddr string

	rpcLn  net.Listener
	http   []*http.Server
	served chan error
	ha     *haState // nil without HA
}

// Start binds every listener and starts serving. Errors: INVALID_PARAMS
// from the master config; a listen error naming the address. Nothing is left
// running on error.
func Start(cfg ProcessConfig) (p *Process, err error) {
	m, err := master.New(cfg.Master)
	if err != nil {
		return nil, err
	}
	p = &Process{served: make(chan error, 1)}
	started := p // p is nil by the time an error return runs the defer
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if p.rpcLn, err = net.Listen("tcp", cfg.RPCAddr); err != nil {
		return nil, fmt.Errorf("master: rpc listen %s: %w", cfg.RPCAddr, err)
	}
	p.RPCAddr = p.rpcLn.Addr().String()
	p.Server = New(m, Options{TickInterval: cfg.TickInterval, Interceptors: p.haInterceptors(cfg.HA), DurableSeals: cfg.HA != nil, TLS: cfg.TLS, Logf: cfg.Logf})
	if cfg.HA != nil {
		if err = p.startHA(cfg); err != nil {
			return nil, err
		}
	}
	serveHTTP := func(addr string, h http.Handler, tc *tlsconfig.Config) (string, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return "", err
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		if cfg.Logf != nil {
			hs.ErrorLog = log.New(logWriter(cfg.Logf), "", 0)
		}
		p.http = append(p.http, hs)
		if tc != nil {
			// The certificate is in TLSConfig; ServeTLS adds HTTP/2.
			hs.TLSConfig = tc.Server()
			go hs.ServeTLS(ln, "", "")
		} else {
			go hs.Serve(ln)
		}
		return ln.Addr().String(), nil
	}
	if cfg.MetricsAddr != "" {
		mtls := cfg.TLS
		if cfg.MetricsPlaintext {
			mtls = nil
		}
		if p.MetricsAddr, err = serveHTTP(cfg.MetricsAddr, p.httpHandler(), mtls); err != nil {
			return nil, fmt.Errorf("master: metrics listen %s: %w", cfg.MetricsAddr, err)
		}
	}
	if cfg.MetadataAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metadata", httpmeta.NewHandler(memmeta.New()))
		a, err := serveHTTP(cfg.MetadataAddr, mux, cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("master: metadata listen %s: %w", cfg.MetadataAddr, err)
		}
		scheme := "http://"
		if cfg.TLS != nil {
			scheme = "https://"
		}
		p.MetadataURL = scheme + a + "/metadata"
	}
	if cfg.SessionAddr != "off" {
		addr := cfg.SessionAddr
		if addr == "" {
			host, _, _ := net.SplitHostPort(p.RPCAddr)
			addr = net.JoinHostPort(host, "0")
		}
		sln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("master: session listen %s: %w", addr, err)
		}
		if err := p.Server.listenFramed(sln); err != nil {
			return nil, err
		}
		p.SessionAddr = sln.Addr().String()
		go p.Server.acceptFramed(sln) // ends with Server.Close (Accept errors are waited out)
	}
	ln := p.rpcLn
	go func() { p.served <- p.Server.Serve(ln) }()
	return p, nil
}

// Wait blocks until the gRPC server stops or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case err := <-p.served:
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops everything: the HA campaign (a leader resigns), HTTP
// servers, then the master service.
func (p *Process) Close() {
	p.stopHA()
	for _, hs := range p.http {
		hs.Close()
	}
	if p.Server != nil {
		p.Server.Close()
	}
	// The gRPC server closes the listener only if it was serving it (not
	// when Start failed before Serve); a second Close is harmless.
	if p.rpcLn != nil {
		p.rpcLn.Close()
	}
}
