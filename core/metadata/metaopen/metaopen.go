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

// Open connects to the transfer metadata service conn: an http(s):// URL,
// etcd endpoints ("etcd://h1:2379,h2:2379" or bare "h1:2379", the list
// also ';'-separated as upstream), or P2PHANDSHAKE, for which it starts the
// handshake listener on bind (port chosen by the kernel) publishing host
// (empty: the listener's address) and returns the segment name the engine
// must use (else name is ""). ctx bounds the etcd connect; closer releases
// the connection (it is the Store itself).
//
// Errors: an invalid conn wraps metadata.ErrInvalidConnString and names
// it; the backend's (etcdmeta.ErrUnreachable and friends); a kind not built
// (redis) wraps transfer.ErrUnsupported, which the C ABIs map to
// MC_ERR_UNSUPPORTED.
func Open(ctx context.Context, conn, bind, host string) (meta metadata.Store, closer io.Closer, name string, err error) {
	if !strings.HasPrefix(conn, "http://") && !strings.HasPrefix(conn, "https://") {
		conn = strings.ReplaceAll(conn, ";", ",")
	}
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
	return nil, nil, "", fmt.Errorf("%w: %s metadata backend (%q) is not implemented by mooncake-go; pass an HTTP URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one), an etcd endpoint list or P2PHANDSHAKE", transfer.ErrUnsupported, kind, conn)
}
