// Package metaopen opens the transfer metadata service a connection string
// names (upstream's metadata_server / metadata_conn_string): an HTTP
// metadata server (httpmeta), an etcd cluster (etcdmeta) or P2P handshake
// mode (p2pmeta). Package metadata classifies the string
// (metadata.ParseConnString) but cannot import its own backends; this
// package is the one place that maps a kind to its backend, shared by the
// mooncake CLI, connectors/poolclient and the C ABI (abi/store).
//
// Concurrency: Open and DefaultURL keep no state; the Store returned is the
// backend's, safe for concurrent use as every metadata.Store.
package metaopen
