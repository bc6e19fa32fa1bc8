package transfer

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/mooncake-go/mooncake/core/memory"
)

// Target resolves an incoming request's range against the memory a process
// registered. Transports call it on the target side for every request, so a
// peer can only reach registered, remote-accessible memory.
type Target interface {
	// Resolve returns the registered bytes [addr, addr+length) for a
	// request that reads them, or an error wrapping
	// ErrAddressNotRegistered when the range is not entirely inside one
	// remote-accessible buffer (length 0 is invalid too), or
	// ErrUnsupported when that buffer is device memory, which has no host
	// bytes (see DeviceTarget).
	Resolve(addr, length uint64) ([]byte, error)
	// ResolveWrite is Resolve for a request that writes the range; it
	// also refuses, with ErrReadOnly, a range in a buffer registered
	// read-only (whose memory may be mapped without write permission: a
	// write would fault and kill the process).
	ResolveWrite(addr, length uint64) ([]byte, error)
}

// ResolveFor resolves [addr, addr+length) on t for a request of op, as a
// target serves it: with ResolveWrite for a WRITE (it lands in the range,
// so a read-only buffer is refused), else with Resolve. Errors: t's.
func ResolveFor(t Target, op Opcode, addr, length uint64) ([]byte, error) {
	if op == Write {
		return t.ResolveWrite(addr, length)
	}
	return t.Resolve(addr, length)
}

// Buffer is one registered range.
type Buffer struct {
	Addr     uint64 // virtual address of the first byte
	Length   uint64 // bytes
	Location string // "cpu:0", "cuda:0", or "*" (upstream's location tag)
	Remote   bool   // visible to peers (upstream remote_accessible)
	// ReadOnly: peers may only read it (AddReadOnly): ResolveWrite
	// refuses it with ErrReadOnly, so a peer's WRITE is refused (the
	// peer sees ErrRejected) and this process's own request that writes
	// it as its segment's target fails with ErrReadOnly. Always Remote.
	ReadOnly bool
	// Device is set for device (GPU) memory added with AddDevice: Addr is
	// a device address, Location is "cuda:N", and there are no host bytes.
	Device bool
	bytes  []byte         // host memory; nil for device memory
	region *memory.Region // set by AddRegion; its memory file, if any, is what FDFor hands out
	dev    int            // device ordinal of device memory
	rt     DeviceRuntime  // reaches device memory
	ipc    string         // IPC token of remote-accessible device memory, if exported
}

// Registry is the set of buffers registered with one engine. It implements
// Target for remote-accessible buffers. Safe for concurrent use.
type Registry struct {
	mu struct {
		sync.RWMutex
		bufs []Buffer // sorted by Addr, non-overlapping
	}
}

// Add registers buf. Errors: ErrInvalidArgument for an empty buffer or a
// device location ("cuda:N": device memory is not host bytes, see
// AddDevice); ErrAddressOverlapped if it overlaps a registered buffer
// (upstream rejects overlapping registration the same way).
func (r *Registry) Add(buf []byte, location string, remote bool) (Buffer, error) {
	return r.add(buf, nil, location, remote, false)
}

// AddReadOnly registers buf remote-accessible for reading only:
// ResolveWrite refuses it with ErrReadOnly (a peer's WRITE, this
// process's own request that writes it as its segment's target), so buf
// may be memory that peers must not change or that is mapped without
// write permission (a file mapped PROT_READ, which a write would fault
// on). As a local buffer (the source or destination of this process's own
// requests) it is used as any other: a READ into it writes it. It is
// never a memory region, so the shm transport does not hand it to
// same-host peers to map. Errors as Add.
func (r *Registry) AddReadOnly(buf []byte, location string) (Buffer, error) {
	return r.add(buf, nil, location, true, true)
}

// AddRegion registers the whole of reg, as Add(reg.Bytes(), ...), and
// remembers the region so that FDFor can hand its memory file
// (memory.MapShared) to same-host peers (the shm transport). Errors as Add.
func (r *Registry) AddRegion(reg *memory.Region, location string, remote bool) (Buffer, error) {
	return r.add(reg.Bytes(), reg, location, remote, false)
}

func (r *Registry) add(buf []byte, reg *memory.Region, location string, remote, readOnly bool) (Buffer, error) {
	if len(buf) == 0 {
		return Buffer{}, fmt.Errorf("%w: register an empty buffer", ErrInvalidArgument)
	}
	if location == "" {
		location = "*"
	}
	if strings.HasPrefix(location, deviceLocation) {
		return Buffer{}, fmt.Errorf("%w: location %q is device memory; register GPU memory with RegisterDeviceMemory, not as host bytes", ErrInvalidArgument, location)
	}
	return r.insert(Buffer{Addr: memory.AddrOf(buf), Length: uint64(len(buf)), Location: location, Remote: remote, ReadOnly: readOnly, bytes: buf, region: reg})
}

// AddDevice registers device memory [addr, addr+length) of device dev,
// reached through rt, with location "cuda:<dev>". ipc is the IPC token
// published to same-host peers (empty: none). Errors: ErrInvalidArgument
// for an empty range, a range wrapping the address space, dev < 0 or a nil
// rt; ErrAddressOverlapped as Add.
func (r *Registry) AddDevice(rt DeviceRuntime, addr, length uint64, dev int, remote bool, ipc string) (Buffer, error) {
	switch {
	case length == 0:
		return Buffer{}, fmt.Errorf("%w: register an empty device buffer", ErrInvalidArgument)
	case length > ^uint64(0)-addr:
		return Buffer{}, fmt.Errorf("%w: device range [%#x,+%d) wraps the address space", ErrInvalidArgument, addr, length)
	case dev < 0:
		return Buffer{}, fmt.Errorf("%w: device %d", ErrInvalidArgument, dev)
	case rt == nil:
		return Buffer{}, fmt.Errorf("%w: device buffer without a runtime", ErrInvalidArgument)
	}
	loc := deviceLocation + fmt.Sprint(dev)
	return r.insert(Buffer{Addr: addr, Length: length, Location: loc, Remote: remote, Device: true, dev: dev, rt: rt, ipc: ipc})
}

// insert adds b, keeping the buffers sorted and non-overlapping.
func (r *Registry) insert(b Buffer) (Buffer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.mu.bufs), func(i int) bool { return r.mu.bufs[i].Addr >= b.Addr })
	if i > 0 {
		p := r.mu.bufs[i-1]
		if p.Addr+p.Length > b.Addr {
			return Buffer{}, fmt.Errorf("%w: [%#x,+%d) overlaps [%#x,+%d)", ErrAddressOverlapped, b.Addr, b.Length, p.Addr, p.Length)
		}
	}
	if i < len(r.mu.bufs) && b.Addr+b.Length > r.mu.bufs[i].Addr {
		n := r.mu.bufs[i]
		return Buffer{}, fmt.Errorf("%w: [%#x,+%d) overlaps [%#x,+%d)", ErrAddressOverlapped, b.Addr, b.Length, n.Addr, n.Length)
	}
	r.mu.bufs = append(r.mu.bufs, Buffer{})
	copy(r.mu.bufs[i+1:], r.mu.bufs[i:])
	r.mu.bufs[i] = b
	return b, nil
}

// Remove unregisters the buffer starting at addr and returns it. Errors:
// ErrAddressNotRegistered when no buffer starts there.
func (r *Registry) Remove(addr uint64) (Buffer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, b := range r.mu.bufs {
		if b.Addr == addr {
			r.mu.bufs = append(r.mu.bufs[:i], r.mu.bufs[i+1:]...)
			return b, nil
		}
	}
	return Buffer{}, fmt.Errorf("%w: no buffer starts at %#x", ErrAddressNotRegistered, addr)
}

// Buffers returns a copy of the registered buffers, sorted by address.
func (r *Registry) Buffers() []Buffer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]Buffer(nil), r.mu.bufs...)
}

// lookup returns the bytes of [addr, addr+length) when the range lies inside
// one registered buffer (remote-accessible only, if remoteOnly; not
// read-only, if write).
func (r *Registry) lookup(addr, length uint64, remoteOnly, write bool) ([]byte, error) {
	if length == 0 {
		return nil, fmt.Errorf("%w: zero-length range at %#x", ErrInvalidArgument, addr)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b, ok := r.findLocked(addr, length, remoteOnly); ok {
		if b.Device {
			return nil, fmt.Errorf("%w: [%#x,+%d) is device memory (%s), not host bytes", ErrUnsupported, addr, length, b.Location)
		}
		if write && b.ReadOnly {
			return nil, fmt.Errorf("%w: a write to [%#x,+%d), in buffer [%#x,+%d)", ErrReadOnly, addr, length, b.Addr, b.Length)
		}
		off := addr - b.Addr
		return b.bytes[off : off+length : off+length], nil
	}
	return nil, fmt.Errorf("%w: [%#x,+%d)", ErrAddressNotRegistered, addr, length)
}

// localPieces resolves every piece for this process's own use (any
// registered host buffer) under one read lock, merging a piece into the
// previous one when it continues it in the same buffer. device reports
// (with nil bytes) that every piece is registered but some are device
// memory, which has no host bytes. Errors: ErrInvalidArgument for a
// zero-length piece; ErrAddressNotRegistered for a piece outside every
// registered buffer.
func (r *Registry) localPieces(pieces []Piece) (out [][]byte, device bool, err error) {
	out = make([][]byte, 0, len(pieces))
	r.mu.RLock()
	defer r.mu.RUnlock()
	last := -1 // index in bufs of the buffer holding the previous piece
	var prevEnd uint64
	for _, p := range pieces {
		if p.Length == 0 {
			return nil, false, fmt.Errorf("%w: zero-length range at %#x", ErrInvalidArgument, p.Addr)
		}
		i := last
		if i < 0 || !r.mu.bufs[i].holds(p.Addr, p.Length) {
			i = r.findIndexLocked(p.Addr, p.Length)
		}
		if i < 0 {
			return nil, false, fmt.Errorf("%w: [%#x,+%d)", ErrAddressNotRegistered, p.Addr, p.Length)
		}
		b := &r.mu.bufs[i]
		device = device || b.Device
		switch {
		case device: // no host bytes to return; the rest is only checked
		case i == last && p.Addr == prevEnd:
			k := len(out) - 1
			start := memory.AddrOf(out[k]) - b.Addr
			end := p.Addr + p.Length - b.Addr
			out[k] = b.bytes[start:end:end]
		default:
			off := p.Addr - b.Addr
			out = append(out, b.bytes[off:off+p.Length:off+p.Length])
		}
		last, prevEnd = i, p.Addr+p.Length
	}
	if device {
		return nil, true, nil
	}
	return out, false, nil
}

// holds reports whether [addr, addr+length) lies inside b.
func (b *Buffer) holds(addr, length uint64) bool {
	off := addr - b.Addr
	return addr >= b.Addr && off < b.Length && length <= b.Length-off
}

// findIndexLocked returns the index of the buffer holding [addr,
// addr+length), or -1. r.mu must be held.
func (r *Registry) findIndexLocked(addr, length uint64) int {
	bufs := r.mu.bufs
	i := sort.Search(len(bufs), func(i int) bool { return bufs[i].Addr > addr }) - 1
	if i >= 0 && bufs[i].holds(addr, length) {
		return i
	}
	return -1
}

// lookupDevice returns the device range [addr, addr+length) when it lies
// inside one registered device buffer (remote-accessible only, if
// remoteOnly).
func (r *Registry) lookupDevice(addr, length uint64, remoteOnly bool) (DeviceRange, error) {
	if length == 0 {
		return DeviceRange{}, fmt.Errorf("%w: zero-length range at %#x", ErrInvalidArgument, addr)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b, ok := r.findLocked(addr, length, remoteOnly); ok && b.Device {
		return DeviceRange{Device: b.dev, Addr: addr, Length: length, rt: b.rt}, nil
	}
	return DeviceRange{}, fmt.Errorf("%w: [%#x,+%d) is not in a device buffer", ErrAddressNotRegistered, addr, length)
}

// ResolveDevice implements DeviceTarget: only remote-accessible device
// buffers are reachable.
func (r *Registry) ResolveDevice(addr, length uint64) (DeviceRange, error) {
	return r.lookupDevice(addr, length, true)
}

// findLocked returns the buffer holding [addr, addr+length) (remote-accessible
// only, if remoteOnly). r.mu must be held.
func (r *Registry) findLocked(addr, length uint64, remoteOnly bool) (Buffer, bool) {
	bufs := r.mu.bufs
	i := sort.Search(len(bufs), func(i int) bool { return bufs[i].Addr > addr }) - 1
	if i >= 0 {
		b := bufs[i]
		off := addr - b.Addr
		if off < b.Length && length <= b.Length-off && (b.Remote || !remoteOnly) {
			return b, true
		}
	}
	return Buffer{}, false
}

// FDFor implements shm.FDSource: a new close-on-exec descriptor of the
// memory file behind the remote-accessible buffer holding
// [addr, addr+length), owned by the caller, with the buffer's address and
// size. The descriptor is duplicated under the read lock, so a buffer being
// unregistered (and then closed by its owner) never yields another file.
// Errors: ErrInvalidArgument (length 0), ErrAddressNotRegistered,
// ErrUnsupported for a buffer not added with AddRegion, memory.ErrNotShared
// for an anonymous region, memory.ErrClosed for a closed region.
func (r *Registry) FDFor(addr, length uint64) (fd int, base, size uint64, err error) {
	if length == 0 {
		return -1, 0, 0, fmt.Errorf("%w: zero-length range at %#x", ErrInvalidArgument, addr)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.findLocked(addr, length, true)
	if !ok {
		return -1, 0, 0, fmt.Errorf("%w: [%#x,+%d)", ErrAddressNotRegistered, addr, length)
	}
	if b.region == nil {
		return -1, 0, 0, fmt.Errorf("%w: buffer [%#x,+%d) was registered as bytes, not as a memory region", ErrUnsupported, b.Addr, b.Length)
	}
	fd, err = b.region.DupFD()
	if err != nil {
		return -1, 0, 0, fmt.Errorf("transfer: buffer [%#x,+%d): %w", b.Addr, b.Length, err)
	}
	return fd, b.Addr, b.Length, nil
}

// Resolve implements Target: only remote-accessible buffers are reachable.
func (r *Registry) Resolve(addr, length uint64) ([]byte, error) {
	return r.lookup(addr, length, true, false)
}

// ResolveWrite implements Target: only remote-accessible buffers that are
// not read-only are reachable.
func (r *Registry) ResolveWrite(addr, length uint64) ([]byte, error) {
	return r.lookup(addr, length, true, true)
}

// Local resolves a range for this process's own use (any registered
// buffer, read-only ones included: they are read-only to peers). Errors
// as Resolve.
func (r *Registry) Local(addr, length uint64) ([]byte, error) {
	return r.lookup(addr, length, false, false)
}

// localDevice resolves a device range for this process's own use.
func (r *Registry) localDevice(addr, length uint64) (DeviceRange, error) {
	return r.lookupDevice(addr, length, false)
}
