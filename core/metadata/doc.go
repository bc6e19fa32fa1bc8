// Package metadata is the transfer engine's segment-descriptor store,
// mirroring upstream Mooncake's metadata service (transfer_metadata.cpp and
// transfer_metadata_plugin.cpp).
//
// Upstream keeps one JSON document per engine segment and per RPC endpoint in
// a shared key-value service (etcd, Redis or an HTTP key-value server), or
// exchanges descriptors peer to peer (P2PHANDSHAKE). This package holds the
// parts every backend shares:
//
//   - Store, the three-operation interface (get, set, remove) upstream's
//     storage plugins implement; values are opaque bytes that by convention
//     hold one JSON document.
//   - The key layout: "mooncake/" + optional "<cluster>/" + "ram/<segment>"
//     or "rpc_meta/<server>" (SegmentKey, RPCMetaKey).
//   - The descriptor documents with upstream's JSON field names
//     (SegmentDesc, BufferDesc, RPCMeta) and typed helpers that encode them
//     into a Store (PutSegment, GetSegment, ...).
//   - ParseConnString, which classifies a metadata connection string the way
//     upstream's MetadataStoragePlugin::Create does.
//
// Backends live in sub-packages: memmeta (in-memory twin for tests),
// httpmeta (upstream's HTTP metadata protocol, server and client). The
// conformance suite every backend must pass is metadatatest.RunStoreTests.
//
// Concurrency: every Store implementation must be safe for concurrent use by
// multiple goroutines; the helper functions add no state of their own. A Store
// copies values on Put and returns a fresh slice from Get, so callers own the
// slices they pass in and get back.
//
// Invariants: a Get after a successful Put of the same key returns the
// written bytes until another Put or Delete of that key (a single backend
// offers read-your-writes; there is no cross-key atomicity). Absence is always
// reported as an error wrapping ErrNotFound, never as an empty value. Empty
// keys are rejected with ErrInvalidKey before any I/O.
package metadata
