package transfer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// DeviceRuntime copies to, from and between GPU device memory and shares
// device allocations with same-host processes (IPC). *cuda.Runtime
// implements it (package cuda imports this one, so the engine names the
// capability rather than the library). Addresses are device virtual
// addresses (unified addressing); dev is the device ordinal. Every copy
// has landed when the method returns: host-to-device and device-to-device
// copies are followed by a stream synchronisation, so a COMPLETED WRITE is
// visible to later readers exactly as with host memory. Implementations are
// safe for concurrent use. A nil *cuda.Runtime stored in the interface
// answers every call with an error wrapping ErrUnsupported ("unsupported:
// no CUDA runtime").
type DeviceRuntime interface {
	// CheckDevice reports whether dev names a usable device. Errors:
	// ErrUnsupported (no runtime, no device or driver), ErrInvalidArgument
	// for an ordinal out of range.
	CheckDevice(dev int) error
	// CopyHtoD copies src to device memory at dst on device dev.
	CopyHtoD(dev int, dst uint64, src []byte) error
	// CopyDtoH copies len(dst) bytes from device memory at src on device dev.
	CopyDtoH(dev int, dst []byte, src uint64) error
	// CopyDtoD copies n bytes between device allocations, possibly on
	// different devices.
	CopyDtoD(dstDev int, dst uint64, srcDev int, src uint64, n uint64) error
	// ExportIPC returns an opaque token with which another process on
	// this host maps [addr, addr+length) of device dev (a CUDA IPC handle
	// and the range's offset in its allocation). Errors: ErrUnsupported
	// when the runtime cannot export this memory.
	ExportIPC(dev int, addr, length uint64) (token string, err error)
	// OpenIPC maps the memory behind token on device dev and returns the
	// local device address of the exported range's first byte, and a
	// function that unmaps it (called once, after the last copy).
	OpenIPC(dev int, token string) (addr uint64, unmap func() error, err error)
}

// DeviceTarget is implemented by a Target that can also hold device
// (GPU) memory (Registry). A transport that finds a range is not host
// memory (Resolve fails) may ask ResolveDevice and move the bytes through
// a host bounce buffer with the returned range's CopyIn and CopyOut;
// transports that do not (loopback, shm, rdma) simply refuse such ranges.
type DeviceTarget interface {
	// ResolveDevice returns the remote-accessible device range
	// [addr, addr+length). Errors: ErrInvalidArgument (length 0),
	// ErrAddressNotRegistered when the range is not inside one
	// remote-accessible device buffer.
	ResolveDevice(addr, length uint64) (DeviceRange, error)
}

// DeviceRange is a registered range of device memory, with the runtime that
// reaches it. The zero value is invalid.
type DeviceRange struct {
	Device int    // device ordinal (the buffer's location "cuda:N")
	Addr   uint64 // device address of the first byte
	Length uint64 // bytes
	rt     DeviceRuntime
}

// CopyIn copies src into the range at offset off (host to device) and
// returns once the bytes landed. Errors: ErrInvalidArgument when
// [off, off+len(src)) leaves the range; the runtime's error.
func (d DeviceRange) CopyIn(off uint64, src []byte) error {
	if err := d.check(off, len(src)); err != nil {
		return err
	}
	return d.rt.CopyHtoD(d.Device, d.Addr+off, src)
}

// CopyOut fills dst from the range at offset off (device to host). Errors
// as CopyIn.
func (d DeviceRange) CopyOut(dst []byte, off uint64) error {
	if err := d.check(off, len(dst)); err != nil {
		return err
	}
	return d.rt.CopyDtoH(d.Device, dst, d.Addr+off)
}

func (d DeviceRange) check(off uint64, n int) error {
	if d.rt == nil {
		return fmt.Errorf("%w: no CUDA runtime for device range %#x", ErrUnsupported, d.Addr)
	}
	if off > d.Length || uint64(n) > d.Length-off {
		return fmt.Errorf("%w: [+%d,+%d) outside device range [%#x,+%d)", ErrInvalidArgument, off, n, d.Addr, d.Length)
	}
	return nil
}

// deviceLocation is the location prefix of device memory buffers.
const deviceLocation = "cuda:"

// parseDeviceLocation returns N of "cuda:N", or -1.
func parseDeviceLocation(loc string) int {
	s, ok := strings.CutPrefix(loc, deviceLocation)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1
	}
	return n
}

// mem is one end of a copy: host bytes, or device memory when host is nil.
type mem struct {
	host []byte
	dev  int
	addr uint64 // device address when host == nil
}

func (m mem) isDevice() bool { return m.host == nil }

// copyMem copies n bytes from src to dst, choosing the copy kind from the
// two ends. rt may be nil when both ends are host memory.
func copyMem(rt DeviceRuntime, dst, src mem, n uint64) error {
	switch {
	case !dst.isDevice() && !src.isDevice():
		copy(dst.host[:n], src.host[:n])
		return nil
	case rt == nil:
		return fmt.Errorf("%w: no CUDA runtime for a device-memory copy", ErrUnsupported)
	case dst.isDevice() && !src.isDevice():
		return rt.CopyHtoD(dst.dev, dst.addr, src.host[:n])
	case !dst.isDevice() && src.isDevice():
		return rt.CopyDtoH(src.dev, dst.host[:n], src.addr)
	default:
		return rt.CopyDtoD(dst.dev, dst.addr, src.dev, src.addr, n)
	}
}

// bounceSize is the host staging buffer for device memory sent over a
// network transport: a larger request moves in chunks of this size.
const bounceSize = 4 << 20

// newBounce allocates a host staging buffer for an engine's pool
// (Engine.bounces, *[]byte of bounceSize bytes). Plain pageable Go memory:
// the CUDA runtime stages it itself; pinned buffers would need
// cudaHostAlloc and are a later optimisation.
func newBounce() any { b := make([]byte, bounceSize); return &b }

// viaBounce performs a request whose local side is device memory over a
// network peer, staging through a buffer from pool: WRITE copies each
// chunk device to host and sends it; READ receives each chunk and copies
// it host to device.
func viaBounce(ctx context.Context, pool *sync.Pool, rt DeviceRuntime, p Peer, op Opcode, local mem, remote, n uint64) error {
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	for off := uint64(0); off < n; off += bounceSize {
		b := (*bp)[:min(bounceSize, n-off)]
		if op == Write {
			if err := rt.CopyDtoH(local.dev, b, local.addr+off); err != nil {
				return fmt.Errorf("stage device memory: %w", err)
			}
			if err := p.Do(ctx, Write, b, remote+off); err != nil {
				return err
			}
			continue
		}
		if err := p.Do(ctx, Read, b, remote+off); err != nil {
			return err
		}
		if err := rt.CopyHtoD(local.dev, local.addr+off, b); err != nil {
			return fmt.Errorf("unstage into device memory: %w", err)
		}
	}
	return nil
}

// ipcMaps caches the IPC mappings of one same-host peer's device buffers,
// keyed by the buffer's address in the peer. A mapping is opened by the
// first request that needs it and unmapped when the segment is closed or
// a refresh shows the buffer gone or changed, once no copy uses it.
type ipcMaps struct {
	rt DeviceRuntime

	mu struct {
		sync.Mutex
		m      map[uint64]*ipcMap // by remote buffer address
		closed bool
	}
}

// ipcMap is one remote device buffer mapped into this process.
type ipcMap struct {
	token string
	ready chan struct{} // closed once the open attempt finished
	// Set before ready is closed, read-only afterwards.
	addr  uint64 // local device address of the buffer's first byte
	dev   int
	unmap func() error
	err   error // the open failed: use the network path
	// Guarded by ipcMaps.mu.
	refs  int
	stale bool // dropped from the cache: unmap when refs reaches 0
}

// acquire returns the mapping of the peer buffer b (opening it on first use
// on the buffer's device ordinal) with a reference the caller releases.
// ok is false when no mapping can be used: the request goes over the network.
func (c *ipcMaps) acquire(b *bufferRef) (*ipcMap, bool) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, false
	}
	if c.mu.m == nil {
		c.mu.m = map[uint64]*ipcMap{}
	}
	m, ok := c.mu.m[b.addr]
	var old *ipcMap
	if ok && m.token != b.token { // re-registered since: drop the old mapping
		c.dropLocked(b.addr, m)
		if m.refs == 0 {
			old = m
		}
		ok = false
	}
	opener := !ok
	if opener {
		m = &ipcMap{token: b.token, ready: make(chan struct{}), dev: max(b.dev, 0)}
		c.mu.m[b.addr] = m
	}
	m.refs++
	c.mu.Unlock()
	if old != nil {
		unmapAll([]*ipcMap{old})
	}
	if opener {
		m.addr, m.unmap, m.err = c.rt.OpenIPC(m.dev, m.token)
		close(m.ready)
	} else {
		<-m.ready
	}
	if m.err != nil {
		c.release(m)
		return nil, false
	}
	return m, true
}

// release drops a reference from acquire, unmapping a stale mapping once
// unused.
func (c *ipcMaps) release(m *ipcMap) {
	c.mu.Lock()
	m.refs--
	unmap := m.stale && m.refs == 0 && m.err == nil
	c.mu.Unlock()
	if unmap {
		_ = m.unmap() // best effort: the mapping is gone for us either way
	}
}

// dropLocked removes m (cached under addr) and marks it for unmapping.
func (c *ipcMaps) dropLocked(addr uint64, m *ipcMap) {
	delete(c.mu.m, addr)
	m.stale = true
}

// sync drops mappings of buffers no longer published by the peer, or
// published with a different token.
func (c *ipcMaps) sync(bufs []bufferRef) {
	keep := make(map[uint64]string, len(bufs))
	for _, b := range bufs {
		keep[b.addr] = b.token
	}
	c.mu.Lock()
	var unmap []*ipcMap
	for addr, m := range c.mu.m {
		if tok, ok := keep[addr]; !ok || tok != m.token {
			c.dropLocked(addr, m)
			if m.refs == 0 {
				unmap = append(unmap, m)
			}
		}
	}
	c.mu.Unlock()
	unmapAll(unmap)
}

// close unmaps every mapping (those in use once released) and refuses new
// ones.
func (c *ipcMaps) close() {
	c.mu.Lock()
	c.mu.closed = true
	var unmap []*ipcMap
	for addr, m := range c.mu.m {
		c.dropLocked(addr, m)
		if m.refs == 0 {
			unmap = append(unmap, m)
		}
	}
	c.mu.Unlock()
	unmapAll(unmap)
}

// unmapAll unmaps opened mappings with no users (refs 0 means the open
// attempt has finished, so err and unmap are set).
func unmapAll(ms []*ipcMap) {
	for _, m := range ms {
		if m.err == nil {
			_ = m.unmap()
		}
	}
}

// bufferRef is what the IPC cache needs of a peer's published device buffer.
type bufferRef struct {
	addr  uint64
	dev   int
	token string
}
