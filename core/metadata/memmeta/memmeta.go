package memmeta

import (
	"context"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// Store is an in-memory metadata.Store. The zero value is an empty store
// ready to use; a Store must not be copied after first use.
type Store struct {
	mu struct {
		sync.Mutex
		// kv maps key to a private copy of its value. Guarded by mu; nil
		// until the first Put.
		kv map[string][]byte
	}
}

var _ metadata.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store { return &Store{} }

// Get returns a copy of the value under key. It returns an error wrapping
// metadata.ErrNotFound (naming the key) if the key is absent,
// metadata.ErrInvalidKey for an empty key, and ctx.Err() if ctx is done.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := check(ctx, "get", key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	v, ok := s.mu.kv[key]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("memmeta: get %q: %w", key, metadata.ErrNotFound)
	}
	// v is never mutated once stored (Put installs a fresh slice), so it can
	// be copied outside the lock.
	return clone(v), nil
}

// Put stores a copy of value under key, replacing any previous value. It
// returns an error wrapping metadata.ErrInvalidKey for an empty key and
// ctx.Err() if ctx is done; otherwise it always succeeds.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	if err := check(ctx, "put", key); err != nil {
		return err
	}
	v := clone(value)
	s.mu.Lock()
	if s.mu.kv == nil {
		s.mu.kv = make(map[string][]byte)
	}
	s.mu.kv[key] = v
	s.mu.Unlock()
	return nil
}

// Delete removes key. It returns an error wrapping metadata.ErrNotFound
// (naming the key) if the key is absent, as the HTTP metadata server embedded
// in mooncake_master does, metadata.ErrInvalidKey for an empty key, and
// ctx.Err() if ctx is done.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check(ctx, "delete", key); err != nil {
		return err
	}
	s.mu.Lock()
	_, ok := s.mu.kv[key]
	delete(s.mu.kv, key)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("memmeta: delete %q: %w", key, metadata.ErrNotFound)
	}
	return nil
}

// Len returns the number of keys stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.kv)
}

func check(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memmeta: %s %q: %w", op, key, err)
	}
	if key == "" {
		return fmt.Errorf("memmeta: %s: empty key: %w", op, metadata.ErrInvalidKey)
	}
	return nil
}

// clone returns a copy of b that is never nil, so a stored empty value reads
// back as a non-nil empty slice.
func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
