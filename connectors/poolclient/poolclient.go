// Package poolclient opens a store client (core/store/client) from the
// settings an engine integration loaded (connectors/config.Config): it
// connects the transfer metadata service named by metadata_server
// (an HTTP URL, etcd endpoints or P2PHANDSHAKE), starts the tcp transport
// with the shm transport for same-host peers, and mounts
// global_segment_size bytes into the pool. Every adapter (vLLM, SGLang,
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
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// ErrUnsupported is matched by errors for settings mooncake-go does not
// implement (a protocol other than tcp, a redis metadata server); their
// text starts with "unsupported:". It is transfer.ErrUnsupported, so the C
// ABIs map it to MC_ERR_UNSUPPORTED.
var ErrUnsupported = transfer.ErrUnsupported

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
// and the master's errors otherwise (core/store codes).
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
	bind := host
	if ip := net.ParseIP(host); ip == nil {
		bind = "0.0.0.0"
	}
	if env := os.Getenv("MC_TCP_BIND_ADDRESS"); env != "" {
		bind = env
		if h, _, err := net.SplitHostPort(env); err == nil {
			bind = h
		}
	}
	meta, closer, name, err := openMetadata(ctx, cfg.MetadataServer, cfg.MasterServerAddress, bind, host)
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

// openMetadata connects to the metadata service conn; empty means the
// HTTP server of `mooncake master` on the master's host (port 8080).
func openMetadata(ctx context.Context, conn, master, bind, host string) (metadata.Store, io.Closer, string, error) {
	if conn == "" {
		h, _, err := net.SplitHostPort(master)
		if err != nil {
			return nil, nil, "", fmt.Errorf("poolclient: master_server_address %q is not host:port: %v", master, err)
		}
		conn = "http://" + net.JoinHostPort(h, "8080") + "/metadata"
	}
	return OpenMetadata(ctx, strings.ReplaceAll(conn, ";", ","), bind, host)
}

// OpenMetadata connects to the transfer metadata service conn (upstream
// metadata_server): an http:// URL, etcd endpoints, or P2PHANDSHAKE, for
// which it starts the handshake listener on bind (port chosen by the
// kernel) publishing host (empty: the listener's address) and returns the
// segment name the engine must use (else name is ""). closer releases the
// connection. Errors: the backend's (metadata.ErrUnreachable and friends),
// ErrUnsupported for a kind not built (redis).
func OpenMetadata(ctx context.Context, conn, bind, host string) (meta metadata.Store, closer io.Closer, name string, err error) {
	kind, _, err := metadata.ParseConnString(conn)
	if err != nil {
		return nil, nil, "", fmt.Errorf("metadata_server %q: %w", conn, err)
	}
	switch kind {
	case metadata.KindHTTP:
		c, err := httpmeta.NewClient(conn)
		if err != nil {
			return nil, nil, "", err
		}
		return c, c, "", nil
	case metadata.KindEtcd:
		s, err := etcdmeta.NewFromConnString(ctx, conn)
		if err != nil {
			return nil, nil, "", err
		}
		return s, s, "", nil
	case metadata.KindP2P:
		var opts []p2pmeta.Option
		if host != "" {
			opts = append(opts, p2pmeta.WithHost(host))
		}
		s, err := p2pmeta.Listen(net.JoinHostPort(bind, "0"), opts...)
		if err != nil {
			return nil, nil, "", err
		}
		return s, s, s.Name(), nil
	}
	return nil, nil, "", fmt.Errorf("%w: %s metadata backend (%q) is not implemented by mooncake-go; pass an HTTP URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one), an etcd endpoint list or P2PHANDSHAKE", ErrUnsupported, kind, conn)
}
