package metadata

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Backend kinds returned by ParseConnString.
const (
	// KindP2P means no central store: peers exchange descriptors over the
	// handshake channel (upstream's P2PHANDSHAKE mode).
	KindP2P = "p2p"
	// KindEtcd is an etcd cluster; the target is a comma-separated endpoint
	// list "h1:2379,h2:2379".
	KindEtcd = "etcd"
	// KindRedis is a Redis server; the target is "host:port".
	KindRedis = "redis"
	// KindHTTP is an HTTP metadata server; the target is the full base URL
	// (http or https), query string included.
	KindHTTP = "http"
)

// P2PHandshake is the literal connection string that selects P2P mode.
const P2PHandshake = "P2PHANDSHAKE"

// ParseConnString classifies a metadata connection string
// (metadata_conn_string / metadata_server) the way upstream's
// parseConnectionString and MetadataStoragePlugin::Create do:
//
//	"P2PHANDSHAKE"                    -> (KindP2P, "")
//	"http://h:8080/metadata", "https://…" -> (KindHTTP, the whole URL)
//	"etcd://h1:2379,h2:2379"          -> (KindEtcd, "h1:2379,h2:2379")
//	"h1:2379" (no scheme)             -> (KindEtcd, "h1:2379")
//	"redis://h:6379"                  -> (KindRedis, "h:6379")
//
// Scheme names and P2PHANDSHAKE are case-sensitive, as upstream. Unlike
// upstream, which defers validation to the backend client, every etcd or
// Redis endpoint must be host:port with a non-empty host and a port in
// 1..65535, and an HTTP URL must have a host. Any other input (empty, an
// unknown scheme, a malformed endpoint) returns an error wrapping
// ErrInvalidConnString that names the input.
func ParseConnString(s string) (kind, target string, err error) {
	bad := func(format string, args ...any) (string, string, error) {
		return "", "", fmt.Errorf("%w %q: %s", ErrInvalidConnString, s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty")
	}
	if s == P2PHandshake {
		return KindP2P, "", nil
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if err := checkEndpoints(s, true); err != nil {
			return bad("%v", err)
		}
		return KindEtcd, s, nil
	}
	switch scheme {
	case "etcd":
		if err := checkEndpoints(rest, true); err != nil {
			return bad("%v", err)
		}
		return KindEtcd, rest, nil
	case "redis":
		if err := checkEndpoints(rest, false); err != nil {
			return bad("%v", err)
		}
		return KindRedis, rest, nil
	case "http", "https":
		u, err := url.Parse(s)
		if err != nil {
			return bad("%v", err)
		}
		if u.Host == "" {
			return bad("URL has no host")
		}
		return KindHTTP, s, nil
	default:
		return bad("unknown scheme %q (want etcd, redis, http, https or %s)", scheme, P2PHandshake)
	}
}

// checkEndpoints validates a host:port list (several only if multi).
func checkEndpoints(list string, multi bool) error {
	if list == "" {
		return fmt.Errorf("no endpoint")
	}
	eps := []string{list}
	if multi {
		eps = strings.Split(list, ",")
	} else if strings.Contains(list, ",") {
		return fmt.Errorf("want a single host:port endpoint")
	}
	for _, ep := range eps {
		if ep == "" {
			return fmt.Errorf("empty endpoint in list")
		}
		if strings.ContainsAny(ep, " \t\r\n/?#@") {
			return fmt.Errorf("endpoint %q is not host:port", ep)
		}
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			return fmt.Errorf("endpoint %q is not host:port: %v", ep, err)
		}
		if host == "" {
			return fmt.Errorf("endpoint %q has no host", ep)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("endpoint %q has invalid port %q", ep, port)
		}
	}
	return nil
}
