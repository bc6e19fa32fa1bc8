package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/testutil/sockpair"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// gatedGPU is a DeviceRuntime over host memory whose host-to-device
// copies each first ask hook (which may block it, or fail it); it logs the
// copies' device offsets in the order they ran.
type gatedGPU struct {
	base uint64
	mem  []byte
	hook func(i int, off uint64, n int) error // i counts copies from 0
	// dtohHook, if set, runs first in each device-to-host copy (i counts
	// them from 0).
	dtohHook func(i int, off uint64, n int)

	mu   sync.Mutex
	n    int
	dn   int
	offs []uint64
}

func (g *gatedGPU) CheckDevice(int) error { return nil }

func (g *gatedGPU) CopyHtoD(_ int, dst uint64, src []byte) error {
	g.mu.Lock()
	i := g.n
	g.n++
	g.mu.Unlock()
	off := dst - g.base
	if g.hook != nil {
		if err := g.hook(i, off, len(src)); err != nil {
			return err
		}
	}
	g.mu.Lock()
	copy(g.mem[off:], src)
	g.offs = append(g.offs, off)
	g.mu.Unlock()
	return nil
}

// bytes returns a copy of n bytes of device memory at off.
func (g *gatedGPU) bytes(off, n int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return bytes.Clone(g.mem[off : off+n])
}

func (g *gatedGPU) CopyDtoH(_ int, dst []byte, src uint64) error {
	g.mu.Lock()
	i := g.dn
	g.dn++
	g.mu.Unlock()
	if g.dtohHook != nil {
		g.dtohHook(i, src-g.base, len(dst))
	}
	g.mu.Lock()
	copy(dst, g.mem[src-g.base:])
	g.mu.Unlock()
	return nil
}

func (g *gatedGPU) CopyDtoD(int, uint64, int, uint64, uint64) error {
	return errors.New("gatedGPU: no DtoD")
}
func (g *gatedGPU) ExportIPC(int, uint64, uint64) (string, error) { return "", transfer.ErrUnsupported }
func (g *gatedGPU) OpenIPC(int, string) (uint64, func() error, error) {
	return 0, nil, transfer.ErrUnsupported
}

// deviceServer serves one socketpair connection against a registry holding
// g's memory as device 0 (remote-accessible); it returns the client end
// (send buffer shrunk to 64 KiB, so a large payload is only written once
// the server read most of it) and a channel closed when serve returned.
func deviceServer(t *testing.T, g *gatedGPU) (cli interface {
	io.ReadWriter
	CloseWrite() error
}, done chan struct{}) {
	var reg transfer.Registry
	_, err := reg.AddDevice(g, g.base, uint64(len(g.mem)), 0, true, "")
	require.NoError(t, err)
	c, srv := sockpair.New(t)
	t.Cleanup(func() { c.Close() })
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) {
		require.NoError(t, syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10))
	}))
	done = make(chan struct{})
	go func() {
		defer close(done)
		defer srv.Close()
		serve(srv, &reg)
	}()
	return c, done
}

func deviceWrite(addr uint64, payload []byte) []byte {
	h := make([]byte, headerLen, headerLen+len(payload))
	binary.LittleEndian.PutUint64(h[0:], uint64(len(payload)))
	binary.LittleEndian.PutUint64(h[8:], addr)
	h[16] = byte(transfer.Write) | protoV2
	return append(h, payload...)
}

// seeded is pattern(n) xor seed: payloads that differ per request.
func seeded(n int, seed byte) []byte {
	b := pattern(n)
	for i := range b {
		b[i] ^= seed
	}
	return b
}

// readAcks reads n status frames and returns their codes.
func readAcks(t *testing.T, r io.Reader, n int) []uint64 {
	t.Helper()
	b := make([]byte, n*statusLen)
	_, err := io.ReadFull(r, b)
	require.NoError(t, err)
	codes := make([]uint64, n)
	for i := range codes {
		v := binary.LittleEndian.Uint64(b[i*statusLen:])
		require.Equal(t, statusMagic, v&^uint64(0xFFFFFFFF), "frame %d is not a status frame", i)
		codes[i] = v & 0xFFFFFFFF
	}
	return codes
}

// TestDeviceWriteOverlapsNextRead: while a device WRITE's copy is held,
// the server reads the next request's payload (half a bounce buffer,
// eight times the client's send buffer: its write returns only once the
// server read it); neither request is acknowledged before its copy
// landed, acknowledgements keep request order, and the bytes are on the
// device. Serving one request after another, the second write never
// returns (the test fails at its deadline).
func TestDeviceWriteOverlapsNextRead(t *testing.T) {
	g := &gatedGPU{base: 1 << 40, mem: make([]byte, 2<<20)}
	gate := make(chan struct{})
	g.hook = func(i int, off uint64, n int) error {
		if i == 0 {
			select {
			case <-gate:
			case <-time.After(time.Minute):
			}
		}
		return nil
	}
	cli, done := deviceServer(t, g)
	p1, p2 := seeded(64<<10, 1), seeded(deviceChunk/2, 2)
	sent := make(chan error, 1)
	go func() {
		_, err := cli.Write(append(deviceWrite(g.base, p1), deviceWrite(g.base+1<<20, p2)...))
		sent <- err
	}()
	select {
	case err := <-sent:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		close(gate)
		t.Fatal("the server did not read the next request's payload while a device copy was in flight")
	}
	close(gate)
	assert.Equal(t, []uint64{statusOK, statusOK}, readAcks(t, cli, 2))
	assert.True(t, bytes.Equal(p1, g.bytes(0, len(p1))), "first write's bytes on the device")
	assert.True(t, bytes.Equal(p2, g.bytes(1<<20, len(p2))), "second write's bytes on the device")
	g.mu.Lock()
	assert.Equal(t, []uint64{0, 1 << 20}, g.offs, "copies in request order")
	g.mu.Unlock()
	require.NoError(t, cli.CloseWrite())
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after the client's half-close")
	}
}

// TestDeviceWriteFailedChunk: a request of two chunks whose first copy
// fails is refused (its second chunk is read and not copied), the
// request after it lands and is acknowledged, in order; a host-memory
// request after a device one is answered after it.
func TestDeviceWriteFailedChunk(t *testing.T) {
	g := &gatedGPU{base: 1 << 40, mem: make([]byte, 4<<20)}
	g.hook = func(i int, off uint64, n int) error {
		if i == 0 {
			return errors.New("injected copy failure")
		}
		return nil
	}
	cli, done := deviceServer(t, g)
	big, small := seeded(deviceChunk, 3), seeded(4096, 4)
	go func() {
		_, _ = cli.Write(append(deviceWrite(g.base, big), deviceWrite(g.base+2<<20, small)...))
		// An unregistered host address: refused, after the two above.
		_, _ = cli.Write(deviceWrite(1<<20, small))
		_ = cli.CloseWrite()
	}()
	assert.Equal(t, []uint64{statusRej, statusOK, statusRej}, readAcks(t, cli, 3))
	g.mu.Lock()
	assert.Equal(t, []uint64{2 << 20}, g.offs, "only the second request's copy ran to the end")
	assert.Equal(t, 2, g.n, "the failed request's second chunk was not copied")
	g.mu.Unlock()
	assert.True(t, bytes.Equal(small, g.bytes(2<<20, len(small))))
	assert.Equal(t, make([]byte, deviceChunk), g.bytes(0, deviceChunk), "nothing of the refused request landed")
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after the client's half-close")
	}
}

// TestDeviceReadOverlapsSend: a device READ of two chunks copies the
// second out while the first is still being sent (the client reads
// nothing until that copy began; the first chunk, twice the server's
// send buffer, cannot leave before), and the answer is the device's bytes.
// Copying out only after each send, the second copy never begins (the
// test fails at its deadline).
func TestDeviceReadOverlapsSend(t *testing.T) {
	g := &gatedGPU{base: 1 << 40, mem: seeded(2<<20, 5)}
	second := make(chan struct{})
	var once sync.Once
	g.dtohHook = func(i int, off uint64, n int) {
		if i == 1 {
			once.Do(func() { close(second) })
		}
	}
	cli, done := deviceServer(t, g)
	h := make([]byte, headerLen)
	binary.LittleEndian.PutUint64(h[0:], deviceChunk)
	binary.LittleEndian.PutUint64(h[8:], g.base)
	h[16] = byte(transfer.Read) | protoV2
	_, err := cli.Write(h)
	require.NoError(t, err)
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the second chunk was not copied out while the first was being sent")
	}
	assert.Equal(t, []uint64{statusOK}, readAcks(t, cli, 1))
	got := make([]byte, deviceChunk)
	_, err = io.ReadFull(cli, got)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(g.bytes(0, deviceChunk), got), "the READ's bytes are the device's")
	require.NoError(t, cli.CloseWrite())
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after the client's half-close")
	}
}
