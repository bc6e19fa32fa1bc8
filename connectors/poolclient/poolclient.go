// Package poolclient opens a store client (core/store/client) from the
// settings an engine integration loaded (connectors/config.Config): it
// connects the transfer metadata service named by metadata_server
// (an HTTP URL, etcd endpoints or P2PHANDSHAKE), starts the tcp transport
// with the shm transport for same-host peers, and mounts
// global_segment_size bytes into the pool. With the mc_tls_* settings it
// speaks mutual TLS to the master and its metadata server, and with
// mc_etcd_tls_* TLS to etcd (core/tlsconfig). Every adapter (vLLM, SGLang,
// LMCache) opens its pool this way, so the same config file behaves the
// same under every engine, as upstream's MooncakeDistributedStore.setup.
package poolclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// ErrUnsupported is matched by errors for settings mooncake-go does not
// implement (a protocol other than tcp, a redis metadata server); their
// text starts with "unsupported:". It is transfer.ErrUnsupported, so the C
// ABIs map it to MC_ERR_UNSUPPORTED.
var ErrUnsupported = transfer.ErrUnsupported

// DefaultProtocol is the transport this build's store client speaks
// (tcp, with shm between processes of one host). Adapters use it when no
// config source names a protocol: upstream's vLLM and SGLang connectors
// default to rdma, which Open refuses with ErrUnsupported.
const DefaultProtocol = "tcp"

// Options are what Open needs beyond the loaded settings.
type Options struct {
	// Host is this process's address as peers see it when the settings
	// leave local_hostname empty (vLLM: the rank's IP); default 127.0.0.1.
	Host string
	// NoSegment opens a pure requester (global_segment_size ignored): the
	// scheduler half of a connector only asks the master.
	NoSegment bool
	// NoShm disables the same-host shm transport.
	NoShm bool
	// Timeout bounds Open (metadata and master I/O); default 60 s.
	Timeout time.Duration
	// Env is the process environment (MC_TCP_BIND_ADDRESS); nil means the
	// Go runtime's (os.Getenv). Code inside libmooncake.so passes
	// cbridge.Environ(): the Go runtime's view is wrong inside engines that
	// call setproctitle (vLLM).
	Env map[string]string
}

// Pool is an open store client and what it needs closed after it.
type Pool struct {
	*client.Client
	// Name is the client's transfer segment name (host:port).
	Name string
	meta io.Closer
}

// Close closes the client (unmounting its segment), then the metadata
// connection.
func (p *Pool) Close() error {
	err := p.Client.Close()
	if p.meta != nil {
		p.meta.Close()
	}
	return err
}

// Open starts a store client for cfg (see the package doc). The data
// plane listens on local_hostname's host (or Options.Host; an address
// given with MC_TCP_BIND_ADDRESS wins, as upstream) on a free port unless
// local_hostname names one. Errors: ErrUnsupported for a protocol other
// than "tcp" or a metadata server kind not built; the metadata service's
// and the master's errors otherwise (core/store codes); a TLS file that is
// missing or wrong, naming it (tlsconfig.ErrInvalid).
func Open(ctx context.Context, cfg config.Config, o Options) (*Pool, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	switch cfg.Protocol {
	case "", "tcp":
	default:
		return nil, fmt.Errorf("%w: protocol %q (mooncake-go's store client is built with tcp, plus shm between processes of one host)", ErrUnsupported, cfg.Protocol)
	}
	if cfg.MasterServerAddress == "" {
		return nil, errors.New("poolclient: master_server_address is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	host, port := o.Host, 0
	if lh := cfg.LocalHostname; lh != "" {
		h, p, err := net.SplitHostPort(lh)
		if err != nil {
			h, p = lh, ""
		}
		host = h
		if p != "" {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("poolclient: local_hostname %q: port %q is not in 0..65535", lh, p)
			}
			port = int(n)
		}
	}
	bind := BindHost(host, o.Env)
	poolTLS, err := tlsconfig.Load(cfg.TLSFiles())
	if err != nil {
		return nil, fmt.Errorf("poolclient: %s/%s/%s: %w", config.KeyTLSCA, config.KeyTLSCert, config.KeyTLSKey, err)
	}
	etcdTLS, err := tlsconfig.LoadClient(cfg.EtcdTLSFiles())
	if err != nil {
		return nil, fmt.Errorf("poolclient: %s/%s/%s: %w", config.KeyEtcdTLSCA, config.KeyEtcdTLSCert, config.KeyEtcdTLSKey, err)
	}
	conn := cfg.MetadataServer
	if conn == "" {
		defaultURL := metaopen.DefaultURL
		if poolTLS != nil {
			defaultURL = metaopen.DefaultTLSURL
		}
		u, err := defaultURL(cfg.MasterServerAddress)
		if err != nil {
			return nil, fmt.Errorf("poolclient: master_server_address %q is not host:port: %v", cfg.MasterServerAddress, err)
		}
		conn = u
	}
	meta, closer, name, err := metaopen.Open(ctx, conn, bind, host, metaopen.WithTLS(poolTLS), metaopen.WithEtcdTLS(etcdTLS))
	if err != nil {
		return nil, err
	}
	if port == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
		if err != nil {
			closer.Close()
			return nil, fmt.Errorf("poolclient: pick a port on %s: %w", bind, err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	if name == "" {
		name = net.JoinHostPort(host, strconv.Itoa(port))
	}
	cc := client.Config{
		LocalHostname:   name,
		MasterAddr:      cfg.MasterServerAddress,
		Metadata:        meta,
		Transport:       tcp.New(tcp.Config{BindAddr: net.JoinHostPort(bind, strconv.Itoa(port)), Host: host}),
		LocalBufferSize: 0,
		TLS:             poolTLS,
		EtcdTLS:         etcdTLS,
	}
	if !o.NoSegment && cfg.GlobalSegmentSize > 0 {
		cc.GlobalSegmentSize = uint64(cfg.GlobalSegmentSize)
	}
	if !o.NoShm {
		cc.Local = shm.New(shm.Config{})
	}
	c, err := client.New(ctx, cc)
	if err != nil {
		closer.Close()
		return nil, err
	}
	return &Pool{Client: c, Name: name, meta: closer}, nil
}

// EnvBindAddress is upstream's variable naming the address the TCP data
// plane listens on.
const EnvBindAddress = "MC_TCP_BIND_ADDRESS"

// BindHost is the host the data plane of a process that peers reach as
// host listens on: MC_TCP_BIND_ADDRESS's host (or its whole value when it
// is not host:port) when set in env (nil: os.Getenv), as upstream; else
// host when it is an IP literal; else every interface (0.0.0.0).
func BindHost(host string, env map[string]string) string {
	v := ""
	if env == nil {
		v = os.Getenv(EnvBindAddress)
	} else {
		v = env[EnvBindAddress]
	}
	if env := v; env != "" {
		if h, _, err := net.SplitHostPort(env); err == nil {
			return h
		}
		return env
	}
	if net.ParseIP(host) == nil {
		return "0.0.0.0"
	}
	return host
}
