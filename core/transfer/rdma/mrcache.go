package rdma

import (
	"sync"

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
	remote       bool   // registered with remote access
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

// find returns a region covering [addr, addr+length), with remote access if
// remote is set.
func (c *regionCache) find(addr, length uint64, remote bool) (region, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.mu.regions {
		if r.covers(addr, length) && (r.remote || !remote) {
			return r, true
		}
	}
	return region{}, false
}

// add inserts r unless an equivalent region (covering r's range with at
// least its access) is already present; then it returns that one and
// false, and the caller releases r.
func (c *regionCache) add(r region) (region, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.mu.regions {
		if e.covers(r.addr, r.length) && (e.remote || !r.remote) {
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
