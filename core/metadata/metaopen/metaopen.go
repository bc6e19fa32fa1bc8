package metaopen

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// DefaultPort is the port of `mooncake master`'s HTTP metadata server.
const DefaultPort = "8080"

// DefaultURL is the metadata service that goes with a host:port master
// when none is named: `mooncake master`'s HTTP metadata server on the
// master's host, "http://<host>:8080/metadata". The error is
// net.SplitHostPort's for a master that is not host:port; callers name the
// setting it came from.
func DefaultURL(master string) (string, error) {
	host, _, err := net.SplitHostPort(master)
	if err != nil {
		return "", err
	}
	return "http://" + net.JoinHostPort(host, DefaultPort) + "/metadata", nil
}

// DefaultTLSURL is DefaultURL for a master whose listeners use TLS:
// "https://<host>:8080/metadata".
func DefaultTLSURL(master string) (string, error) {
	u, err := DefaultURL(master)
	if err != nil {
		return "", err
	}
	return "https://" + strings.TrimPrefix(u, "http://"), nil
}

// Option configures Open.
type Option func(*options)

type options struct {
	tls, etcdTLS *tlsconfig.Config
}

// WithTLS opens an HTTP metadata server with mutual TLS (tc.Client()); the
// connection string must then be https:// (Open refuses http:// rather
// than send descriptors in the clear). nil = plaintext.
func WithTLS(tc *tlsconfig.Config) Option { return func(o *options) { o.tls = tc } }

// WithEtcdTLS opens an etcd metadata store over TLS (tc.Client(), from
// tlsconfig.LoadClient). nil = plaintext.
func WithEtcdTLS(tc *tlsconfig.Config) Option { return func(o *options) { o.etcdTLS = tc } }

// Open connects to the transfer metadata service conn: an http(s):// URL,
// etcd endpoints ("etcd://h1:2379,h2:2379" or bare "h1:2379", the list
// also ';'-separated as upstream), or P2PHANDSHAKE, for which it starts the
// handshake listener on bind (port chosen by the kernel) publishing host
// (empty: the listener's address) and returns the segment name the engine
// must use (else name is ""). ctx bounds the etcd connect; closer releases
// the connection (it is the Store itself). WithTLS and WithEtcdTLS turn on
// TLS for an HTTP or an etcd store; P2P handshake mode has none, and with
// WithTLS it is refused (transfer.ErrUnsupported) rather than run in the
// clear.
//
// Errors: an invalid conn wraps metadata.ErrInvalidConnString and names
// it; the backend's (etcdmeta.ErrUnreachable and friends); a kind not built
// (redis) wraps transfer.ErrUnsupported, which the C ABIs map to
// MC_ERR_UNSUPPORTED.
func Open(ctx context.Context, conn, bind, host string, opts ...Option) (meta metadata.Store, closer io.Closer, name string, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !strings.HasPrefix(conn, "http://") && !strings.HasPrefix(conn, "https://") {
		conn = strings.ReplaceAll(conn, ";", ",")
	}
	kind, _, err := metadata.ParseConnString(conn)
	if err != nil {
		return nil, nil, "", fmt.Errorf("metadata_server %q: %w", conn, err)
	}
	switch kind {
	case metadata.KindHTTP:
		var hopts []httpmeta.ClientOption
		if o.tls != nil {
			if !strings.HasPrefix(conn, "https://") {
				return nil, nil, "", fmt.Errorf("metadata_server %q: %w: plaintext http:// while TLS is configured; use https:// (a master started with TLS serves its metadata over https)", conn, metadata.ErrInvalidConnString)
			}
			hopts = append(hopts, httpmeta.WithTLSConfig(o.tls.Client()))
		}
		c, err := httpmeta.NewClient(conn, hopts...)
		if err != nil {
			return nil, nil, "", err
		}
		return c, c, "", nil
	case metadata.KindEtcd:
		var eopts []etcdmeta.Option
		if o.etcdTLS != nil {
			eopts = append(eopts, etcdmeta.WithTLSConfig(o.etcdTLS.Client()))
		}
		s, err := etcdmeta.NewFromConnString(ctx, conn, eopts...)
		if err != nil {
			return nil, nil, "", err
		}
		return s, s, "", nil
	case metadata.KindP2P:
		if o.tls != nil {
			return nil, nil, "", fmt.Errorf("%w: metadata_server %s with TLS: the P2P handshake has no TLS in mooncake-go; use the master's https:// metadata server", transfer.ErrUnsupported, conn)
		}
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
	return nil, nil, "", fmt.Errorf("%w: %s metadata backend (%q) is not implemented by mooncake-go; pass an HTTP URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one), an etcd endpoint list or P2PHANDSHAKE", transfer.ErrUnsupported, kind, conn)
}
