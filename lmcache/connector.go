package lmcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// Pool is what a Connector needs of the store client
// (core/store/client.Client implements it).
type Pool interface {
	BatchIsExist(ctx context.Context, keys []string) ([]bool, error)
	BatchPutFrom(ctx context.Context, keys []string, srcs [][]byte, opts *client.PutOptions) []error
	BatchGetInto(ctx context.Context, keys []string, dsts [][]byte) ([]int, []error)
	Remove(ctx context.Context, key string, force bool) error
	ListKeys(ctx context.Context, prefix string, limit int) ([]client.KeyInfo, int, error)
	RegisterBuffer(ctx context.Context, buf []byte) error
	UnregisterBuffer(ctx context.Context, buf []byte) error
	Health(ctx context.Context) error
}

// Connector is the Go half of mooncake_go.lmcache's RemoteConnector: one
// store client, LMCache's key strings (behind Settings.KeyPrefix) as pool
// keys, values the chunks' raw bytes of exact length. Lookups go through
// a runtime.Breaker: after a lookup fails (a dead or hung master), later
// lookups answer "absent" at once until a background probe gets an
// answer, so a dead pool costs LMCache one failed lookup, then misses.
// Safe for concurrent use; every call blocks (the shim runs them off
// LMCache's event loop).
type Connector struct {
	s       Settings
	pool    Pool
	closeFn func() error
	lookups *runtime.Breaker
	put     client.PutOptions
	closed  atomic.Bool

	// mu guards regions: the buffers registered with RegisterBuffer.
	mu struct {
		sync.Mutex
		regions []region
	}
	// tempMu serialises calls that register their buffers for the call
	// only (buffers outside every registered region).
	tempMu sync.Mutex
}

// Open starts a store client for s (poolclient.Open, bounded by
// s.ConnectTimeout; a scheduler mounts no segment) and returns its
// Connector. env is the process environment (libc's view inside an
// engine). Errors: poolclient.Open's (the master or the metadata server
// unreachable, ErrUnsupported for a protocol other than tcp).
func Open(ctx context.Context, s Settings, env map[string]string) (*Connector, error) {
	p, err := poolclient.Open(ctx, s.Pool, poolclient.Options{
		NoSegment: s.Role == RoleScheduler, Timeout: s.ConnectTimeout, Env: env,
	})
	if err != nil {
		return nil, fmt.Errorf("lmcache: open the pool (master %s, metadata %s): %w", s.Pool.MasterServerAddress, s.Pool.MetadataServer, err)
	}
	c := NewConnector(s, p.Client, p.Close)
	if s.Pool.PreferLocalAlloc {
		c.put.PreferredSegment = p.Name
	}
	return c, nil
}

// NewConnector returns a Connector over pool; closeFn (may be nil) runs
// in Close, after the buffers are unregistered.
func NewConnector(s Settings, pool Pool, closeFn func() error) *Connector {
	if s.LookupTimeout <= 0 {
		s.LookupTimeout = DefaultLookupTimeout
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.ReplicaNum < 1 {
		s.ReplicaNum = 1
	}
	return &Connector{
		s: s, pool: pool, closeFn: closeFn,
		lookups: runtime.NewBreaker(pool, runtime.BreakerConfig{ProbeTimeout: s.LookupTimeout, ProbeKey: s.KeyPrefix + "mooncake-go/lmcache-probe"}),
		put:     client.PutOptions{ReplicaNum: s.ReplicaNum},
	}
}

// Settings returns the connector's settings.
func (c *Connector) Settings() Settings { return c.s }

func (c *Connector) ctx(lookup bool) (context.Context, context.CancelFunc) {
	if lookup {
		return context.WithTimeout(context.Background(), c.s.LookupTimeout)
	}
	return context.WithTimeout(context.Background(), c.s.Timeout)
}

func (c *Connector) poolKeys(keys []string) []string {
	if c.s.KeyPrefix == "" {
		return keys
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = c.s.KeyPrefix + k
	}
	return out
}

func (c *Connector) check() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Exists reports whether key (an LMCache key string) can be read now.
// Errors: the pool's for the lookup that finds it not answering (then
// lookups miss at once, with no error, until it answers), ErrClosed. A
// caller maps an error to "absent", never to a hit. Mirrors
// RemoteConnector.exists.
func (c *Connector) Exists(key string) (bool, error) {
	n, err := c.BatchedContains([]string{key})
	return n == 1, err
}

// BatchedContains returns how many of keys exist from the first on (the
// leading run of hits; LMCache's prefix lookup) with one pool call for
// all. The master grants found keys a lease, which keeps them readable
// for the load that follows (LMCache's pin). Errors as Exists. Mirrors
// RemoteConnector.batched_async_contains / batched_contains.
func (c *Connector) BatchedContains(keys []string) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	ctx, cancel := c.ctx(true)
	defer cancel()
	found, err := c.lookups.BatchIsExist(ctx, c.poolKeys(keys))
	if err != nil {
		return 0, err
	}
	n := 0
	for n < len(found) && found[n] {
		n++
	}
	return n, nil
}

// BatchedPut stores srcs[i] (the chunk's bytes, exactly as long as the
// value) under keys[i]; one error per key (nil = stored; a key that
// exists already keeps its value, as upstream's put). The sources are
// read completely before it returns. Sources inside a registered buffer
// move with no copy; others are registered for the call. Errors per key:
// the store's (core/store codes), ErrClosed. Mirrors
// RemoteConnector.batched_put (the shim never releases the memory
// objects: LMCache does).
func (c *Connector) BatchedPut(keys []string, srcs [][]byte) []error {
	errs := make([]error, len(keys))
	if len(srcs) != len(keys) {
		return fillErr(errs, fmt.Errorf("lmcache: %d values for %d keys", len(srcs), len(keys)))
	}
	if err := c.check(); err != nil {
		return fillErr(errs, err)
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	idx, release := c.registered(ctx, srcs, errs)
	defer release()
	if len(idx) == 0 {
		return errs
	}
	ks, bufs := pick(c.poolKeys(keys), srcs, idx)
	for j, err := range c.pool.BatchPutFrom(ctx, ks, bufs, &c.put) {
		errs[idx[j]] = err
	}
	return errs
}

// BatchedGet reads keys[i] into dsts[i] (a memory object's buffer, at
// least the value's length) and returns the bytes read per key (the
// exact stored length: a partial chunk reads less than len(dsts[i])) or
// an error per key: OBJECT_NOT_FOUND, BUFFER_OVERFLOW (dst too small),
// TRANSFER_FAIL, LEASE_EXPIRED, RPC_FAIL (core/store codes), ErrClosed.
// Destinations inside a registered buffer are written with no copy;
// others are registered for the call. Mirrors RemoteConnector.batched_get.
func (c *Connector) BatchedGet(keys []string, dsts [][]byte) ([]int, []error) {
	n := make([]int, len(keys))
	errs := make([]error, len(keys))
	if len(dsts) != len(keys) {
		return n, fillErr(errs, fmt.Errorf("lmcache: %d buffers for %d keys", len(dsts), len(keys)))
	}
	if err := c.check(); err != nil {
		return n, fillErr(errs, err)
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	idx, release := c.registered(ctx, dsts, errs)
	defer release()
	if len(idx) == 0 {
		return n, errs
	}
	ks, bufs := pick(c.poolKeys(keys), dsts, idx)
	got, gerrs := c.pool.BatchGetInto(ctx, ks, bufs)
	for j, i := range idx {
		n[i], errs[i] = got[j], gerrs[j]
	}
	return n, errs
}

// Remove deletes key, leased or not (LMCache removes with force).
// Errors: OBJECT_NOT_FOUND, RPC_FAIL, ErrClosed. Mirrors
// RemoteConnector.remove_sync.
func (c *Connector) Remove(key string) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	return c.pool.Remove(ctx, c.s.KeyPrefix+key, true)
}

// List returns the LMCache keys of the pool's complete objects whose key
// starts with Settings.KeyPrefix (the prefix stripped), in the master's
// order. Errors: RPC_FAIL, ErrClosed. Mirrors RemoteConnector.list.
func (c *Connector) List() ([]string, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	infos, _, err := c.pool.ListKeys(ctx, c.s.KeyPrefix, 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(infos))
	for _, k := range infos {
		if k.Complete {
			out = append(out, strings.TrimPrefix(k.Key, c.s.KeyPrefix))
		}
	}
	return out, nil
}

// Ping returns nil when the master answers. Errors: the pool's,
// ErrClosed. Mirrors RemoteConnector.ping.
func (c *Connector) Ping() error {
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := c.ctx(true)
	defer cancel()
	return c.pool.Health(ctx)
}

// RegisterBuffer registers buf (foreign memory the caller keeps mapped
// until UnregisterBuffer or Close: LMCache's pinned CPU buffer) for
// zero-copy puts and gets. Errors: the transfer engine's
// (ErrAddressOverlapped, ...), ErrClosed.
func (c *Connector) RegisterBuffer(buf []byte) error {
	if err := c.check(); err != nil {
		return err
	}
	if len(buf) == 0 {
		return errors.New("lmcache: register an empty buffer")
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	if err := c.pool.RegisterBuffer(ctx, buf); err != nil {
		return err
	}
	c.mu.Lock()
	c.mu.regions = append(c.mu.regions, newRegion(buf))
	c.mu.Unlock()
	return nil
}

// UnregisterBuffer undoes RegisterBuffer for the buffer that starts at
// addr. Errors: ErrNotRegistered (an address no RegisterBuffer gave),
// the engine's, ErrClosed.
func (c *Connector) UnregisterBuffer(addr uint64) error {
	if err := c.check(); err != nil {
		return err
	}
	c.mu.Lock()
	i := slices.IndexFunc(c.mu.regions, func(r region) bool { return r.lo == addr })
	var r region
	if i >= 0 {
		r = c.mu.regions[i]
		c.mu.regions = slices.Delete(c.mu.regions, i, i+1)
	}
	c.mu.Unlock()
	if i < 0 {
		return fmt.Errorf("%w: no buffer registered at %#x", ErrNotRegistered, addr)
	}
	ctx, cancel := c.ctx(false)
	defer cancel()
	return c.pool.UnregisterBuffer(ctx, r.buf)
}

// Close unregisters every buffer, stops the lookup probe and closes the
// store client (unmounting its segment). Later calls return ErrClosed;
// a second Close returns nil.
func (c *Connector) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.lookups.Close()
	c.mu.Lock()
	regions := c.mu.regions
	c.mu.regions = nil
	c.mu.Unlock()
	var errs []error
	ctx, cancel := c.ctx(false)
	defer cancel()
	for _, r := range regions {
		if err := c.pool.UnregisterBuffer(ctx, r.buf); err != nil {
			errs = append(errs, err)
		}
	}
	if c.closeFn != nil {
		errs = append(errs, c.closeFn())
	}
	return errors.Join(errs...)
}

// registered returns the indexes of bufs that can move now: inside a
// registered region, or inside a buffer registered for the call (release
// unregisters those). A buffer that could not be registered (it overlaps
// a registered one without lying inside it) gets its error in errs and
// is left out.
func (c *Connector) registered(ctx context.Context, bufs [][]byte, errs []error) (idx []int, release func()) {
	var missing []int
	c.mu.Lock()
	for i, b := range bufs {
		switch {
		case errs[i] != nil:
		case len(b) == 0:
			errs[i] = errors.New("lmcache: empty buffer")
		case containedIn(c.mu.regions, b):
			idx = append(idx, i)
		default:
			missing = append(missing, i)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return idx, func() {}
	}
	// Rare path (a memory object outside LMCache's registered buffer):
	// register those buffers for this call, largest first at each address
	// so that the buffers inside it need nothing more.
	c.tempMu.Lock()
	sort.Slice(missing, func(a, b int) bool {
		la, lb := memory.AddrOf(bufs[missing[a]]), memory.AddrOf(bufs[missing[b]])
		if la != lb {
			return la < lb
		}
		return len(bufs[missing[a]]) > len(bufs[missing[b]])
	})
	var temp []region
	for _, i := range missing {
		if containedIn(temp, bufs[i]) {
			idx = append(idx, i)
			continue
		}
		if err := c.pool.RegisterBuffer(ctx, bufs[i]); err != nil {
			errs[i] = fmt.Errorf("lmcache: register buffer [%#x, +%d) for the call: %w", memory.AddrOf(bufs[i]), len(bufs[i]), err)
			continue
		}
		temp = append(temp, newRegion(bufs[i]))
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx, func() {
		uctx, cancel := context.WithTimeout(context.Background(), c.s.Timeout)
		defer cancel()
		for _, r := range temp {
			_ = c.pool.UnregisterBuffer(uctx, r.buf) // nothing to tell the caller: its bytes moved
		}
		c.tempMu.Unlock()
	}
}

// region is a registered buffer and its address range [lo, hi).
type region struct {
	buf    []byte
	lo, hi uint64
}

func newRegion(b []byte) region {
	lo := memory.AddrOf(b)
	return region{buf: b, lo: lo, hi: lo + uint64(len(b))}
}

// containedIn reports whether b lies inside one of regions.
func containedIn(regions []region, b []byte) bool {
	lo := memory.AddrOf(b)
	hi := lo + uint64(len(b))
	for _, r := range regions {
		if r.lo <= lo && hi <= r.hi {
			return true
		}
	}
	return false
}

func pick(keys []string, bufs [][]byte, idx []int) ([]string, [][]byte) {
	ks := make([]string, len(idx))
	bs := make([][]byte, len(idx))
	for j, i := range idx {
		ks[j], bs[j] = keys[i], bufs[i]
	}
	return ks, bs
}

func fillErr(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
