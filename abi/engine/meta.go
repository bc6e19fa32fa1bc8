package engine

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/metadata"
)

// metaStore marks every error of the metadata service with
// cbridge.ErrMetadata (MC_ERR_METADATA), keeping the cause in the chain
// (metadata.ErrNotFound still matches, which OpenSegment relies on).
type metaStore struct {
	inner metadata.Store
}

func (m metaStore) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", cbridge.ErrMetadata, err)
}

func (m metaStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := m.inner.Get(ctx, key)
	return v, m.wrap(err)
}

func (m metaStore) Put(ctx context.Context, key string, value []byte) error {
	return m.wrap(m.inner.Put(ctx, key, value))
}

func (m metaStore) Delete(ctx context.Context, key string) error {
	return m.wrap(m.inner.Delete(ctx, key))
}
