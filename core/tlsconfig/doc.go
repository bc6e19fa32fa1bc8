// Package tlsconfig builds the mutual-TLS settings of every control-plane
// connection of the pool from PEM files: the master's gRPC service, its
// HTTP metadata server and /metrics, the clients and nodes that dial them,
// and the etcd client of highly available masters (election, replicated
// table, leader following). Upstream Mooncake has no transport security;
// with no files named, nothing here is used and every connection stays
// plaintext as upstream's.
//
// A Files names a CA bundle, a certificate (chain) and its private key.
// Load reads and checks all three and returns a Config whose Server and
// Client methods give *tls.Config values for both ends of a connection:
// TLS 1.3 at least, the server requires and verifies a client certificate
// that chains to the CA bundle (tls.RequireAndVerifyClientCert), the client
// verifies the server's certificate against the same bundle and presents
// its own. LoadClient is Load for a client whose server may not ask for a
// certificate (etcd without --client-cert-auth): the certificate and key
// are then optional.
//
// Every check happens at start-up and names the file at fault: a missing
// or unreadable file, a file without a PEM block of the right kind, a key
// that does not match its certificate, a certificate outside its validity
// period or not issued by a CA of the bundle. Files are read once; a
// process must restart to pick up renewed certificates.
//
// The names an operator uses are the same everywhere (FlagCA and friends,
// EnvCA and friends, KeyCA and friends in connectors/config), for the
// pool's own connections and, with the etcd- prefix, for etcd.
//
// Concurrency: a Config is immutable once loaded; its methods are safe for
// concurrent use and return a fresh *tls.Config on every call.
package tlsconfig
