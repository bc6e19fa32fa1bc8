package xferagent

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// memDevices is an in-memory transfer.DeviceRuntime: device dev's memory
// is one off-heap mapping at the fixed device address vramBase, so copies
// really move bytes and the test can read the "device" afterwards.
type memDevices struct {
	mu  sync.Mutex
	mem map[int][]byte
}

const vramBase = 0x7a0000000000

func (m *memDevices) at(dev int, addr, n uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.mem[dev]
	if !ok || addr < vramBase || addr-vramBase > uint64(len(b)) || n > uint64(len(b))-(addr-vramBase) {
		return nil, fmt.Errorf("%w: [%#x,+%d) is not on device %d", transfer.ErrInvalidArgument, addr, n, dev)
	}
	return b[addr-vramBase : addr-vramBase+n], nil
}

func (m *memDevices) CheckDevice(dev int) error {
	if _, err := m.at(dev, vramBase, 0); err != nil {
		return err
	}
	return nil
}

func (m *memDevices) CopyHtoD(dev int, dst uint64, src []byte) error {
	d, err := m.at(dev, dst, uint64(len(src)))
	if err == nil {
		copy(d, src)
	}
	return err
}

func (m *memDevices) CopyDtoH(dev int, dst []byte, src uint64) error {
	s, err := m.at(dev, src, uint64(len(dst)))
	if err == nil {
		copy(dst, s)
	}
	return err
}

func (m *memDevices) CopyDtoD(dstDev int, dst uint64, srcDev int, src uint64, n uint64) error {
	d, err := m.at(dstDev, dst, n)
	if err != nil {
		return err
	}
	s, err := m.at(srcDev, src, n)
	if err == nil {
		copy(d, s)
	}
	return err
}

func (m *memDevices) ExportIPC(int, uint64, uint64) (string, error) {
	return "", fmt.Errorf("%w: no IPC in the in-memory runtime", transfer.ErrUnsupported)
}

func (m *memDevices) OpenIPC(int, string) (uint64, func() error, error) {
	return 0, nil, fmt.Errorf("%w: no IPC in the in-memory runtime", transfer.ErrUnsupported)
}

// TestVRAMWithDeviceRuntime: with a CUDA runtime, VRAM registers, shows in
// Caps, and moves both ways against a peer's DRAM (WRITE from and READ
// into device memory, through the engine's host staging), byte for byte;
// a peer can also write into the registered VRAM. A VRAM descriptor
// outside its registration is refused.
func TestVRAMWithDeviceRuntime(t *testing.T) {
	const n = 3<<20 + 123 // more than one staging slice, not a multiple
	dm, err := memory.Map(4 << 20)
	require.NoError(t, err)
	t.Cleanup(func() { dm.Close() })
	rt := &memDevices{mem: map[int][]byte{1: dm.Bytes()}}
	dev := dm.Bytes()

	a, err := New(Config{Agent: "gpu", Params: map[string]string{ParamIPAddr: "127.0.0.1", ParamCMA: "off"}, CUDA: rt})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	assert.NotZero(t, a.Caps()&(1<<(8+MemVRAM)), "VRAM in Caps with a runtime")
	vreg, err := a.Register(nil, vramBase, n, 1, MemVRAM)
	require.NoError(t, err)
	_, err = a.Register(nil, vramBase, n, 7, MemVRAM)
	require.Error(t, err, "device 7 does not exist")

	b := newAgent(t, "host", n, ParamCMA, "off")
	rmd := exchange(t, &agentT{e: a}, b)

	fill(dev[:n], 5)
	local := []Desc{{Addr: vramBase, Len: n, DevID: 1, MD: vreg}}
	remote := []Desc{{Addr: addrOf(b.buf), Len: n, MD: rmd}}
	w, err := a.PrepXfer(1, MemVRAM, local, MemDRAM, remote, b.e.Agent())
	require.NoError(t, err)
	_, err = a.PostXfer(w, 1, local, remote, []byte("vram"))
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a, w))
	require.True(t, bytes.Equal(dev[:n], b.buf[:n]), "VRAM -> DRAM write")
	assert.Equal(t, []byte("vram"), waitNotifs(t, b.e, 1)[0].Msg)

	fill(b.buf, 9)
	clear(dev)
	r, err := a.PrepXfer(0, MemVRAM, local, MemDRAM, remote, b.e.Agent())
	require.NoError(t, err)
	_, err = a.PostXfer(r, 0, local, remote, nil)
	require.NoError(t, err)
	require.NoError(t, waitDone(t, a, r))
	require.True(t, bytes.Equal(dev[:n], b.buf[:n]), "DRAM -> VRAM read")

	// The peer writes into a's VRAM.
	require.NoError(t, b.e.LoadRemoteConnInfo(a.Agent(), a.ConnInfo()))
	pub, err := a.PublicData(vreg)
	require.NoError(t, err)
	vmd, err := b.e.LoadRemoteMD(vramBase, n, 1, MemVRAM, pub, a.Agent())
	require.NoError(t, err)
	fill(b.buf, 13)
	bl := []Desc{{Addr: addrOf(b.buf), Len: n, MD: b.reg}}
	bv := []Desc{{Addr: vramBase, Len: n, DevID: 1, MD: vmd}}
	pw, err := b.e.PrepXfer(1, MemDRAM, bl, MemVRAM, bv, a.Agent())
	require.NoError(t, err)
	_, err = b.e.PostXfer(pw, 1, bl, bv, nil)
	require.NoError(t, err)
	require.NoError(t, waitDone(t, b.e, pw))
	require.True(t, bytes.Equal(dev[:n], b.buf[:n]), "peer's DRAM -> our VRAM write")

	// Out of the registration.
	bad := []Desc{{Addr: vramBase + 8, Len: n, DevID: 1, MD: vreg}}
	_, err = a.PrepXfer(1, MemVRAM, bad, MemDRAM, remote, b.e.Agent())
	require.ErrorIs(t, err, ErrInvalidParam)
}
