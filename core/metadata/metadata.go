package metadata

import (
	"context"
	"errors"
)

// Sentinel errors of the metadata layer. Backends wrap them with the key they
// concern; match with errors.Is.
var (
	// ErrNotFound is returned (wrapped, naming the key) by Store.Get and
	// Store.Delete when the key is absent. It mirrors upstream's
	// GetResult::kNotFound (HTTP 404, a nil Redis reply, an empty etcd range).
	ErrNotFound = errors.New("metadata: key not found")
	// ErrInvalidKey is returned (wrapped) by every Store operation given an
	// empty key, and by the descriptor helpers given an empty segment or
	// server name. No I/O is done for such a call.
	ErrInvalidKey = errors.New("metadata: invalid key")
	// ErrInvalidConnString is returned (wrapped, naming the input) by
	// ParseConnString for a connection string it cannot classify.
	ErrInvalidConnString = errors.New("metadata: invalid connection string")
)

// Store is the three-operation key-value interface upstream's metadata
// storage plugins implement (MetadataStoragePlugin: get, set, remove). Values
// are JSON documents; a Store treats them as opaque bytes.
//
// Implementations must be safe for concurrent use, must copy value on Put and
// return a slice the caller owns from Get, and must reject an empty key with
// an error wrapping ErrInvalidKey. A canceled or expired ctx makes the call
// fail with an error wrapping ctx.Err(). No implementation retries a Put or
// Delete on its own.
type Store interface {
	// Get returns the value stored under key. It returns an error wrapping
	// ErrNotFound, and naming the key, when the key is absent.
	Get(ctx context.Context, key string) ([]byte, error)
	// Put stores value under key, replacing any previous value (upstream's
	// set). It does not retain value.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key (upstream's remove). It returns an error wrapping
	// ErrNotFound when the key is absent, as the HTTP metadata server embedded
	// in mooncake_master does (etcdmeta too: it reads the deleted count, where
	// upstream's etcd plugin reports success); a backend whose service cannot
	// tell (upstream's example HTTP server) returns nil instead.
	Delete(ctx context.Context, key string) error
}
