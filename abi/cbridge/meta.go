package cbridge

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// MetaStore marks every error of the metadata service it wraps with
// ErrMetadata (MC_ERR_METADATA), keeping the cause in the chain
// (metadata.ErrNotFound still matches, which transfer.Engine.OpenSegment
// relies on). Every ABI hands its engine the service through it.
type MetaStore struct {
	Inner metadata.Store
}

var _ metadata.Store = MetaStore{}

// MetadataError wraps err with ErrMetadata; nil stays nil.
func MetadataError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrMetadata, err)
}

// Get implements metadata.Store.
func (m MetaStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := m.Inner.Get(ctx, key)
	return v, MetadataError(err)
}

// Put implements metadata.Store.
func (m MetaStore) Put(ctx context.Context, key string, value []byte) error {
	return MetadataError(m.Inner.Put(ctx, key, value))
}

// Delete implements metadata.Store.
func (m MetaStore) Delete(ctx context.Context, key string) error {
	return MetadataError(m.Inner.Delete(ctx, key))
}
