package memmeta_test

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/metadata/metadatatest"
)

func TestConformance(t *testing.T) {
	metadatatest.RunStoreTests(t, func(*testing.T) metadata.Store { return memmeta.New() })
}

func TestZeroValue(t *testing.T) {
	var s memmeta.Store
	ctx := context.Background()
	if err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d, want 1", got)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("Len = %d, want 0", got)
	}
}

func TestEmptyValueIsNonNil(t *testing.T) {
	s := memmeta.New()
	if err := s.Put(t.Context(), "k", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != 0 {
		t.Fatalf("Get = %#v, want non-nil empty slice", got)
	}
}

func BenchmarkStore(b *testing.B) {
	metadatatest.RunStoreBenchmarks(b, func(*testing.B) metadata.Store { return memmeta.New() })
}
