// Package etcdmeta is a metadata.Store over an etcd v3 cluster, mirroring
// upstream Mooncake's etcd metadata backend (EtcdStoragePlugin), the backend
// a metadata connection string selects when it is "etcd://h1:2379,h2:2379" or
// a bare "host:port".
//
// Keys are the same strings every backend uses ("mooncake/[<cluster>/]ram/<segment>",
// "mooncake/[<cluster>/]rpc_meta/<server>", see metadata.SegmentKey) and are
// stored verbatim as etcd keys; values are the JSON documents, stored as
// opaque bytes. Get is a single-key linearizable range, Put a plain etcd put,
// Delete a single-key delete range. Unlike upstream, which reports success
// for a remove of an absent key, Delete reports metadata.ErrNotFound when
// etcd says it deleted nothing, as the metadata.Store contract and the
// metadatatest suite require.
//
// New dials lazily (etcd's client no longer blocks while dialing) and then
// probes the cluster with one cheap serializable read bounded by the dial
// timeout (default DefaultDialTimeout, 5 s as upstream), so an unreachable
// cluster fails New with an error wrapping ErrUnreachable instead of hanging
// the first Get. Each later call is bounded by the caller's ctx and by the
// request timeout (default DefaultRequestTimeout).
//
// Retries: the etcd client retries a Get on a transient "unavailable" error,
// and a Put or Delete only when the request provably never left the client
// (no connection was available); it never resends a Put or Delete that may
// have reached the server. This package adds no retries of its own.
//
// Size: etcd servers reject requests above --max-request-bytes (1.5 MiB by
// default). A deployment storing descriptors with thousands of buffers must
// raise it; the client side allows up to DefaultMaxRequestBytes (see
// WithMaxRequestBytes).
//
// Concurrency: a Store is safe for concurrent use; it holds no lock of its
// own and shares one gRPC connection. Close releases the connection; calls
// made after Close fail.
//
// Tests that need a real server use the etcdtest sub-package, which starts
// an embedded etcd in a temporary directory.
package etcdmeta
