// Package httpmeta speaks upstream Mooncake's HTTP metadata protocol, the
// key-value service selected by an "http://" or "https://" metadata
// connection string:
//
//	GET    <base>?key=<url-encoded key>          -> 200 + value | 404 "metadata not found"
//	PUT    <base>?key=<url-encoded key> + body   -> 200 "metadata updated"
//	DELETE <base>?key=<url-encoded key>          -> 200 "metadata deleted" | 404
//
// NewHandler serves that protocol from any metadata.Store on whatever path it
// is mounted at, behaving like the server embedded in mooncake_master
// (--enable_http_metadata_server), which answers 404 to a DELETE of an
// unknown key; requests outside the protocol get 400, 405 or 413. NewClient
// returns a metadata.Store that talks to any server of that protocol (the
// upstream Go/gin example, the Python server, mooncake_http_metadata_server,
// mooncake_master, or NewHandler) with upstream's client timeouts: 3000 ms
// per request, 1500 ms to connect.
//
// With an https:// URL and WithTLSConfig, the Client speaks mutual TLS
// to a server that requires it, as `mooncake master --tls-ca ...` does
// (core/tlsconfig); upstream has no transport security.
//
// Values are opaque bytes on the wire; by convention each is one JSON
// document. Keys travel percent-encoded in the query string exactly as
// libcurl's curl_easy_escape encodes them (every byte except A-Z a-z 0-9 - .
// _ ~), so '+' and ' ' stay distinct on every server.
//
// Concurrency: the Handler and the Client are safe for concurrent use. The
// Handler keeps no state besides its Store and copies nothing itself; the
// Store does. The Client holds no lock; its http.Client pools connections.
// Neither starts goroutines of its own; Client.Close releases idle
// connections of a transport the Client created.
package httpmeta
