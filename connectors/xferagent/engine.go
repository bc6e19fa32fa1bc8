package xferagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// Errors, each named after the nixl_status_t the C ABI turns it into
// (nixl.h); match with errors.Is. Wrapped errors name what was wrong.
var (
	// ErrInvalidParam: a bad argument (NIXL_ERR_INVALID_PARAM).
	ErrInvalidParam = transfer.ErrInvalidArgument
	// ErrNotFound: an unknown agent, metadata id or request (NIXL_ERR_NOT_FOUND).
	ErrNotFound = errors.New("agent: not found")
	// ErrMismatch: a blob that is not ours or is corrupt (NIXL_ERR_MISMATCH).
	ErrMismatch = errors.New("agent: mismatch")
	// ErrNotAllowed: e.g. a peer's connection info changed (NIXL_ERR_NOT_ALLOWED).
	ErrNotAllowed = errors.New("agent: not allowed")
	// ErrRepostActive: a post or release of a request still in flight (NIXL_ERR_REPOST_ACTIVE).
	ErrRepostActive = errors.New("agent: request still in flight")
	// ErrRemoteDisconnect: the peer cannot be reached (NIXL_ERR_REMOTE_DISCONNECT).
	ErrRemoteDisconnect = errors.New("agent: remote disconnected")
	// ErrUnsupported: a memory type or feature not built or not present (NIXL_ERR_NOT_SUPPORTED).
	ErrUnsupported = transfer.ErrUnsupported
)

// Memory types, as nixl_mem_t.
const (
	MemDRAM = 0
	MemVRAM = 1
	MemBLK  = 2
	MemOBJ  = 3
	MemFILE = 4
)

// Capability bits of Caps (nixl.h MC_NIXL_CAP_*), plus bit 8+m for each
// supported memory type m.
const (
	CapRemote = 1
	CapLocal  = 2
	CapNotif  = 4
)

// Parameter names an Engine accepts (nixl_b_params_t keys; NIXL's
// get_plugin_params lists them with their defaults).
const (
	// ParamIPAddr is the address the engine listens on and publishes to
	// peers in its connection info; default "": the first non-loopback
	// IPv4 address of an interface that is up, else 127.0.0.1 (as NIXL's
	// own Mooncake plugin).
	ParamIPAddr = "ip_addr"
	// ParamRequestTimeoutMs bounds one posted transfer end to end, in ms;
	// default 60000. A post past it fails (checkXfer: NIXL_ERR_BACKEND).
	ParamRequestTimeoutMs = "request_timeout_ms"
	// ParamWorkers bounds the descriptors moving at once; default 16.
	ParamWorkers = "workers"
	// ParamCMA chooses the same-host path: "auto" (default) moves DRAM
	// by cross-memory attach to a peer process that proved it is on this
	// host and reachable (see cma.go), else over tcp; "off": always tcp.
	ParamCMA = "cma"
)

// DefaultParams are the backend options NIXL reports for this backend
// (get_backend_options), keys sorted.
func DefaultParams() (keys []string, values map[string]string) {
	values = map[string]string{ParamCMA: "auto", ParamIPAddr: "", ParamRequestTimeoutMs: "60000", ParamWorkers: "16"}
	keys = []string{ParamCMA, ParamIPAddr, ParamRequestTimeoutMs, ParamWorkers}
	return keys, values
}

// Config is what NIXL passes to an engine's constructor.
type Config struct {
	// Agent is the local agent's name (nixlBackendInitParams.localAgent); any bytes, not empty.
	Agent string
	// Params are the user's backend parameters (customParams); see Param*.
	Params map[string]string
	// CUDA, if set, lets the engine register VRAM; nil: VRAM is unsupported.
	CUDA transfer.DeviceRuntime
}

// Desc is one descriptor of a transfer list (nixlMetaDesc): Len bytes at
// Addr on device DevID, inside the registration or loaded metadata MD.
type Desc struct {
	Addr, Len, DevID, MD uint64
}

// Engine is one NIXL backend engine. All methods are safe for concurrent
// use (NIXL calls the data-path methods from any thread, unlocked).
type Engine struct {
	agent   string
	seg     string // transfer segment name, "<host>:<handshake port>"
	timeout time.Duration
	cuda    bool
	hs      *p2pmeta.Store
	te      *transfer.Engine
	cma     *cmaInfo // published in the connection info; nil with cma=off
	table   []byte   // the CMA table cma.addr points at (cma.go); written under mu

	mu struct {
		sync.Mutex
		next   uint64
		regs   map[uint64]*region
		mds    map[uint64]*md
		peers  map[string]*peer
		reqs   map[uint64]*request
		local  []Notif // genNotif to this engine's own agent
		closed bool
	}
	wg sync.WaitGroup // posts in flight

	cmaPosts, tcpPosts atomic.Int64 // posts by path (Paths)
}

// Paths returns how many posts to other agents went by CMA and how many
// over tcp (loopback posts count as tcp: they take the transfer engine's
// local path).
func (e *Engine) Paths() (cma, tcp int64) { return e.cmaPosts.Load(), e.tcpPosts.Load() }

// region is one registerMem.
type region struct {
	addr, n, dev uint64
	mem          int
}

// md is one loaded metadata id: a local alias of a registration (loopback)
// or a remote range of a peer agent.
type md struct {
	remote       bool
	reg          uint64 // local: the registration it aliases
	agent        string // remote: the peer
	addr, n, dev uint64
	mem          int
}

// peer is one agent whose connection info was loaded.
type peer struct {
	seg    string
	cma    *cmaInfo // from its connection info; nil: none
	cmaOK  cmaState
	id     transfer.SegmentID
	opened bool
	stale  bool // a remote md was loaded since the descriptor was read
}

// request is one prepXfer; posts reuse it.
type request struct {
	op       transfer.Opcode
	lmem     int
	rmem     int
	agent    string
	raw      bool          // PrepRaw: remote ranges carry no metadata id
	released bool          // ReleaseWhenDone: drop it when the post ends
	done     chan struct{} // closed when the current post ends
	inflight bool
	err      error
	finished bool // the last post finished (err says how)
}

// New starts an engine for cfg: a P2P handshake endpoint and a tcp data
// plane on the configured address, ports chosen by the kernel. Errors:
// ErrInvalidParam naming a bad or unknown parameter or an empty agent; the
// listeners' errors. (nixlBackendEngine constructor)
func New(cfg Config) (*Engine, error) {
	if cfg.Agent == "" {
		return nil, fmt.Errorf("%w: local agent name is empty", ErrInvalidParam)
	}
	ip, timeout, workers, useCMA := "", 60*time.Second, 16, true
	for k, v := range cfg.Params {
		switch k {
		case ParamCMA:
			switch v {
			case "auto", "":
			case "off":
				useCMA = false
			default:
				return nil, fmt.Errorf("%w: backend parameter %s=%q (want auto or off)", ErrInvalidParam, k, v)
			}
		case ParamIPAddr:
			if v != "" && net.ParseIP(v) == nil {
				return nil, fmt.Errorf("%w: backend parameter %s=%q is not an IP address", ErrInvalidParam, k, v)
			}
			ip = v
		case ParamRequestTimeoutMs:
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				return nil, fmt.Errorf("%w: backend parameter %s=%q is not a positive number of ms", ErrInvalidParam, k, v)
			}
			timeout = time.Duration(ms) * time.Millisecond
		case ParamWorkers:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 1024 {
				return nil, fmt.Errorf("%w: backend parameter %s=%q is not a count in [1, 1024]", ErrInvalidParam, k, v)
			}
			workers = n
		default:
			keys, _ := DefaultParams()
			return nil, fmt.Errorf("%w: unknown backend parameter %q (this backend takes %v)", ErrInvalidParam, k, keys)
		}
	}
	if ip == "" {
		ip = defaultIP()
	}
	hs, err := p2pmeta.Listen(net.JoinHostPort(ip, "0"), p2pmeta.WithHost(ip))
	if err != nil {
		return nil, fmt.Errorf("agent: agent %q: handshake listener on %s: %w", cfg.Agent, ip, err)
	}
	e := &Engine{agent: cfg.Agent, seg: hs.Name(), timeout: timeout, cuda: cfg.CUDA != nil, hs: hs}
	if useCMA {
		e.table = make([]byte, cmaTableLen)
		if e.cma, err = newCookie(e.table); err != nil {
			hs.Close()
			return nil, fmt.Errorf("agent: agent %q: %w", cfg.Agent, err)
		}
	}
	tr := tcp.New(tcp.Config{BindAddr: net.JoinHostPort(ip, "0"), Host: ip})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.te, err = transfer.New(ctx, transfer.Config{Name: e.seg, Metadata: hs, Transport: tr, Workers: workers, RequestTimeout: timeout, CUDA: cfg.CUDA})
	if err != nil {
		hs.Close()
		return nil, fmt.Errorf("agent: agent %q: %w", cfg.Agent, err)
	}
	e.mu.regs = map[uint64]*region{}
	e.mu.mds = map[uint64]*md{}
	e.mu.peers = map[string]*peer{}
	e.mu.reqs = map[uint64]*request{}
	return e, nil
}

// defaultIP is the first non-loopback IPv4 address of an interface that is
// up, else 127.0.0.1.
func defaultIP() string {
	ifs, _ := net.Interfaces()
	for _, it := range ifs {
		if it.Flags&net.FlagUp == 0 || it.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := it.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// Agent is the local agent's name.
func (e *Engine) Agent() string { return e.agent }

// Close stops the engine: it waits for posted transfers to end (each is
// bounded by the request timeout), then closes the transfer engine and the
// handshake endpoint. A second Close is a no-op. (destructor)
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	if e.table != nil {
		clear(e.table[:cmaCookieLen]) // initiators using CMA see the engine is gone
	}
	e.mu.Unlock()
	e.wg.Wait()
	err := e.te.Close()
	e.hs.Close()
	return err
}

// Caps returns the CapRemote|CapLocal|CapNotif bits and one bit 8+m per
// supported memory type m: DRAM, and VRAM when a CUDA runtime is present.
// (supportsRemote, supportsLocal, supportsNotif, getSupportedMems)
func (e *Engine) Caps() uint32 {
	c := uint32(CapRemote | CapLocal | CapNotif | 1<<(8+MemDRAM))
	if e.cuda {
		c |= 1 << (8 + MemVRAM)
	}
	return c
}

// ConnInfo is the connection info peers load (getConnInfo): printable,
// never empty.
func (e *Engine) ConnInfo() string { return connInfo(e.seg, e.cma) }

// id returns a fresh non-zero id (under mu).
func (e *Engine) id() uint64 {
	e.mu.next++
	return e.mu.next
}

// Register makes [addr, addr+n) of memory type mem on device dev (buf, its
// bytes, for DRAM; nil for VRAM) reachable by peers and returns its
// metadata id. Errors: ErrUnsupported for VRAM without CUDA and for BLK,
// OBJ, FILE; ErrInvalidParam for an empty range; the transfer engine's
// (ErrAddressOverlapped for a range overlapping another registration).
// (registerMem)
func (e *Engine) Register(buf []byte, addr, n, dev uint64, mem int) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("%w: registration of 0 bytes at %#x", ErrInvalidParam, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch mem {
	case MemDRAM:
		if uint64(len(buf)) != n {
			return 0, fmt.Errorf("%w: DRAM registration of %d bytes given %d", ErrInvalidParam, n, len(buf))
		}
		if err := e.te.RegisterLocalMemory(ctx, buf, "cpu:0", true); err != nil {
			return 0, fmt.Errorf("agent: register DRAM [%#x,+%d): %w", addr, n, err)
		}
	case MemVRAM:
		if !e.cuda {
			return 0, fmt.Errorf("%w: no CUDA runtime: VRAM registration needs libcudart ($MC_CUDART_PATH, else libcudart.so, .so.12, .so.11.0) and none loaded in this process (DRAM works)", ErrUnsupported)
		}
		if err := e.te.RegisterDeviceMemory(ctx, addr, n, int(dev), true); err != nil {
			return 0, fmt.Errorf("agent: register VRAM [%#x,+%d) on device %d: %w", addr, n, dev, err)
		}
	default:
		return 0, fmt.Errorf("%w: memory type %s (this backend moves DRAM, and VRAM where CUDA is present)", ErrUnsupported, memName(mem))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	id := e.id()
	e.mu.regs[id] = &region{addr: addr, n: n, dev: dev, mem: mem}
	e.syncTable()
	return id, nil
}

// syncTable rewrites the CMA table from the DRAM registrations (under mu).
func (e *Engine) syncTable() {
	if e.table == nil {
		return
	}
	regs := make([][2]uint64, 0, len(e.mu.regs))
	for _, r := range e.mu.regs {
		if r.mem == MemDRAM {
			regs = append(regs, [2]uint64{r.addr, r.n})
		}
	}
	writeTable(e.table, regs)
}

// memName names a nixl_mem_t value.
func memName(m int) string {
	switch m {
	case MemDRAM:
		return "DRAM_SEG"
	case MemVRAM:
		return "VRAM_SEG"
	case MemBLK:
		return "BLK_SEG"
	case MemOBJ:
		return "OBJ_SEG"
	case MemFILE:
		return "FILE_SEG"
	}
	return fmt.Sprintf("nixl_mem_t(%d)", m)
}

// Deregister undoes Register. Errors: ErrNotFound for an id that is not a
// live registration. (deregisterMem)
func (e *Engine) Deregister(id uint64) error {
	e.mu.Lock()
	r, ok := e.mu.regs[id]
	if ok {
		delete(e.mu.regs, id)
		e.syncTable()
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: registration %d", ErrNotFound, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.te.UnregisterLocalMemory(ctx, r.addr)
}

// PublicData is the blob a peer needs for registration id (getPublicData):
// never empty. Errors: ErrNotFound.
func (e *Engine) PublicData(id uint64) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.mu.regs[id]
	if !ok {
		return nil, fmt.Errorf("%w: registration %d", ErrNotFound, id)
	}
	return publicData(r.addr, r.n), nil
}

// LoadRemoteConnInfo records agent's connection info (loadRemoteConnInfo).
// Errors: ErrInvalidParam for an empty agent or this engine's own name;
// ErrMismatch for info that is not ours; ErrNotAllowed when agent is
// already known with other info.
func (e *Engine) LoadRemoteConnInfo(agent, info string) error {
	if agent == "" {
		return fmt.Errorf("%w: remote agent name is empty", ErrInvalidParam)
	}
	seg, cma, err := parseConnInfo(info)
	if err != nil {
		return err
	}
	if e.cma == nil {
		cma = nil // cma=off here: tcp only
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.mu.peers[agent]; ok {
		if p.seg != seg {
			return fmt.Errorf("%w: agent %q is known at %s, now given %s", ErrNotAllowed, agent, p.seg, seg)
		}
		return nil
	}
	e.mu.peers[agent] = &peer{seg: seg, cma: cma}
	return nil
}

// Connect opens the transfer segment of agent now rather than at the first
// post; this engine's own agent needs nothing. Errors: ErrNotFound for an
// agent whose connection info was never loaded; ErrRemoteDisconnect when
// the peer does not answer. (connect)
func (e *Engine) Connect(agent string) error {
	if agent == e.agent {
		return nil
	}
	_, err := e.segment(agent)
	return err
}

// segment returns the opened transfer segment of agent, opening or
// refreshing its descriptor first when needed.
func (e *Engine) segment(agent string) (transfer.SegmentID, error) {
	e.mu.Lock()
	p, ok := e.mu.peers[agent]
	if !ok {
		e.mu.Unlock()
		return 0, fmt.Errorf("%w: agent %q (its metadata was never loaded, or it was invalidated)", ErrNotFound, agent)
	}
	seg, opened, stale, id := p.seg, p.opened, p.stale, p.id
	p.stale = false
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	switch {
	case !opened:
		id, err = e.te.OpenSegment(ctx, seg)
	case stale:
		err = e.te.RefreshSegment(ctx, id)
	default:
		return id, nil
	}
	if err != nil {
		e.mu.Lock()
		if p, ok := e.mu.peers[agent]; ok && stale {
			p.stale = true
		}
		e.mu.Unlock()
		return 0, fmt.Errorf("%w: agent %q at %s: %v", ErrRemoteDisconnect, agent, seg, err)
	}
	e.mu.Lock()
	if p, ok := e.mu.peers[agent]; ok && p.seg == seg {
		p.id, p.opened = id, true
	}
	e.mu.Unlock()
	return id, nil
}

// Disconnect forgets agent: its connection info and opened segment (the
// agent then unloads its metadata ids). An unknown agent is not an error.
// (disconnect)
func (e *Engine) Disconnect(agent string) error {
	e.mu.Lock()
	p, ok := e.mu.peers[agent]
	delete(e.mu.peers, agent)
	e.mu.Unlock()
	if ok && p.opened {
		_ = e.te.CloseSegment(p.id)
	}
	return nil
}

// LoadRemoteMD turns a peer's public data blob for [addr, addr+n) on
// device dev into a metadata id (loadRemoteMD). Errors: ErrMismatch for a
// blob that is not ours or a range outside the registration it describes;
// ErrNotFound for an agent whose connection info was not loaded;
// ErrUnsupported for a memory type other than DRAM and VRAM.
func (e *Engine) LoadRemoteMD(addr, n, dev uint64, mem int, blob []byte, agent string) (uint64, error) {
	if mem != MemDRAM && mem != MemVRAM {
		return 0, fmt.Errorf("%w: remote memory type %s", ErrUnsupported, memName(mem))
	}
	ra, rn, err := parsePublicData(blob)
	if err != nil {
		return 0, err
	}
	if n == 0 || addr < ra || addr-ra > rn || n > rn-(addr-ra) {
		return 0, fmt.Errorf("%w: remote descriptor [%#x,+%d) of agent %q is not inside the registration [%#x,+%d) its public data names", ErrMismatch, addr, n, agent, ra, rn)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.mu.peers[agent]
	if !ok {
		return 0, fmt.Errorf("%w: agent %q (load its connection info first)", ErrNotFound, agent)
	}
	p.stale = true
	id := e.id()
	e.mu.mds[id] = &md{remote: true, agent: agent, addr: addr, n: n, dev: dev, mem: mem}
	return id, nil
}

// LoadLocalMD returns a new metadata id aliasing registration reg, for
// transfers of this agent to itself (loadLocalMD). Errors: ErrNotFound.
func (e *Engine) LoadLocalMD(reg uint64) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.mu.regs[reg]
	if !ok {
		return 0, fmt.Errorf("%w: registration %d", ErrNotFound, reg)
	}
	id := e.id()
	e.mu.mds[id] = &md{reg: reg, addr: r.addr, n: r.n, dev: r.dev, mem: r.mem}
	return id, nil
}

// UnloadMD forgets a metadata id; an unknown one (already unloaded, or
// aliasing a registration NIXL deregistered first) is not an error.
// (unloadMD)
func (e *Engine) UnloadMD(id uint64) error {
	e.mu.Lock()
	delete(e.mu.mds, id)
	e.mu.Unlock()
	return nil
}

// checkLists validates the descriptor pairs of a request of op between
// memory types lmem and rmem towards agent (under mu) and returns the
// transfer requests they make. Local descriptors must lie in a
// registration (or a local alias of one), remote ones in a metadata id
// loaded for agent, or, for this engine's own agent, in a local alias or
// registration. Errors: ErrInvalidParam naming the first bad descriptor.
func (e *Engine) checkLists(op int, lmem int, local []Desc, rmem int, remote []Desc, agent string) ([]transfer.Request, error) {
	return e.checkListsMode(op, lmem, local, rmem, remote, agent, false)
}

// checkListsMode is checkLists; with raw, local descriptors are found by
// range among the registrations (their MD is ignored) and remote ones are
// checked only for shape: the target (its tcp server, or its CMA table)
// checks them against its registrations at transfer time.
func (e *Engine) checkListsMode(op int, lmem int, local []Desc, rmem int, remote []Desc, agent string, raw bool) ([]transfer.Request, error) {
	if op != int(transfer.Read) && op != int(transfer.Write) {
		return nil, fmt.Errorf("%w: operation %d (want NIXL_READ 0 or NIXL_WRITE 1)", ErrInvalidParam, op)
	}
	if len(local) != len(remote) {
		return nil, fmt.Errorf("%w: %d local descriptors for %d remote ones", ErrInvalidParam, len(local), len(remote))
	}
	self := agent == e.agent
	if !self {
		if _, ok := e.mu.peers[agent]; !ok {
			return nil, fmt.Errorf("%w: agent %q (its metadata was never loaded, or it was invalidated)", ErrNotFound, agent)
		}
	}
	reqs := make([]transfer.Request, len(local))
	for i, l := range local {
		r := remote[i]
		if l.Len == 0 || l.Len != r.Len {
			return nil, fmt.Errorf("%w: descriptor %d: local length %d, remote length %d (want equal and > 0)", ErrInvalidParam, i, l.Len, r.Len)
		}
		if raw {
			l.MD = e.regFor(l, lmem)
			if self {
				r.MD = e.regFor(r, rmem)
			} else if r.Addr+r.Len < r.Addr {
				return nil, fmt.Errorf("%w: remote descriptor %d: [%#x,+%d) runs past the end of the address space", ErrInvalidParam, i, r.Addr, r.Len)
			}
		}
		if err := e.inLocal(l, lmem); err != nil {
			return nil, fmt.Errorf("%w: local descriptor %d: %v", ErrInvalidParam, i, err)
		}
		if !raw || self {
			if err := e.inRemote(r, rmem, agent, self); err != nil {
				return nil, fmt.Errorf("%w: remote descriptor %d: %v", ErrInvalidParam, i, err)
			}
		}
		reqs[i] = transfer.Request{Op: transfer.Opcode(op), Source: l.Addr, TargetOffset: r.Addr, Length: l.Len}
	}
	return reqs, nil
}

// merge joins runs of descriptor pairs that continue each other on both
// sides inside the same registrations (local[i] starts where local[i-1]
// ends, remote[i] likewise, same metadata ids) into one request each: a
// request list of contiguous KV blocks moves as a few large transfers
// instead of many small ones. reqs[i] is the request of pair i.
func merge(local, remote []Desc, reqs []transfer.Request) []transfer.Request {
	out := reqs[:0]
	for i, q := range reqs {
		if n := len(out); n > 0 && local[i].MD == local[i-1].MD && remote[i].MD == remote[i-1].MD {
			p := &out[n-1]
			if p.Source+p.Length == q.Source && p.TargetOffset+p.Length == q.TargetOffset {
				p.Length += q.Length
				continue
			}
		}
		out = append(out, q)
	}
	return out
}

// regFor returns the id of the registration holding d (memory type mem,
// device d.DevID), or 0 (under mu).
func (e *Engine) regFor(d Desc, mem int) uint64 {
	for id, r := range e.mu.regs {
		if r.mem == mem && r.dev == d.DevID && within(d.Addr, d.Len, r.addr, r.n) {
			return id
		}
	}
	return 0
}

// within reports whether [a, a+n) lies in [ra, ra+rn).
func within(a, n, ra, rn uint64) bool {
	return a >= ra && a-ra <= rn && n <= rn-(a-ra)
}

// inLocal checks a local descriptor against its registration (under mu).
func (e *Engine) inLocal(d Desc, mem int) error {
	var ra, rn, dev uint64
	var rm int
	if r, ok := e.mu.regs[d.MD]; ok {
		ra, rn, dev, rm = r.addr, r.n, r.dev, r.mem
	} else if m, ok := e.mu.mds[d.MD]; ok && !m.remote {
		if _, live := e.mu.regs[m.reg]; !live {
			return fmt.Errorf("metadata %d aliases a registration that was deregistered", d.MD)
		}
		ra, rn, dev, rm = m.addr, m.n, m.dev, m.mem
	} else {
		return fmt.Errorf("metadata %d is not a registration of this engine", d.MD)
	}
	if rm != mem || dev != d.DevID || !within(d.Addr, d.Len, ra, rn) {
		return fmt.Errorf("[%#x,+%d) %s device %d is not inside registration [%#x,+%d) %s device %d", d.Addr, d.Len, memName(mem), d.DevID, ra, rn, memName(rm), dev)
	}
	return nil
}

// inRemote checks a remote descriptor against its metadata id (under mu).
func (e *Engine) inRemote(d Desc, mem int, agent string, self bool) error {
	m, ok := e.mu.mds[d.MD]
	switch {
	case !ok && self:
		return e.inLocal(d, mem)
	case !ok:
		return fmt.Errorf("metadata %d was not loaded for agent %q", d.MD, agent)
	case self && m.remote, !self && (!m.remote || m.agent != agent):
		return fmt.Errorf("metadata %d does not belong to agent %q", d.MD, agent)
	case self:
		return e.inLocal(d, mem)
	}
	if m.mem != mem || m.dev != d.DevID || !within(d.Addr, d.Len, m.addr, m.n) {
		return fmt.Errorf("[%#x,+%d) %s device %d is not inside agent %q's [%#x,+%d) %s device %d", d.Addr, d.Len, memName(mem), d.DevID, agent, m.addr, m.n, memName(m.mem), m.dev)
	}
	return nil
}

// PrepXfer checks a request of op (Read: remote -> local; Write: local ->
// remote) moving local[i] <-> remote[i] of agent and returns its id.
// Errors: ErrInvalidParam naming the first bad descriptor; ErrNotFound for
// an unknown agent. (prepXfer)
func (e *Engine) PrepXfer(op, lmem int, local []Desc, rmem int, remote []Desc, agent string) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.checkLists(op, lmem, local, rmem, remote, agent); err != nil {
		return 0, err
	}
	id := e.id()
	e.mu.reqs[id] = &request{op: transfer.Opcode(op), lmem: lmem, rmem: rmem, agent: agent}
	return id, nil
}

// PrepRaw is PrepXfer for callers that name remote ranges without
// metadata ids (TensorRT-LLM's TransferRequest): local descriptors are
// found by range among this engine's registrations, remote ones are
// checked by the target when the bytes move (its tcp server, or its table
// of registrations for the CMA path). Errors as PrepXfer.
func (e *Engine) PrepRaw(op, lmem int, local []Desc, rmem int, remote []Desc, agent string) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.checkListsMode(op, lmem, local, rmem, remote, agent, true); err != nil {
		return 0, err
	}
	id := e.id()
	e.mu.reqs[id] = &request{op: transfer.Opcode(op), lmem: lmem, rmem: rmem, agent: agent, raw: true}
	return id, nil
}

// CoversRemote reports whether a transfer to remote (memory type mem) of
// agent would find every range registered there now: by the peer's CMA
// table when CMA reaches it, else by its published segment descriptor
// (read again). False for an unknown agent. (TensorRT-LLM checkRemoteDescs)
func (e *Engine) CoversRemote(agent string, mem int, remote []Desc) bool {
	if mem != MemDRAM && mem != MemVRAM {
		return false
	}
	reqs := make([]transfer.Request, len(remote))
	for i, r := range remote {
		reqs[i] = transfer.Request{TargetOffset: r.Addr, Length: r.Len}
	}
	if agent == e.agent {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, r := range remote {
			if e.regFor(r, mem) == 0 {
				return false
			}
		}
		return true
	}
	if mem == MemDRAM && e.cmaPeer(agent, MemDRAM, MemDRAM, reqs) > 0 {
		return true
	}
	e.mu.Lock()
	if p, ok := e.mu.peers[agent]; ok && p.opened {
		p.stale = true
	}
	e.mu.Unlock()
	id, err := e.segment(agent)
	return err == nil && e.descCovers(id, reqs)
}

// descCovers reports whether every remote range of reqs lies in a buffer
// of segment id's descriptor as last read.
func (e *Engine) descCovers(id transfer.SegmentID, reqs []transfer.Request) bool {
	d, err := e.te.SegmentDesc(id)
	if err != nil {
		return false
	}
	for _, q := range reqs {
		found := false
		for _, b := range d.Buffers {
			found = found || within(q.TargetOffset, q.Length, b.Addr, b.Length)
		}
		if !found {
			return false
		}
	}
	return true
}

// PostXfer starts request req again with the lists given (checked anew;
// op and memory types must be the request's) and, when notif is not nil,
// sends notif to the peer once every byte landed there. It returns at
// once: done is false while the transfer runs (poll CheckXfer). Errors:
// ErrNotFound for an unknown request; ErrRepostActive while the previous
// post runs; ErrInvalidParam for bad lists; ErrRemoteDisconnect when the
// peer cannot be reached. (postXfer)
func (e *Engine) PostXfer(req uint64, op int, local, remote []Desc, notif []byte) (done bool, err error) {
	e.mu.Lock()
	r, ok := e.mu.reqs[req]
	switch {
	case e.mu.closed:
		e.mu.Unlock()
		return false, transfer.ErrClosed
	case !ok:
		e.mu.Unlock()
		return false, fmt.Errorf("%w: request %d", ErrNotFound, req)
	case r.inflight:
		e.mu.Unlock()
		return false, fmt.Errorf("%w: request %d", ErrRepostActive, req)
	case transfer.Opcode(op) != r.op:
		e.mu.Unlock()
		return false, fmt.Errorf("%w: request %d was prepared for %v, posted as operation %d", ErrInvalidParam, req, r.op, op)
	}
	reqs, err := e.checkListsMode(op, r.lmem, local, r.rmem, remote, r.agent, r.raw)
	if err != nil {
		e.mu.Unlock()
		return false, err
	}
	if !r.raw { // raw descriptors carry no ids: merge by address alone would cross registrations
		reqs = merge(local, remote, reqs)
	}
	r.inflight, r.finished, r.err = true, false, nil
	r.done = make(chan struct{})
	agent := r.agent
	e.wg.Add(1)
	e.mu.Unlock()

	if pid := e.cmaPeer(agent, r.lmem, r.rmem, reqs); pid > 0 {
		e.cmaPosts.Add(1)
		notif = slices.Clone(notif)
		op := transfer.Opcode(op)
		go func() {
			err := cmaCopy(pid, op, reqs, func(q transfer.Request) ([]byte, error) { return e.te.Registry().Local(q.Source, q.Length) })
			if err == nil && notif != nil {
				err = e.notify(agent, notif)
			}
			e.finish(r, err)
		}()
		return false, nil
	}
	e.tcpPosts.Add(1)
	target := transfer.LocalSegment
	if agent != e.agent {
		target, err = e.segment(agent)
		if err == nil && r.raw && !e.descCovers(target, reqs) {
			// The peer may have registered more memory since its
			// descriptor was read: read it again once.
			e.mu.Lock()
			if p, ok := e.mu.peers[agent]; ok {
				p.stale = true
			}
			e.mu.Unlock()
			target, err = e.segment(agent)
		}
	}
	var batch transfer.BatchID
	if err == nil && len(reqs) > 0 {
		for i := range reqs {
			reqs[i].Target = target
		}
		batch, err = e.te.AllocateBatch(len(reqs))
		if err == nil {
			if err = e.te.Submit(batch, reqs); err != nil {
				e.te.FreeBatch(batch)
			}
		}
	}
	if err != nil {
		e.finish(r, err)
		return false, err
	}
	notif = slices.Clone(notif)
	go func() {
		err := e.wait(batch, len(reqs))
		if err == nil && notif != nil {
			err = e.notify(agent, notif)
		}
		e.finish(r, err)
	}()
	return false, nil
}

// cmaPeer returns the pid to reach agent with CMA for the DRAM to DRAM
// requests reqs, checking the peer's cookie on first use and its table of
// registrations on every call; 0: use tcp.
func (e *Engine) cmaPeer(agent string, lmem, rmem int, reqs []transfer.Request) int {
	if agent == e.agent || lmem != MemDRAM || rmem != MemDRAM {
		return 0
	}
	e.mu.Lock()
	p, ok := e.mu.peers[agent]
	if !ok || p.cma == nil {
		e.mu.Unlock()
		return 0
	}
	state, c := p.cmaOK, p.cma
	e.mu.Unlock()
	if state == cmaUnknown {
		state = cmaNo
		if cmaCheck(c) {
			state = cmaYes
		}
		e.mu.Lock()
		if p, ok := e.mu.peers[agent]; ok && p.cma == c {
			p.cmaOK = state
		}
		e.mu.Unlock()
	}
	if state != cmaYes || !cmaCovers(c, reqs) {
		return 0
	}
	return c.pid
}

// wait waits for batch (n requests; 0: no batch) and frees it; the error
// names the first failed descriptor.
func (e *Engine) wait(batch transfer.BatchID, n int) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout+5*time.Second)
	defer cancel()
	sts, err := e.te.Wait(ctx, batch)
	if err == nil {
		for i, s := range sts {
			if s.Status != transfer.StatusCompleted {
				err = fmt.Errorf("agent: descriptor %d: %v: %w", i, s.Status, s.Err)
				break
			}
		}
	}
	if ferr := e.te.FreeBatch(batch); err == nil && ferr != nil {
		err = ferr
	}
	return err
}

// finish records the end of a post.
func (e *Engine) finish(r *request, err error) {
	e.mu.Lock()
	r.inflight, r.finished, r.err = false, true, err
	close(r.done)
	if r.released {
		for id, q := range e.mu.reqs {
			if q == r {
				delete(e.mu.reqs, id)
			}
		}
	}
	e.mu.Unlock()
	e.wg.Done()
}

// Wait blocks until request req's last post ended or timeout passes
// (negative: no bound) and returns as CheckXfer then. Errors: ErrNotFound.
func (e *Engine) Wait(req uint64, timeout time.Duration) (done bool, err error) {
	e.mu.Lock()
	r, ok := e.mu.reqs[req]
	var ch chan struct{}
	if ok && r.inflight {
		ch = r.done
	}
	e.mu.Unlock()
	if !ok {
		return false, fmt.Errorf("%w: request %d", ErrNotFound, req)
	}
	if ch != nil {
		if timeout < 0 {
			<-ch
		} else {
			t := time.NewTimer(timeout)
			defer t.Stop()
			select {
			case <-ch:
			case <-t.C:
			}
		}
	}
	return e.CheckXfer(req)
}

// ReleaseWhenDone frees request req now, or, while a post of it still
// runs, as soon as that post ends (nothing is aborted mid-copy). Errors:
// ErrNotFound. (TensorRT-LLM TransferStatus::release and destructor)
func (e *Engine) ReleaseWhenDone(req uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.mu.reqs[req]
	switch {
	case !ok:
		return fmt.Errorf("%w: request %d (already released?)", ErrNotFound, req)
	case r.inflight:
		r.released = true
		return nil
	}
	delete(e.mu.reqs, req)
	return nil
}

// CheckXfer reports whether request req's last post finished (done) or
// runs; a failed post returns its error, as often as asked. Errors:
// ErrNotFound. (checkXfer)
func (e *Engine) CheckXfer(req uint64) (done bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.mu.reqs[req]
	if !ok {
		return false, fmt.Errorf("%w: request %d", ErrNotFound, req)
	}
	if r.inflight {
		return false, nil
	}
	return true, r.err
}

// ReleaseReq frees request req unless a post of it still runs
// (ErrRepostActive: NIXL tries again later; nothing is aborted mid-copy).
// Errors: ErrNotFound for an unknown or already released request.
// (releaseReqH)
func (e *Engine) ReleaseReq(req uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.mu.reqs[req]
	switch {
	case !ok:
		return fmt.Errorf("%w: request %d (already released?)", ErrNotFound, req)
	case r.inflight:
		return fmt.Errorf("%w: request %d", ErrRepostActive, req)
	}
	delete(e.mu.reqs, req)
	return nil
}

// notify delivers msg from this engine's agent to agent.
func (e *Engine) notify(agent string, msg []byte) error {
	if agent == e.agent {
		e.mu.Lock()
		e.mu.local = append(e.mu.local, Notif{Agent: e.agent, Msg: msg})
		e.mu.Unlock()
		return nil
	}
	e.mu.Lock()
	p, ok := e.mu.peers[agent]
	var seg string
	if ok {
		seg = p.seg
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: agent %q (its metadata was never loaded, or it was invalidated)", ErrNotFound, agent)
	}
	name, body := encodeNotify(e.agent, msg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p2pmeta.SendNotify(ctx, seg, name, body); err != nil {
		return fmt.Errorf("%w: notification to agent %q at %s: %v", ErrRemoteDisconnect, agent, seg, err)
	}
	return nil
}

// GenNotif sends msg (any bytes) to agent, which may be this engine's own
// agent. Errors: ErrNotFound for an unknown agent; ErrRemoteDisconnect.
// (genNotif)
func (e *Engine) GenNotif(agent string, msg []byte) error {
	return e.notify(agent, slices.Clone(msg))
}

// Notifs drains the notifications received since the previous call, in
// arrival order (this engine's own ones first). (getNotifs)
func (e *Engine) Notifs() []Notif {
	e.mu.Lock()
	out := e.mu.local
	e.mu.local = nil
	e.mu.Unlock()
	for _, n := range e.hs.Notifies() {
		if a, m, ok := decodeNotify(n); ok {
			out = append(out, Notif{Agent: a, Msg: m})
		}
	}
	return out
}
