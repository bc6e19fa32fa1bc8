package transfer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/mooncake-go/mooncake/core/memory"
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

// HostPinner is what a DeviceRuntime may add: page-locking host memory
// (cudaHostRegister), so that copies between it and device memory run as
// DMA at full PCIe/NVLink speed instead of through the driver's own
// pageable staging. The engine pins its staging buffers with it when the
// runtime has it (*cuda.Runtime does) and uses them unpinned otherwise.
type HostPinner interface {
	// PinHost page-locks b, which must be off the Go heap (package
	// memory) and stay mapped until unpin is called (once). Errors: the
	// runtime's (e.g. out of pinnable memory).
	PinHost(b []byte) (unpin func() error, err error)
}

// HostStaging is an off-heap host buffer through which a transport moves
// bytes between the network and one device's memory (a tcp server's
// per-connection bounce buffer), page-locked when the runtime is a
// HostPinner so that its copies run as DMA. Not safe for concurrent
// Close.
type HostStaging struct {
	region *memory.Region
	unpin  func() error // nil when not pinned
}

// NewHostStaging maps n bytes (> 0) off the Go heap for copies to and from
// d's device, pinned when d's runtime can pin (a failed pin leaves them
// pageable: copies still work, slower). Errors: ErrInvalidArgument for
// n <= 0; ErrUnsupported without a runtime; the mapping's.
func (d DeviceRange) NewHostStaging(n int) (*HostStaging, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: host staging of %d bytes", ErrInvalidArgument, n)
	}
	if d.rt == nil {
		return nil, fmt.Errorf("%w: no CUDA runtime for device range %#x", ErrUnsupported, d.Addr)
	}
	return newHostStaging(d.rt, n)
}

// newHostStaging maps n bytes off the Go heap and pins them when rt is a
// HostPinner. Unpinned staging still works (the driver stages pageable
// memory itself), only slower: a failed pin is not an error. Errors: the
// mapping's.
func newHostStaging(rt DeviceRuntime, n int) (*HostStaging, error) {
	r, err := memory.Map(n)
	if err != nil {
		return nil, fmt.Errorf("host staging of %d bytes: %w", n, err)
	}
	h := &HostStaging{region: r}
	if hp, ok := rt.(HostPinner); ok {
		if unpin, err := hp.PinHost(r.Bytes()); err == nil {
			h.unpin = unpin
		}
	}
	return h, nil
}

// Bytes is the buffer (valid until Close).
func (h *HostStaging) Bytes() []byte { return h.region.Bytes() }

// Close unpins and unmaps the buffer; a nil h is a no-op. Errors: the
// unpin's (the buffer is unmapped regardless).
func (h *HostStaging) Close() error {
	if h == nil {
		return nil
	}
	var err error
	if h.unpin != nil {
		err = h.unpin()
		h.unpin = nil
	}
	if cerr := h.region.Close(); err == nil {
		err = cerr
	}
	return err
}

// DefaultDeviceSlice is Config.DeviceSlice's default: 2 MiB slices, the
// size at which a pinned cudaMemcpy reaches most of the link's bandwidth
// while a request still has several slices in flight.
const DefaultDeviceSlice = 2 << 20

// stager is one pair of host staging buffers (two slices of the engine's
// DeviceSlice bytes each) in one HostStaging.
type stager struct {
	*HostStaging
	bufs [2][]byte
}

// stagers is an engine's free list of stagers: one is taken per device
// request on a network path and given back after it; at most one per
// concurrently executing request ever exists (Config.Workers).
type stagers struct {
	rt    DeviceRuntime
	slice int

	mu struct {
		sync.Mutex
		free   []*stager
		closed bool
	}
}

// get returns a free stager, allocating (and pinning) one when none is.
// Errors: the allocation's; ErrClosed after close.
func (p *stagers) get() (*stager, error) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.mu.free); n > 0 {
		s := p.mu.free[n-1]
		p.mu.free = p.mu.free[:n-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	h, err := newHostStaging(p.rt, 2*p.slice)
	if err != nil {
		return nil, err
	}
	b := h.Bytes()
	return &stager{HostStaging: h, bufs: [2][]byte{b[:p.slice:p.slice], b[p.slice:]}}, nil
}

// put gives s back (freeing it after close).
func (p *stagers) put(s *stager) {
	p.mu.Lock()
	if !p.mu.closed {
		p.mu.free = append(p.mu.free, s)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	s.free()
}

// close frees the free stagers; those in use are freed when put back.
func (p *stagers) close() {
	p.mu.Lock()
	p.mu.closed = true
	free := p.mu.free
	p.mu.free = nil
	p.mu.Unlock()
	for _, s := range free {
		s.free()
	}
}

func (s *stager) free() { _ = s.Close() } // best effort: an unpin error still unmaps

// pipeline moves n bytes in slices of len(bufs[0]) bytes through the two
// staging buffers: fill(b, off) produces bytes [off, off+len(b)) of the
// request into b, drain(b, off) consumes them. While slice k drains,
// slice k+1 fills (fill runs on a helper goroutine), so a device copy
// overlaps the network send or receive; slices drain in order, and a
// request of one slice runs both stages on the caller's goroutine. The
// first error stops both stages; pipeline returns it only once neither
// stage touches the buffers any more.
func pipeline(bufs [2][]byte, n uint64, fill, drain func(b []byte, off uint64) error) error {
	slice := uint64(len(bufs[0]))
	if n <= slice {
		b := bufs[0][:n]
		if err := fill(b, 0); err != nil {
			return err
		}
		return drain(b, 0)
	}
	type item struct {
		b   []byte
		off uint64
		err error
	}
	free := make(chan []byte, 2)
	free <- bufs[0]
	free <- bufs[1]
	full := make(chan item, 2)
	stop := make(chan struct{})
	go func() {
		defer close(full)
		for off := uint64(0); off < n; off += slice {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			b = b[:min(slice, n-off)]
			if err := fill(b, off); err != nil {
				full <- item{off: off, err: err}
				return
			}
			full <- item{b: b, off: off}
		}
	}()
	var err error
	for it := range full { // until the filler is done: it may still hold a buffer
		switch {
		case err != nil:
		case it.err != nil:
			err = it.err
		default:
			if err = drain(it.b, it.off); err != nil {
				close(stop)
				continue
			}
			free <- it.b[:slice]
		}
	}
	return err
}

// viaStaging performs a request whose local side is device memory over a
// network peer, staging through a stager from pool in slices that overlap
// the device copy with the transfer: WRITE copies slice k+1 device to host
// while slice k is sent; READ copies slice k host to device while slice
// k+1 is received. It returns once every slice has landed (the last
// host-to-device copy synchronised), so a COMPLETED READ is visible on the
// device.
func viaStaging(ctx context.Context, pool *stagers, rt DeviceRuntime, p Peer, op Opcode, local mem, remote, n uint64) error {
	st, err := pool.get()
	if err != nil {
		return err
	}
	defer pool.put(st)
	if op == Write {
		return pipeline(st.bufs, n, func(b []byte, off uint64) error {
			if err := rt.CopyDtoH(local.dev, b, local.addr+off); err != nil {
				return fmt.Errorf("stage device memory [+%d,+%d): %w", off, len(b), err)
			}
			return nil
		}, func(b []byte, off uint64) error {
			return p.Do(ctx, Write, b, remote+off)
		})
	}
	return pipeline(st.bufs, n, func(b []byte, off uint64) error {
		return p.Do(ctx, Read, b, remote+off)
	}, func(b []byte, off uint64) error {
		if err := rt.CopyHtoD(local.dev, local.addr+off, b); err != nil {
			return fmt.Errorf("unstage into device memory [+%d,+%d): %w", off, len(b), err)
		}
		return nil
	})
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
