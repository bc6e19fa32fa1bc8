package transfer_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/loopback"
)

// deregTransport records the ranges the engine asks it to deregister.
type deregTransport struct {
	transfer.Transport
	mu     sync.Mutex
	ranges [][2]uint64
}

func (d *deregTransport) DeregisterMemory(addr, length uint64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ranges = append(d.ranges, [2]uint64{addr, length})
	return 1
}

// TestUnregisterDeregisters: unregistering a buffer drops the transport's
// hardware registrations of exactly its range (rdma memory regions, whose
// rkeys peers may hold), and only then.
func TestUnregisterDeregisters(t *testing.T) {
	ctx := context.Background()
	tr := &deregTransport{Transport: loopback.NewHub().Transport()}
	e, err := transfer.New(ctx, transfer.Config{Name: "dereg", Metadata: memmeta.New(), Transport: tr})
	require.NoError(t, err)
	defer e.Close()
	r, err := memory.Map(3 * 4096)
	require.NoError(t, err)
	defer r.Close()
	b := r.Bytes()
	require.NoError(t, e.RegisterLocalMemory(ctx, b[:4096], "cpu:0", true))
	require.NoError(t, e.RegisterReadOnlyMemory(ctx, b[8192:], "cpu:0"))
	require.Empty(t, tr.ranges, "registering deregisters nothing")

	require.NoError(t, e.UnregisterLocalMemory(ctx, r.Addr()+8192))
	require.Equal(t, [][2]uint64{{r.Addr() + 8192, 4096}}, tr.ranges)
	require.ErrorIs(t, e.UnregisterLocalMemory(ctx, r.Addr()+8192), transfer.ErrAddressNotRegistered)
	require.Len(t, tr.ranges, 1, "a failed unregister deregisters nothing")
	require.NoError(t, e.UnregisterLocalMemory(ctx, r.Addr()))
	require.Equal(t, [][2]uint64{{r.Addr() + 8192, 4096}, {r.Addr(), 4096}}, tr.ranges)
}
