package sglang

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/kvpool"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// Pool is what the backend needs of the KV-cache pool;
// core/store/client's Client fits.
type Pool interface {
	BatchIsExist(ctx context.Context, keys []string) ([]bool, error)
	BatchPutFromParts(ctx context.Context, keys []string, parts [][][]byte, opts *client.PutOptions) []error
	BatchGetIntoParts(ctx context.Context, keys []string, dsts [][][]byte) ([]int, []error)
	RegisterBuffer(ctx context.Context, buf []byte) error
	UnregisterBuffer(ctx context.Context, buf []byte) error
	RemoveByRegex(ctx context.Context, expr string, force bool) (int, error)
}

// Stats are a backend's counters since the previous TakeStats. Pages are
// SGLang pages (K and V of one page count once); seconds are summed call
// durations.
type Stats struct {
	PrefetchPages, BackupPages uint64
	PrefetchBytes, BackupBytes uint64
	PrefetchSeconds            float64
	BackupSeconds              float64
	// FailedGets and FailedSets count pages a read or a write call
	// reported false for a reason other than absence (a page that is not
	// in the pool is a miss, not a failure); Timeouts counts calls that
	// ran out of their time bound.
	FailedGets, FailedSets, Timeouts uint64
	// ExistsCalls and ExistsErrors count batch_exists calls and those
	// that failed (answered 0).
	ExistsCalls, ExistsErrors uint64
}

// Backend is the Go side of one SGLang HiCache storage backend (one per
// scheduler process, i.e. per TP/PP/CP rank): it decorates SGLang's page
// hashes into pool keys (Settings.Namespace; MHA pages are two objects,
// "/k" and "/v", MLA pages one, "/kv"), and moves pages between the
// registered host KV pool and the pool with no copy. Every data call is
// bounded in time (Settings) and reports per-page success; nothing it
// returns is meant to be raised into SGLang's threads. Safe for
// concurrent use.
type Backend struct {
	s      Settings
	pool   Pool
	closer func() error

	// plainMu serialises the plain calls, which register their caller's
	// buffers for the duration of the call.
	plainMu sync.Mutex

	mu sync.Mutex
	// Guarded by mu: set once by RegisterHostPool.
	ns     kvpool.Namespace
	prefix string
	geom   Geometry
	host   []byte
	// Guarded by mu.
	stats   Stats
	lastErr string
	closed  bool
}

// New makes a backend over an open pool; closer (may be nil) is called by
// Close after the host pool is unregistered. Errors: ErrBadConfig from
// Settings validation.
func New(s Settings, pool Pool, closer func() error) (*Backend, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: no pool", ErrBadConfig)
	}
	return &Backend{s: s, pool: pool, closer: closer}, nil
}

// Open loads the pool settings (Settings.PoolConfig with env; nil means
// the process environment), opens a store client within
// Settings.ConnectTimeout and makes the backend; notes are the config
// loader's remarks for SGLang's log. Errors: ErrBadConfig for settings,
// poolclient.Open's (the pool unreachable, an unsupported protocol).
func Open(ctx context.Context, s Settings, env map[string]string) (*Backend, []string, error) {
	if err := s.validate(); err != nil {
		return nil, nil, err
	}
	pc, notes, err := s.PoolConfig(env)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	p, err := poolclient.Open(ctx, pc, poolclient.Options{Host: s.Host, Env: env, Timeout: s.ConnectTimeout})
	if err != nil {
		return nil, notes, fmt.Errorf("sglang: open the pool at %s: %w", pc.MasterServerAddress, err)
	}
	b, err := New(s, p, p.Close)
	if err != nil {
		p.Close()
		return nil, notes, err
	}
	return b, notes, nil
}

// Settings returns the backend's settings.
func (b *Backend) Settings() Settings { return b.s }

// RegisterHostPool registers the host KV pool buf (the whole kv_buffer of
// an MHATokenToKVPoolHost or MLATokenToKVPoolHost, off the Go heap, valid
// until Close) with the pool client for zero-copy transfers, and fixes
// the key namespace from its geometry. Once only. Errors: ErrBadLayout,
// ErrBadConfig (geometry), the client's registration error.
// Mirrors register_mem_pool_host.
func (b *Backend) RegisterHostPool(ctx context.Context, g Geometry, buf []byte) error {
	ns, err := b.s.Namespace(g)
	if err != nil {
		return err
	}
	if len(buf) == 0 {
		return fmt.Errorf("%w: empty host pool buffer", ErrBadConfig)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("sglang: register_mem_pool_host on a closed backend")
	case b.host != nil:
		return fmt.Errorf("%w: register_mem_pool_host called twice (a host pool of %d bytes is registered)", ErrBadConfig, len(b.host))
	}
	if err := b.pool.RegisterBuffer(ctx, buf); err != nil {
		return fmt.Errorf("sglang: register the %d-byte host pool: %w", len(buf), err)
	}
	b.ns, b.prefix, b.geom, b.host = ns, ns.Prefix(), g, buf
	return nil
}

// Namespace returns the key namespace fixed by RegisterHostPool and
// whether one is.
func (b *Backend) Namespace() (kvpool.Namespace, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ns, b.host != nil
}

// Key suffixes of a page's objects.
var (
	mhaSuffixes = []string{"/k", "/v"}
	mlaSuffixes = []string{"/kv"}
)

// layout is a snapshot of what RegisterHostPool fixed.
type layout struct {
	prefix   string
	geom     Geometry
	host     []byte
	suffixes []string
}

func (b *Backend) layout() (layout, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return layout{}, fmt.Errorf("sglang: backend closed")
	}
	if b.host == nil {
		return layout{}, ErrNoHostPool
	}
	l := layout{prefix: b.prefix, geom: b.geom, host: b.host, suffixes: mhaSuffixes}
	if b.s.MLA {
		l.suffixes = mlaSuffixes
	}
	return l, nil
}

// keys are the object keys of pages ids, page after page.
func (l layout) keys(ids []string) ([]string, error) {
	out := make([]string, 0, len(ids)*len(l.suffixes))
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%w: keys[%d] is empty", ErrBadLayout, i)
		}
		for _, s := range l.suffixes {
			out = append(out, kvpool.PrefixedIDKey(l.prefix, id, s))
		}
	}
	return out, nil
}

// Keys returns the pool keys of SGLang page hashes ids, K then V per
// page for MHA, one per page for MLA. Errors: ErrNoHostPool before
// RegisterHostPool.
func (b *Backend) Keys(ids []string) ([]string, error) {
	l, err := b.layout()
	if err != nil {
		return nil, err
	}
	return l.keys(ids)
}

// objects groups parts (len(ids)*perPage buffers, get_page_buffer_meta's
// order) into the scatter lists of each page's objects: for MHA entry j of
// a page belongs to K when j is even and to V when odd (page-first
// layouts give K, V; layer_first gives K0, V0, K1, V1, ...), for MLA every
// entry of a page belongs to its one object. inHost requires every part
// inside the registered host pool; each page's parts must add up to its
// PageBytes. Errors: ErrBadLayout naming the page.
func (l layout) objects(n int, parts [][]byte, perPage int, inHost bool) ([][][]byte, error) {
	objs := len(l.suffixes)
	switch {
	case perPage <= 0 || len(parts) != n*perPage:
		return nil, fmt.Errorf("%w: %d buffers for %d pages (%d per page)", ErrBadLayout, len(parts), n, perPage)
	case perPage%objs != 0:
		return nil, fmt.Errorf("%w: %d buffers per page, not a multiple of the %d objects of a page", ErrBadLayout, perPage, objs)
	}
	hostLo := memory.AddrOf(l.host)
	hostHi := hostLo + uint64(len(l.host))
	out := make([][][]byte, n*objs)
	flat := make([][]byte, 0, len(parts)) // one backing array for every object's list
	for p := range n {
		var total int64
		for o := range objs {
			start := len(flat)
			for j := o; j < perPage; j += objs {
				part := parts[p*perPage+j]
				if len(part) == 0 {
					return nil, fmt.Errorf("%w: page %d: buffer %d is empty", ErrBadLayout, p, j)
				}
				if inHost {
					a := memory.AddrOf(part)
					if a < hostLo || a+uint64(len(part)) > hostHi {
						return nil, fmt.Errorf("%w: page %d: buffer %d [%#x,+%d) is outside the registered host pool [%#x,+%d)", ErrBadLayout, p, j, a, len(part), hostLo, len(l.host))
					}
				}
				total += int64(len(part))
				flat = append(flat, part)
			}
			out[p*objs+o] = flat[start:len(flat):len(flat)]
		}
		if total != l.geom.PageBytes {
			return nil, fmt.Errorf("%w: page %d: buffers of %d bytes, a page of this host pool is %d", ErrBadLayout, p, total, l.geom.PageBytes)
		}
	}
	return out, nil
}

// getTimeout is the bound of a read or existence call for n pages:
// GetTimeoutBase + GetTimeoutPerKiToken per 1,024 tokens.
func (b *Backend) getTimeout(n int, g Geometry) time.Duration {
	tokens := float64(n * g.PageSize)
	return b.s.GetTimeoutBase + time.Duration(float64(b.s.GetTimeoutPerKiToken)*tokens/1024)
}

// BatchExists returns how many of the pages ids, from the first, are in
// the pool with every object (K and V for MHA): SGLang's batch_exists.
// One existence RPC, bounded by the read timeout. Errors (counted, the
// shim answers 0): ErrNoHostPool, the pool's.
func (b *Backend) BatchExists(ctx context.Context, ids []string) (int, error) {
	l, err := b.layout()
	if err != nil {
		return 0, err
	}
	b.count(func(s *Stats) { s.ExistsCalls++ })
	if len(ids) == 0 {
		return 0, nil
	}
	keys, err := l.keys(ids)
	if err != nil {
		return 0, b.failExists(err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.getTimeout(len(ids), l.geom))
	defer cancel()
	n, err := kvpool.LongestPrefix(ctx, b.pool, keys)
	if err != nil {
		if ctx.Err() != nil {
			b.count(func(s *Stats) { s.Timeouts++ })
		}
		return 0, b.failExists(err)
	}
	return n / len(l.suffixes), nil
}

func (b *Backend) failExists(err error) error {
	b.count(func(s *Stats) { s.ExistsErrors++ })
	b.noteErr("batch_exists", err)
	return err
}

// BatchGet reads pages ids into the host pool (batch_get_v1): parts are
// get_page_buffer_meta's buffers, perPage per page, each inside the
// registered host pool. ok[i] is true when every object of page i was
// read in full. A page that is absent is a miss; other per-page failures
// are counted (Stats.FailedGets). The call is bounded by the read
// timeout; pages not read by then are false. Errors (for the whole call,
// every page false): ErrNoHostPool, ErrBadLayout.
func (b *Backend) BatchGet(ctx context.Context, ids []string, parts [][]byte, perPage int) ([]bool, error) {
	return b.get(ctx, ids, parts, perPage, true)
}

// prepare is the common start of a read (get) or write call: the layout,
// the object keys and the scatter lists of pages ids. keys is nil (with
// a nil error) when there is nothing to do; a bad input fails every page
// (counted).
func (b *Backend) prepare(ids []string, parts [][]byte, perPage int, inHost, get bool) (l layout, keys []string, objs [][][]byte, err error) {
	if l, err = b.layout(); err != nil || len(ids) == 0 {
		return l, nil, nil, err
	}
	what := "batch_set"
	if get {
		what = "batch_get"
	}
	if keys, err = l.keys(ids); err == nil {
		objs, err = l.objects(len(ids), parts, perPage, inHost)
	}
	if err != nil {
		return l, nil, nil, b.failCall(what, err, len(ids), get)
	}
	return l, keys, objs, nil
}

func (b *Backend) get(ctx context.Context, ids []string, parts [][]byte, perPage int, inHost bool) ([]bool, error) {
	ok := make([]bool, len(ids))
	l, keys, dsts, err := b.prepare(ids, parts, perPage, inHost, true)
	if err != nil || keys == nil {
		return ok, err
	}
	t := tally{start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, b.getTimeout(len(ids), l.geom))
	defer cancel()
	got, errs := b.pool.BatchGetIntoParts(ctx, keys, dsts)
	t.timedOut = ctx.Err() != nil
	objs := len(l.suffixes)
	for p := range ids {
		ok[p] = true
		var pageErr error
		for o := range objs {
			i := p*objs + o
			switch {
			case errs[i] != nil:
				ok[p] = false
				if !errors.Is(errs[i], store.ErrObjectNotFound) && pageErr == nil {
					pageErr = fmt.Errorf("key %q: %w", keys[i], errs[i])
				}
			case got[i] != partsLen(dsts[i]):
				ok[p] = false
				if pageErr == nil {
					pageErr = fmt.Errorf("%w: key %q holds %d bytes, the page object is %d", ErrBadLayout, keys[i], got[i], partsLen(dsts[i]))
				}
			}
		}
		t.page(ok[p], uint64(l.geom.PageBytes), pageErr) // a miss (no pageErr) is no failure
	}
	b.record("batch_get", true, t)
	return ok, nil
}

// BatchSet writes pages ids from the host pool (batch_set_v1), buffers as
// for BatchGet. Objects already in the pool are not written again and
// count as written (put-if-absent; a concurrent identical put from
// another instance is success too). ok[i] is true when page i is entirely
// in the pool afterwards. On an MLA rank other than TP rank 0 nothing is
// written (one writer per page, as SGLang's backup_skip): ok[i] says
// whether page i is already there. Bounded by Settings.SetTimeout; pages
// not written by then are false. Errors (whole call, every page false):
// ErrNoHostPool, ErrBadLayout.
func (b *Backend) BatchSet(ctx context.Context, ids []string, parts [][]byte, perPage int) ([]bool, error) {
	return b.set(ctx, ids, parts, perPage, true)
}

func (b *Backend) set(ctx context.Context, ids []string, parts [][]byte, perPage int, inHost bool) ([]bool, error) {
	ok := make([]bool, len(ids))
	l, keys, srcs, err := b.prepare(ids, parts, perPage, inHost, false)
	if err != nil || keys == nil {
		return ok, err
	}
	objs := len(l.suffixes)
	t := tally{start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, b.s.SetTimeout)
	defer cancel()
	var errs []error
	if b.s.Writer() {
		errs = b.pool.BatchPutFromParts(ctx, keys, srcs, nil)
	} else {
		found, err := b.pool.BatchIsExist(ctx, keys)
		errs = make([]error, len(keys))
		for i := range keys {
			switch {
			case err != nil:
				errs[i] = err
			case !found[i]:
				errs[i] = fmt.Errorf("%w: not written: MLA pages are written by TP rank 0 only (this is rank %d)", store.ErrObjectNotFound, b.s.TPRank)
			}
		}
	}
	t.timedOut = ctx.Err() != nil
	for p := range ids {
		ok[p] = true
		var pageErr error
		for o := range objs {
			if e := errs[p*objs+o]; e != nil {
				ok[p] = false
				if pageErr == nil {
					pageErr = fmt.Errorf("key %q: %w", keys[p*objs+o], e)
				}
			}
		}
		t.page(ok[p], uint64(l.geom.PageBytes), pageErr)
	}
	b.record("batch_set", false, t)
	return ok, nil
}

// tally is one data call's outcome, for Stats.
type tally struct {
	start                time.Time
	pages, bytes, failed uint64
	timedOut             bool
	firstErr             error
}

// page counts one page: moved (bytes of it), failed (err), or neither (a
// miss).
func (t *tally) page(ok bool, bytes uint64, err error) {
	switch {
	case ok:
		t.pages++
		t.bytes += bytes
	case err != nil:
		t.failed++
		if t.firstErr == nil {
			t.firstErr = err
		}
	}
}

// record adds t to the prefetch (get) or backup counters and keeps its
// first failure for TakeLastError.
func (b *Backend) record(what string, get bool, t tally) {
	secs := time.Since(t.start).Seconds()
	b.count(func(s *Stats) {
		if get {
			s.PrefetchPages += t.pages
			s.PrefetchBytes += t.bytes
			s.PrefetchSeconds += secs
			s.FailedGets += t.failed
		} else {
			s.BackupPages += t.pages
			s.BackupBytes += t.bytes
			s.BackupSeconds += secs
			s.FailedSets += t.failed
		}
		if t.timedOut {
			s.Timeouts++
		}
	})
	if t.firstErr != nil {
		b.noteErr(what, t.firstErr)
	}
}

// GetPages reads pages ids into caller buffers that need not lie in the
// host pool (SGLang's plain get/batch_get: one flat page tensor per page,
// K then V for MHA): pages[i] is split into the page's objects (halves
// for MHA) and registered with the pool client for the call. Results and
// errors as BatchGet; a buffer that cannot be registered (it overlaps a
// registered one other than the host pool) fails the call.
func (b *Backend) GetPages(ctx context.Context, ids []string, pages [][]byte) ([]bool, error) {
	return b.plain(ctx, ids, pages, b.get)
}

// SetPages writes pages ids from caller buffers (SGLang's plain
// set/batch_set; see GetPages). Results and errors as BatchSet.
func (b *Backend) SetPages(ctx context.Context, ids []string, pages [][]byte) ([]bool, error) {
	return b.plain(ctx, ids, pages, b.set)
}

type pageCall func(ctx context.Context, ids []string, parts [][]byte, perPage int, inHost bool) ([]bool, error)

func (b *Backend) plain(ctx context.Context, ids []string, pages [][]byte, call pageCall) ([]bool, error) {
	ok := make([]bool, len(ids))
	l, err := b.layout()
	if err != nil {
		return ok, err
	}
	if len(pages) != len(ids) {
		return ok, fmt.Errorf("%w: %d page buffers for %d keys", ErrBadLayout, len(pages), len(ids))
	}
	objs := len(l.suffixes)
	parts := make([][]byte, 0, len(ids)*objs)
	for i, pg := range pages {
		if int64(len(pg)) != l.geom.PageBytes {
			return ok, fmt.Errorf("%w: page %d: a %d-byte buffer, a page of this host pool is %d bytes", ErrBadLayout, i, len(pg), l.geom.PageBytes)
		}
		if objs == 1 {
			parts = append(parts, pg)
		} else {
			parts = append(parts, pg[:len(pg)/2:len(pg)/2], pg[len(pg)/2:])
		}
	}
	b.plainMu.Lock()
	defer b.plainMu.Unlock()
	hostLo := memory.AddrOf(l.host)
	hostHi := hostLo + uint64(len(l.host))
	var registered [][]byte
	defer func() {
		for _, r := range registered {
			_ = b.pool.UnregisterBuffer(context.Background(), r)
		}
	}()
	for i, pg := range pages {
		if a := memory.AddrOf(pg); a >= hostLo && a+uint64(len(pg)) <= hostHi {
			continue // a view of the host pool: registered already
		}
		if err := b.pool.RegisterBuffer(ctx, pg); err != nil {
			return ok, b.failCall("plain get/set", fmt.Errorf("page %d: register its %d-byte buffer: %w", i, len(pg), err), len(ids), true)
		}
		registered = append(registered, pg)
	}
	return call(ctx, ids, parts, objs, false)
}

// Clear removes every object of this backend's namespace (all pages of
// this rank's shard, model, layout and tenant; other tenants' and
// models' keys stay), leased ones included: SGLang's clear
// (/clear_hicache_storage_backend). Returns the number removed. Errors:
// ErrNoHostPool, the pool's.
func (b *Backend) Clear(ctx context.Context) (int, error) {
	l, err := b.layout()
	if err != nil {
		return 0, err
	}
	n, err := b.pool.RemoveByRegex(ctx, "^"+regexp.QuoteMeta(l.prefix), true)
	if err != nil {
		b.noteErr("clear", err)
	}
	return n, err
}

// TakeStats returns the counters since the previous call and resets them.
func (b *Backend) TakeStats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	b.stats = Stats{}
	return s
}

// TakeLastError returns the most recent failure's text since the previous
// call ("" for none) and clears it: the shim logs it.
func (b *Backend) TakeLastError() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.lastErr
	b.lastErr = ""
	return e
}

// Close unregisters the host pool and closes the pool client (its
// segment is unmounted); the host pool memory is the caller's. Data calls
// afterwards fail. Idempotent; SGLang calls it once its storage threads
// have stopped, and it must not run concurrently with a data call.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	host := b.host
	b.mu.Unlock()
	var err error
	if host != nil {
		err = b.pool.UnregisterBuffer(context.Background(), host)
	}
	if b.closer != nil {
		err = errors.Join(err, b.closer())
	}
	return err
}

func (b *Backend) count(f func(*Stats)) {
	b.mu.Lock()
	f(&b.stats)
	b.mu.Unlock()
}

func (b *Backend) noteErr(what string, err error) {
	b.mu.Lock()
	b.lastErr = what + ": " + err.Error()
	b.mu.Unlock()
}

// failCall counts a call that failed before moving anything: every page
// fails.
func (b *Backend) failCall(what string, err error, pages int, get bool) error {
	b.count(func(s *Stats) {
		if get {
			s.FailedGets += uint64(pages)
		} else {
			s.FailedSets += uint64(pages)
		}
	})
	b.noteErr(what, err)
	return err
}

func partsLen(ps [][]byte) int {
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	return n
}
