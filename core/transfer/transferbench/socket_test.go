package transferbench

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// TestServeSocket: a block lands at its offset and is acknowledged; a block
// that would end past the target closes the connection, target unchanged.
func TestServeSocket(t *testing.T) {
	target := make([]byte, 64)
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); serveSocket(s, target, 16) }()
	block := func(off uint64) []byte {
		b := make([]byte, 8+16)
		binary.LittleEndian.PutUint64(b, off)
		for i := range 16 {
			b[8+i] = byte(off) + byte(i) + 1
		}
		return b
	}
	_, err := c.Write(block(40))
	require.NoError(t, err)
	ack := make([]byte, 8)
	_, err = io.ReadFull(c, ack)
	require.NoError(t, err)
	assert.Equal(t, block(40)[8:], target[40:56])
	assert.Equal(t, make([]byte, 40), target[:40])

	_, err = c.Write(block(56)[:8]) // 56 + 16 > 64: refused before its payload
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an out-of-range offset did not end the connection")
	}
	assert.Equal(t, make([]byte, 8), target[56:])
	c.Close()
}

func TestSocket(t *testing.T) {
	cfg := Config{Op: transfer.Write, BlockSize: 64 << 10, BatchSize: 2, Threads: 2, Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, TargetSpan: 1 << 20}
	r, err := Socket(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, "socket", r.Protocol)
	assert.Positive(t, r.Batches)
	assert.Equal(t, r.Batches*2*64<<10, r.Bytes)
	assert.Positive(t, r.GBps)

	cfg.Op = transfer.Read
	_, err = Socket(context.Background(), cfg)
	assert.ErrorContains(t, err, "unsupported: socket baseline of")
	cfg.Op, cfg.Threads = transfer.Write, 0
	_, err = Socket(context.Background(), cfg)
	assert.ErrorContains(t, err, "must be > 0")
}
