package rdma

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// region is one buffer registered on every opened device (or, on the
// initiator, a peer's region and its keys): [addr, addr+length) with one
// key per device. Local regions index lkeys, rkeys and handles by this
// transport's device index; peer regions hold rkeys in the order of
// devices, the peer's device names. handles are the verbs objects
// (*C.struct_ibv_mr) in the rdma build, nil for peer regions.
type region struct {
	addr, length uint64
	access       access // what the registration allows (a peer region: what the target granted)
	location     string // the buffer's location tag ("cpu:0", "*"): selects its matrix entry
	lkeys, rkeys []uint32
	devices      []string // peer regions: device names, parallel to rkeys
	handles      []any
}

// rkeyOn returns a peer region's rkey on the peer device dev.
func (r region) rkeyOn(dev string) (uint32, bool) {
	for i, d := range r.devices {
		if d == dev && i < len(r.rkeys) {
			return r.rkeys[i], true
		}
	}
	return 0, false
}

// access is what a memory registration allows beyond the local reads
// every registration allows: a set of the acc* bits, each mapping to one
// ibv_access_flags bit (IBV_ACCESS_LOCAL_WRITE, _REMOTE_READ,
// _REMOTE_WRITE). Upstream registers every buffer with all three.
type access uint8

const (
	// accLocalWrite lets the NIC write the memory for this process: the
	// destination of an RDMA READ. ibv_reg_mr refuses it (EFAULT) on a
	// read-only mapping.
	accLocalWrite access = 1 << iota
	// accRemoteRead lets a peer holding the rkey read the memory.
	accRemoteRead
	// accRemoteWrite lets a peer holding the rkey write the memory; verbs
	// require accLocalWrite with it.
	accRemoteWrite
)

// has reports whether a allows everything need does.
func (a access) has(need access) bool { return a&need == need }

// remoteAccess is what a registration serving peers grants for a buffer
// that peers may write (writable) or only read (a read-only
// registration, transfer.Registry.AddReadOnly): the NIC then refuses a
// peer's RDMA WRITE, as the tcp server refuses its WRITE frame.
func remoteAccess(writable bool) access {
	if writable {
		return accLocalWrite | accRemoteRead | accRemoteWrite
	}
	return accLocalWrite | accRemoteRead
}

// mrGrant is what serveMR registers for a peer's rkey request on [addr,
// addr+length) of target (grant, remoteAccess of whether peers may write
// it) and what a registered region must allow to answer it (need: grant
// less accLocalWrite, which a read-only mapping registers without).
// Errors: target.Resolve's, for a range peers may not reach at all.
func mrGrant(target transfer.Target, addr, length uint64) (grant, need access, err error) {
	if _, err := target.Resolve(addr, length); err != nil {
		return 0, 0, err
	}
	_, werr := target.ResolveWrite(addr, length)
	grant = remoteAccess(werr == nil)
	return grant, grant &^ accLocalWrite, nil
}

// excluded is what a region serving need must not allow: a peer asking
// for a buffer that is read-only to peers must never get the rkey of a
// registration that also grants remote writes (one left from when the
// buffer was writable).
func excluded(need access) access {
	if need.has(accRemoteRead) && !need.has(accRemoteWrite) {
		return accRemoteWrite
	}
	return 0
}

// registerWith registers with want through reg, and when that fails with
// EFAULT while want asks for accLocalWrite but not accRemoteWrite, once
// more without accLocalWrite: memory mapped shared and read-only (a P2P
// seed's file) can be registered only so (on Linux 6.2 and later; older
// kernels pin every registration for writing and refuse such a mapping
// again, while a private read-only mapping registers there by
// copy-on-write), and then serves
// peers' reads and this process's sends but cannot be an RDMA READ's
// destination. It returns the access registered and reg's result; the
// error is the first attempt's.
func registerWith[M any](want access, reg func(access) (M, error)) (M, access, error) {
	m, err := reg(want)
	if err == nil || !errors.Is(err, syscall.EFAULT) || !want.has(accLocalWrite) || want.has(accRemoteWrite) {
		return m, want, err
	}
	less := want &^ accLocalWrite
	if m2, err2 := reg(less); err2 == nil {
		return m2, less, nil
	}
	return m, want, err
}

func (r region) covers(addr, length uint64) bool {
	return addr >= r.addr && addr-r.addr <= r.length && length <= r.length-(addr-r.addr)
}

// regionCache holds registered regions. Regions may overlap (verbs allows
// registering memory twice); lookups are linear, which suits the handful
// of large buffers an engine registers.
type regionCache struct {
	mu struct {
		sync.Mutex
		regions []region
	}
}

// find returns a region covering [addr, addr+length) that allows at
// least need and nothing excluded(need) forbids.
func (c *regionCache) find(addr, length uint64, need access) (region, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.mu.regions {
		if r.covers(addr, length) && r.access.has(need) && r.access&excluded(need) == 0 {
			return r, true
		}
	}
	return region{}, false
}

// add inserts r unless an equivalent region (covering r's range with at
// least its access, and no remote write where r has none while granting
// remote reads) is already present; then it returns that one and false,
// and the caller releases r.
func (c *regionCache) add(r region) (region, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.mu.regions {
		if e.covers(r.addr, r.length) && e.access.has(r.access) && e.access&excluded(r.access) == 0 {
			return e, false
		}
	}
	c.mu.regions = append(c.mu.regions, r)
	return r, true
}

// removeOverlapping drops and returns every region overlapping [addr,
// addr+length).
func (c *regionCache) removeOverlapping(addr, length uint64) []region {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []region
	keep := c.mu.regions[:0]
	for _, r := range c.mu.regions {
		if r.addr < addr+length && addr < r.addr+r.length {
			out = append(out, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(c.mu.regions[len(keep):])
	c.mu.regions = keep
	return out
}

// removeAll empties the cache and returns what it held.
func (c *regionCache) removeAll() []region {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.mu.regions
	c.mu.regions = nil
	return out
}

// peerRegion returns the peer region covering [addr, addr+n) that an op
// goes to: from cache (an initiator's rkeys of one peer), else through
// fetch (the target's opMR answer, checked), then cached. A WRITE to a
// region cached read-only drops the cached regions overlapping it and
// asks again once, since
// the target may have registered the buffer writable since. Errors:
// fetch's; transfer.ErrRejected (wrapped) for a WRITE to a region the
// target registered read-only.
func peerRegion(cache *regionCache, op transfer.Opcode, addr, n uint64, fetch func() (region, error)) (region, error) {
	r, ok := cache.find(addr, n, 0)
	if ok && op == transfer.Write && !r.access.has(accRemoteWrite) {
		cache.removeOverlapping(r.addr, r.length)
		ok = false
	}
	if !ok {
		fetched, err := fetch()
		if err != nil {
			return region{}, err
		}
		r, _ = cache.add(fetched)
	}
	if op == transfer.Write && !r.access.has(accRemoteWrite) {
		return region{}, fmt.Errorf("%w: rdma: the target registered [%#x,+%d) read-only", transfer.ErrRejected, r.addr, r.length)
	}
	return r, nil
}

// The engine drops this transport's registrations of a buffer it
// unregisters (both builds).
var _ transfer.MemoryDeregisterer = (*Transport)(nil)

// bufferLister is implemented by targets that can list their registered
// buffers (transfer.Registry); used to register whole buffers at once.
type bufferLister interface {
	Buffers() []transfer.Buffer
}

// registrationRange picks what to register for an access to [addr,
// addr+length), and its location: the whole registered buffer containing
// it and the buffer's Location when target can list its buffers (and, for
// remote access, resolves the whole buffer as remote-accessible), else
// exactly the range and the wildcard location "*" (any device).
func registrationRange(target transfer.Target, addr, length uint64, remote bool) (base, size uint64, location string) {
	l, ok := target.(bufferLister)
	if !ok {
		return addr, length, topology.WildcardLocation
	}
	for _, b := range l.Buffers() {
		if !(region{addr: b.Addr, length: b.Length}).covers(addr, length) {
			continue
		}
		if remote {
			if _, err := target.Resolve(b.Addr, b.Length); err != nil {
				break
			}
		}
		loc := b.Location
		if loc == "" {
			loc = topology.WildcardLocation
		}
		return b.Addr, b.Length, loc
	}
	return addr, length, topology.WildcardLocation
}
