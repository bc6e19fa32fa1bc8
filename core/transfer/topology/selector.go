package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// ErrNoDevice is returned by Selector.Pick and Selector.PickRemote when
// neither the location's entry nor the wildcard entry ("*") of the matrix
// names any device (upstream: ERR_DEVICE_NOT_FOUND). It is a topology
// error, not transfer.ErrUnsupported: a transport that opened devices
// always has a non-empty wildcard entry, so it means a broken or empty
// (peer) matrix.
var ErrNoDevice = errors.New("topology: no device for location")

// SelectorOptions are the optional knobs of a Selector.
type SelectorOptions struct {
	// RoundRobin makes first attempts (retry 0) cycle through the
	// location's preferred devices in order instead of drawing one at
	// random (upstream MC_PATH_ROUNDROBIN). Each location has its own
	// counter, shared by all goroutines.
	RoundRobin bool
	// Rand is the random source for first attempts when RoundRobin is
	// off; nil uses math/rand/v2's goroutine-safe global generator. A
	// given source is only used under the Selector's lock, so it needs no
	// locking of its own. Tests pass a seeded rand.NewPCG.
	Rand rand.Source
}

// Selector picks, per slice, the device (NIC) that carries it, from a
// priority matrix (spec §1.7, upstream Topology::selectDevice and
// RdmaTransport::selectDevice):
//
//   - the entry used is the buffer location's ("cpu:0", "cuda:1"); when the
//     matrix has no entry for it, or the entry lists no device, the
//     wildcard entry WildcardLocation ("*"), whose preferred list is every
//     device of the matrix (see Resolve);
//   - first attempt (retry 0): one of the entry's preferred devices,
//     uniformly at random or round-robin; when the preferred list is
//     empty, one of its other devices the same way;
//   - retry k >= 1: deterministically the device at index (k-1) mod
//     (|preferred|+|other|) of preferred followed by other, so successive
//     retries walk every usable device, the preferred ones first.
//
// PickRemote applies the same rule to a peer's matrix and, with
// destination affinity (upstream MC_ENABLE_DEST_DEVICE_AFFINITY), returns
// the local device's name whenever the peer's entry lists it.
//
// Concurrency: safe for concurrent use. The matrix is copied at
// construction and never modified.
type Selector struct {
	matrix     map[string][2][]string // resolved: has a "*" entry unless the matrix names no device
	roundRobin bool
	counters   map[string]*atomic.Uint64 // round-robin counter per location of matrix; fixed after construction

	mu struct {
		sync.Mutex
		src    rand.Source               // nil: the global generator
		remote map[string]*atomic.Uint64 // PickRemote round-robin counters by location, created on first use
	}
}

// NewSelector returns a Selector over matrix (as PriorityMatrix or
// ParseMatrix return it); matrix is copied, with the wildcard entry added
// (Resolve). An empty or nil matrix is allowed: every Pick then fails with
// ErrNoDevice.
func NewSelector(matrix map[string][2][]string, opts SelectorOptions) *Selector {
	s := &Selector{matrix: Resolve(matrix), roundRobin: opts.RoundRobin}
	s.counters = make(map[string]*atomic.Uint64, len(s.matrix))
	for loc := range s.matrix {
		s.counters[loc] = new(atomic.Uint64)
	}
	s.mu.src = opts.Rand
	s.mu.remote = map[string]*atomic.Uint64{}
	return s
}

// Resolve returns a copy of matrix with the wildcard entry "*" filled in,
// as upstream's Topology::resolve: its preferred list is every device the
// matrix names, in order of first appearance walking the locations in name
// order (preferred list, then other list, of each), and its other list is
// empty. A "*" entry already naming devices is kept as given. The device
// lists are shared with matrix, not copied; neither is modified. With no
// device anywhere no "*" entry is added.
func Resolve(matrix map[string][2][]string) map[string][2][]string {
	out := make(map[string][2][]string, len(matrix)+1)
	for loc, e := range matrix {
		out[loc] = e
	}
	if hasDevice(out[WildcardLocation]) {
		return out
	}
	if all := allDevices(matrix); len(all) > 0 {
		out[WildcardLocation] = [2][]string{all, {}}
	}
	return out
}

// Devices returns every device of the selector's matrix: the wildcard
// entry's preferred list (see Resolve). The slice is a copy.
func (s *Selector) Devices() []string {
	return slices.Clone(s.matrix[WildcardLocation][0])
}

// Pick returns the device for one slice of a buffer at location on attempt
// retry (0: first attempt; k >= 1: k-th retry), by the rule in the type
// documentation. A negative retry counts as 0. Errors: ErrNoDevice
// (wrapped, naming the location) when neither the location's entry nor the
// wildcard entry names a device.
func (s *Selector) Pick(location string, retry int) (string, error) {
	e, key, ok := entryFor(s.matrix, location)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrNoDevice, location)
	}
	var ctr *atomic.Uint64
	if s.roundRobin && retry <= 0 {
		ctr = s.counters[key]
	}
	return s.choose(e, retry, ctr), nil
}

// PickRemote returns the peer device for one slice of a peer buffer at
// location, from the peer's published matrix, on attempt retry. The entry
// is found as in Pick (the location's, else the wildcard entry, computed
// here when peer has none: pass a Resolve'd matrix to save that work per
// call). With destAffinity and localDevice listed in that entry (preferred
// or other), localDevice is returned at every attempt (upstream's
// selectDevice with a hint, for rail-optimised fabrics where NIC i only
// reaches the peer's NIC i); otherwise the rule of Pick applies, with
// round-robin counters of its own per location. Errors: ErrNoDevice
// (wrapped) as Pick.
func (s *Selector) PickRemote(peer map[string][2][]string, location string, retry int, localDevice string, destAffinity bool) (string, error) {
	e, key, ok := entryFor(peer, location)
	if !ok {
		all := allDevices(peer)
		if len(all) == 0 {
			return "", fmt.Errorf("%w: %q in the peer's matrix", ErrNoDevice, location)
		}
		e, key = [2][]string{all, {}}, WildcardLocation
	}
	if destAffinity && localDevice != "" && (slices.Contains(e[0], localDevice) || slices.Contains(e[1], localDevice)) {
		return localDevice, nil
	}
	var ctr *atomic.Uint64
	if s.roundRobin && retry <= 0 {
		s.mu.Lock()
		ctr = s.mu.remote[key]
		if ctr == nil {
			ctr = new(atomic.Uint64)
			s.mu.remote[key] = ctr
		}
		s.mu.Unlock()
	}
	return s.choose(e, retry, ctr), nil
}

// choose applies the rule to a non-empty entry; ctr is the round-robin
// counter for a first attempt, nil to draw at random.
func (s *Selector) choose(e [2][]string, retry int, ctr *atomic.Uint64) string {
	pref, other := e[0], e[1]
	if retry <= 0 {
		list := pref
		if len(list) == 0 {
			list = other
		}
		var r uint64
		if ctr != nil {
			r = ctr.Add(1) - 1
		} else {
			r = s.random()
		}
		return list[r%uint64(len(list))]
	}
	i := (retry - 1) % (len(pref) + len(other))
	if i < len(pref) {
		return pref[i]
	}
	return other[i-len(pref)]
}

func (s *Selector) random() uint64 {
	s.mu.Lock()
	src := s.mu.src
	if src == nil {
		s.mu.Unlock()
		return rand.Uint64()
	}
	r := src.Uint64()
	s.mu.Unlock()
	return r
}

// entryFor returns the entry used for location and its key: the
// location's own when it names a device, else the wildcard entry when
// that does; ok is false when neither does.
func entryFor(m map[string][2][]string, location string) (e [2][]string, key string, ok bool) {
	if e, ok := m[location]; ok && hasDevice(e) {
		return e, location, true
	}
	if e, ok := m[WildcardLocation]; ok && hasDevice(e) {
		return e, WildcardLocation, true
	}
	return e, "", false
}

func hasDevice(e [2][]string) bool { return len(e[0])+len(e[1]) > 0 }

// allDevices lists every device of m once, in order of first appearance
// walking the locations in name order, preferred before other.
func allDevices(m map[string][2][]string) []string {
	locs := make([]string, 0, len(m))
	for loc := range m {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	var all []string
	seen := map[string]bool{}
	for _, loc := range locs {
		for _, list := range m[loc] {
			for _, d := range list {
				if !seen[d] {
					seen[d] = true
					all = append(all, d)
				}
			}
		}
	}
	return all
}
