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
	assert.Positive(t, r.CPUSPerGB, "the measured window's CPU per GB")

	cfg.Op = transfer.Read
	_, err = Socket(context.Background(), cfg)
	assert.ErrorContains(t, err, "unsupported: socket baseline of")
	cfg.Op, cfg.Threads = transfer.Write, 0
	_, err = Socket(context.Background(), cfg)
	assert.ErrorContains(t, err, "must be > 0")
}

// TestSocketLargeBatch: a batch whose acknowledgements exceed the sockets'
// buffers (16 Ki requests, 128 KiB of acks, buffers of 16 KiB) completes:
// the acks are read while the batch is written.
func TestSocketLargeBatch(t *testing.T) {
	testSockBuf = 16 << 10
	t.Cleanup(func() { testSockBuf = 0 })
	cfg := Config{Op: transfer.Write, BlockSize: 8, BatchSize: 16 << 10, Threads: 1, Duration: 300 * time.Millisecond, Warmup: time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := Socket(context.Background(), cfg)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			assert.ErrorContains(t, err, "no batch began") // a slow machine: still not a hang
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("a large batch hung")
	}
}

func TestCheckSize(t *testing.T) {
	ok := Config{Op: transfer.Write, BlockSize: 1 << 20, BatchSize: 128, Threads: 4, Duration: time.Second, TargetSpan: 1 << 30}
	require.NoError(t, CheckSize(ok))
	for _, c := range []Config{
		{BlockSize: 1 << 44, BatchSize: 1 << 20, Threads: 1, Duration: time.Second}, // overflows int64 when multiplied
		{BlockSize: 1 << 40, BatchSize: 1 << 10, Threads: 1 << 10, Duration: time.Second},
		{BlockSize: 1, BatchSize: 1, Threads: 1, Duration: time.Second, TargetSpan: 1 << 51},
		{BlockSize: 1, BatchSize: 1, Threads: 1, Duration: time.Second, TargetSpan: -1},
		{BlockSize: 0, BatchSize: 1, Threads: 1, Duration: time.Second},
	} {
		assert.Error(t, CheckSize(c), "%+v", c)
	}
	_, err := Socket(context.Background(), Config{Op: transfer.Write, BlockSize: 1 << 44, BatchSize: 1 << 20, Threads: 1, Duration: time.Second})
	assert.ErrorContains(t, err, "exceeds")
}

func TestCPUPerGB(t *testing.T) {
	assert.Zero(t, CPUPerGB(time.Second, 0))
	assert.InDelta(t, 0.5, CPUPerGB(time.Second, 2e9), 1e-12)
	assert.InDelta(t, 2.0, CPUPerGB(time.Second, 5e8), 1e-12)
	// ProcessCPU counts the CPU this process's threads spend: 100 ms of
	// spinning shows (10 ms at least, even on a busy 2-core machine).
	c0 := ProcessCPU()
	require.Positive(t, c0)
	x := uint64(1)
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		for range 10000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	assert.GreaterOrEqual(t, ProcessCPU()-c0, 10*time.Millisecond, "x=%d", x)
}
