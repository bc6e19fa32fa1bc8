package client

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// TestNewRejectsUndefinedSegmentKind: an undefined Config.SegmentKind is
// refused before anything starts (no master is dialled).
func TestNewRejectsUndefinedSegmentKind(t *testing.T) {
	_, err := New(context.Background(), Config{MasterAddr: "127.0.0.1:1", Metadata: memmeta.New(), Transport: tcp.New(tcp.Config{}),
		GlobalSegmentSize: 1 << 20, SegmentKind: 9})
	if store.CodeOf(err) != store.InvalidParams {
		t.Fatalf("New with segment kind 9: %v, want INVALID_PARAMS", err)
	}
}
