package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
)

// Config configures an Engine. Zero values take the documented defaults.
type Config struct {
	// Name is the local server name, which is also this engine's segment
	// name; unique in the cluster (upstream local_server_name). Required.
	Name string
	// Metadata is where segment descriptors are published and looked up
	// (upstream metadata_server). Required.
	Metadata metadata.Store
	// Cluster is the optional key prefix (upstream MC_METADATA_CLUSTER_ID).
	Cluster string
	// Transport moves the bytes to any peer (tcp). Required.
	Transport Transport
	// Local, if set, is a same-host transport (shm) chosen automatically
	// for peers whose descriptor carries this host's HostID and a shm
	// socket; a request it cannot serve (e.g. a buffer that is not memfd
	// backed) falls back to Transport.
	Local Transport
	// HostID identifies this machine in descriptors; default
	// /etc/machine-id, else the hostname.
	HostID string
	// Workers bounds requests executing at once; default 16.
	Workers int
	// RequestTimeout bounds one request end to end; default 60 s (upstream
	// Store gives up on a transfer after 60 s). A request past it FAILS.
	RequestTimeout time.Duration
	// CUDA, if set, reaches GPU memory: it enables RegisterDeviceMemory
	// and requests whose local side is device memory, serves peers'
	// requests into this engine's device buffers (over transports that
	// support it: tcp), and copies directly through CUDA IPC to device
	// buffers of same-host peers. Typically a *cuda.Runtime from
	// cuda.Load; nil means no CUDA.
	CUDA DeviceRuntime
	// DeviceSlice is the slice size in bytes in which a request whose
	// local side is device memory is staged through host memory for a
	// network transport (tcp, shm): two slices per executing request,
	// page-locked when CUDA is a HostPinner, the device copy of one
	// slice overlapping the transfer of the other. Default
	// DefaultDeviceSlice (2 MiB) when 0; at most 1 GiB; negative is
	// ErrInvalidArgument.
	DeviceSlice int
}

// Validate reports a missing required field.
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("%w: engine name is empty", ErrInvalidArgument)
	case c.Metadata == nil:
		return fmt.Errorf("%w: engine %q has no metadata store", ErrInvalidArgument, c.Name)
	case c.Transport == nil:
		return fmt.Errorf("%w: engine %q has no transport", ErrInvalidArgument, c.Name)
	case c.DeviceSlice > 1<<30 || c.DeviceSlice < 0:
		return fmt.Errorf("%w: engine %q: device slice of %d bytes (want 0 for the default, or 1 byte to 1 GiB)", ErrInvalidArgument, c.Name, c.DeviceSlice)
	}
	return nil
}

// Engine is a transfer engine instance. See the package doc.
type Engine struct {
	cfg      Config
	reg      Registry
	sem      chan struct{} // bounds concurrently executing requests
	inflight sync.WaitGroup
	closed   atomic.Bool
	life     sync.RWMutex // Submit read-holds it from its closed check to inflight.Add; Close write-holds it to set closed
	nextB    atomic.Uint64
	ctx      context.Context // cancelled by Close: aborts running requests
	cancel   context.CancelFunc
	staging  *stagers // host staging buffers for device memory on network paths

	mu struct {
		sync.Mutex
		segs    map[SegmentID]*peerSeg // opened segments by handle
		byName  map[string]SegmentID   // handle of each opened segment name
		nextSeg SegmentID
		batches map[BatchID]*batch
	}
	pubMu sync.Mutex // serialises descriptor publication (I/O, not under mu)
}

type peerSeg struct {
	name string
	desc *metadata.SegmentDesc // replaced, never modified, by RefreshSegment (under Engine.mu)
	peer Peer
	ipc  *ipcMaps // same-host peer and Config.CUDA set; else nil
}

// close releases the segment's connections and IPC mappings.
func (s *peerSeg) close() error {
	if s.ipc != nil {
		s.ipc.close()
	}
	return s.peer.Close()
}

// New starts an engine: the transport listens and the engine publishes its
// rpc_meta key and an (empty) segment descriptor. Errors: ErrInvalidArgument
// for a bad config; the transport's listen error; the metadata store's error.
// Mirrors upstream TransferEngine::init.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.DeviceSlice <= 0 {
		cfg.DeviceSlice = DefaultDeviceSlice
	}
	if cfg.HostID == "" {
		cfg.HostID = hostID()
	}
	e := &Engine{cfg: cfg, sem: make(chan struct{}, cfg.Workers)}
	e.staging = &stagers{rt: cfg.CUDA, slice: int(cfg.DeviceSlice)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.mu.segs = map[SegmentID]*peerSeg{}
	e.mu.byName = map[string]SegmentID{}
	e.mu.nextSeg = 1
	e.mu.batches = map[BatchID]*batch{}
	if err := e.checkNameFree(ctx); err != nil {
		e.cancel()
		return nil, err
	}
	if err := cfg.Transport.Listen(cfg.Name, &e.reg); err != nil {
		return nil, fmt.Errorf("transfer: engine %q: listen: %w", cfg.Name, err)
	}
	if cfg.Local != nil {
		if err := cfg.Local.Listen(cfg.Name, &e.reg); err != nil {
			cfg.Transport.Close()
			return nil, fmt.Errorf("transfer: engine %q: listen %s: %w", cfg.Name, cfg.Local.Protocol(), err)
		}
	}
	if err := e.publish(ctx); err != nil {
		e.cancel()
		cfg.Transport.Close()
		if cfg.Local != nil {
			cfg.Local.Close()
		}
		return nil, err
	}
	return e, nil
}

// checkNameFree refuses a segment name whose published descriptor belongs
// to an engine that still answers (two processes with one local_hostname
// would overwrite each other's descriptor). A stale descriptor of a dead
// engine is taken over.
func (e *Engine) checkNameFree(ctx context.Context) error {
	p, ok := e.cfg.Transport.(Prober)
	if !ok {
		return nil
	}
	desc, err := metadata.GetSegment(ctx, e.cfg.Metadata, e.cfg.Cluster, e.cfg.Name)
	if err != nil || desc.Protocol != e.cfg.Transport.Protocol() {
		return nil
	}
	rpc, err := metadata.GetRPCMeta(ctx, e.cfg.Metadata, e.cfg.Cluster, e.cfg.Name)
	if err != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if p.Probe(pctx, *desc, rpc) == nil {
		return fmt.Errorf("%w: segment name %q is in use by a live engine at %s:%d (local_hostname must be unique)", ErrInvalidArgument, e.cfg.Name, rpc.IPOrHostName, desc.TCPDataPort)
	}
	return nil
}

// Name is the engine's segment name.
func (e *Engine) Name() string { return e.cfg.Name }

// Registry exposes the engine's registered buffers (read-only use).
func (e *Engine) Registry() *Registry { return &e.reg }

func (e *Engine) publish(ctx context.Context) error {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	desc := metadata.SegmentDesc{Name: e.cfg.Name, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}
	var rpc metadata.RPCMeta
	e.cfg.Transport.Publish(&desc, &rpc)
	desc.HostID = e.cfg.HostID
	if e.cfg.Local != nil {
		var ld metadata.SegmentDesc
		var lr metadata.RPCMeta
		e.cfg.Local.Publish(&ld, &lr)
		desc.ShmSocket = lr.IPOrHostName
	}
	desc.Buffers = []metadata.BufferDesc{}
	for _, b := range e.reg.Buffers() {
		if b.Remote {
			desc.Buffers = append(desc.Buffers, metadata.BufferDesc{Name: b.Location, Addr: b.Addr, Length: b.Length, IPCHandle: b.ipc})
		}
	}
	if err := metadata.PutRPCMeta(ctx, e.cfg.Metadata, e.cfg.Cluster, e.cfg.Name, rpc); err != nil {
		return fmt.Errorf("transfer: engine %q: publish rpc_meta: %w", e.cfg.Name, err)
	}
	if err := metadata.PutSegment(ctx, e.cfg.Metadata, e.cfg.Cluster, desc); err != nil {
		return fmt.Errorf("transfer: engine %q: publish segment: %w", e.cfg.Name, err)
	}
	return nil
}

// Republish writes this engine's rpc_meta entry and segment descriptor to
// the metadata store again, e.g. after a metadata server restart lost them
// (upstream re-publishes on remount). Errors: the metadata store's.
func (e *Engine) Republish(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.publish(ctx)
}

// RegisterLocalMemory registers buf as a buffer of this engine's segment.
// buf must stay valid (and at the same address: off-heap memory from package
// memory, or foreign memory) until UnregisterLocalMemory. With remote true
// the buffer is published so peers can read and write it. Errors:
// ErrInvalidArgument (empty), ErrAddressOverlapped, ErrClosed, or the
// metadata error (the registration is rolled back). Mirrors upstream
// registerLocalMemory(addr, len, location, remote_accessible).
func (e *Engine) RegisterLocalMemory(ctx context.Context, buf []byte, location string, remote bool) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.register(ctx, remote, func() (Buffer, error) { return e.reg.Add(buf, location, remote) })
}

// RegisterReadOnlyMemory registers buf as a buffer of this engine's
// segment that peers may read but never write, published as any
// remote-accessible buffer. A peer's WRITE into it over tcp or loopback is
// refused and changes nothing (the peer's request fails with
// ErrRejected; tcp carries no reason), and this process's own request
// that writes it as its segment's target fails with ErrReadOnly, so buf
// may be mapped without write permission (a file mapped PROT_READ, which
// a write would fault on and kill the process). As the local side of
// this process's own requests it is used as any other buffer: a READ into
// it writes it, which on memory mapped without write permission faults,
// so the caller must not do that. Same-host peers reach it over tcp, not
// shm (it is not a memory region). Over RDMA the target registers it for
// remote reads only: the peer's WRITE fails with ErrRejected before it is
// posted (the target's NIC would refuse it too); memory mapped without
// write permission (shared) is registered without local write access
// (Linux 6.2 and later), so this process's own RDMA READ into it fails
// with ErrInvalidArgument (untested on RDMA hardware).
// Errors as RegisterLocalMemory. Ours: upstream has no read-only
// registration.
func (e *Engine) RegisterReadOnlyMemory(ctx context.Context, buf []byte, location string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.register(ctx, true, func() (Buffer, error) { return e.reg.AddReadOnly(buf, location) })
}

// RegisterRegion registers the whole of reg, as RegisterLocalMemory(ctx,
// reg.Bytes(), location, remote), and lets a transport that shares memory
// with same-host peers (shm) hand out the region's memory file: reg must
// then come from memory.MapShared. reg must stay open until
// UnregisterLocalMemory(reg.Addr()). Errors as RegisterLocalMemory.
func (e *Engine) RegisterRegion(ctx context.Context, reg *memory.Region, location string, remote bool) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.register(ctx, remote, func() (Buffer, error) { return e.reg.AddRegion(reg, location, remote) })
}

// RegisterDeviceMemory registers device (GPU) memory [addr, addr+length)
// of CUDA device dev as a buffer with location "cuda:<dev>", published
// under that name when remote. Its bytes are not host-addressable: the
// engine moves them with Config.CUDA (device-to-host staging for network
// transports, cudaMemcpy for the local segment, CUDA IPC for same-host
// peers). When remote, an IPC token is published with the buffer if the
// runtime can export it (the memory must come from cudaMalloc); otherwise
// same-host peers use the network path. The memory must stay allocated
// until UnregisterLocalMemory(addr) and until peers that mapped it closed
// the segment. Errors: ErrUnsupported ("unsupported: no CUDA runtime")
// without Config.CUDA; the runtime's CheckDevice error for a bad device;
// then as RegisterLocalMemory. Mirrors upstream registerLocalMemory with
// a "cuda:N" location.
func (e *Engine) RegisterDeviceMemory(ctx context.Context, addr, length uint64, dev int, remote bool) error {
	if e.closed.Load() {
		return ErrClosed
	}
	rt := e.cfg.CUDA
	if rt == nil {
		return fmt.Errorf("%w: no CUDA runtime: engine %q has no Config.CUDA, cannot register device memory [%#x,+%d) on cuda:%d", ErrUnsupported, e.cfg.Name, addr, length, dev)
	}
	if err := rt.CheckDevice(dev); err != nil {
		return fmt.Errorf("transfer: register device memory [%#x,+%d) on cuda:%d: %w", addr, length, dev, err)
	}
	var token string
	if remote && length > 0 {
		token, _ = rt.ExportIPC(dev, addr, length) // no token: peers use the network path
	}
	return e.register(ctx, remote, func() (Buffer, error) { return e.reg.AddDevice(rt, addr, length, dev, remote, token) })
}

// register adds a buffer with add and publishes it when remote, rolling the
// registration back if publishing fails.
func (e *Engine) register(ctx context.Context, remote bool, add func() (Buffer, error)) error {
	b, err := add()
	if err != nil {
		return err
	}
	if !remote {
		return nil
	}
	if err := e.publish(ctx); err != nil {
		_ = e.unregister(b.Addr)
		return err
	}
	return nil
}

// UnregisterLocalMemory removes the buffer starting at addr, drops the
// transport's hardware registrations of it (MemoryDeregisterer: rdma
// memory regions, so no peer's cached rkey reaches it any more) and
// republishes the descriptor. Errors: ErrAddressNotRegistered; the
// metadata error. Requests in flight on that buffer must have finished
// (caller's duty, as upstream).
func (e *Engine) UnregisterLocalMemory(ctx context.Context, addr uint64) error {
	if err := e.unregister(addr); err != nil {
		return err
	}
	if e.closed.Load() {
		return nil
	}
	return e.publish(ctx)
}

// unregister removes the buffer starting at addr from the registry and
// its registrations from the transport. Errors: ErrAddressNotRegistered.
func (e *Engine) unregister(addr uint64) error {
	b, err := e.reg.Remove(addr)
	if err != nil {
		return err
	}
	if d, ok := e.cfg.Transport.(MemoryDeregisterer); ok {
		d.DeregisterMemory(b.Addr, b.Length)
	}
	return nil
}

// OpenSegment resolves a peer's segment by name and returns its handle; a
// second open of the same name returns the same handle. The engine's own name
// returns LocalSegment. Errors: ErrSegmentNotFound (no descriptor published),
// the metadata error, or the transport's dial error. Mirrors upstream
// openSegment.
func (e *Engine) OpenSegment(ctx context.Context, name string) (SegmentID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if name == e.cfg.Name {
		return LocalSegment, nil
	}
	e.mu.Lock()
	if id, ok := e.mu.byName[name]; ok {
		e.mu.Unlock()
		return id, nil
	}
	e.mu.Unlock()

	desc, err := metadata.GetSegment(ctx, e.cfg.Metadata, e.cfg.Cluster, name)
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return 0, fmt.Errorf("%w: %q: %v", ErrSegmentNotFound, name, err)
		}
		return 0, fmt.Errorf("transfer: open segment %q: %w", name, err)
	}
	rpc, err := metadata.GetRPCMeta(ctx, e.cfg.Metadata, e.cfg.Cluster, name)
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return 0, fmt.Errorf("%w: %q has no rpc_meta: %v", ErrSegmentNotFound, name, err)
		}
		return 0, fmt.Errorf("transfer: open segment %q: %w", name, err)
	}
	sameHost := desc.HostID != "" && desc.HostID == e.cfg.HostID
	var local Peer
	if e.cfg.Local != nil && desc.ShmSocket != "" && sameHost {
		ld := *desc
		ld.Protocol = e.cfg.Local.Protocol()
		local, _ = e.cfg.Local.Dial(ctx, ld, metadata.RPCMeta{IPOrHostName: desc.ShmSocket})
	}
	if desc.Protocol != e.cfg.Transport.Protocol() && local == nil {
		return 0, fmt.Errorf("%w: segment %q speaks %q, this engine %q", ErrUnsupported, name, desc.Protocol, e.cfg.Transport.Protocol())
	}
	var peer Peer
	if desc.Protocol == e.cfg.Transport.Protocol() {
		if peer, err = e.cfg.Transport.Dial(ctx, *desc, rpc); err != nil && local == nil {
			return 0, fmt.Errorf("transfer: open segment %q: %w", name, err)
		}
	}
	if local != nil {
		peer = &fallbackPeer{first: local, second: peer}
	}
	s := &peerSeg{name: name, desc: desc, peer: peer}
	if sameHost && e.cfg.CUDA != nil {
		s.ipc = &ipcMaps{rt: e.cfg.CUDA}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if id, ok := e.mu.byName[name]; ok { // lost a race with another opener
		peer.Close()
		return id, nil
	}
	id := e.mu.nextSeg
	e.mu.nextSeg++
	e.mu.segs[id] = s
	e.mu.byName[name] = id
	return id, nil
}

// RefreshSegment re-reads a peer's descriptor (after it registered more
// memory), keeping its handle. Errors as OpenSegment; ErrSegmentNotFound for
// an unknown handle. Mirrors upstream syncSegmentCache(name).
func (e *Engine) RefreshSegment(ctx context.Context, id SegmentID) error {
	e.mu.Lock()
	s, ok := e.mu.segs[id]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: handle %d", ErrSegmentNotFound, id)
	}
	desc, err := metadata.GetSegment(ctx, e.cfg.Metadata, e.cfg.Cluster, s.name)
	if err != nil {
		return fmt.Errorf("transfer: refresh segment %q: %w", s.name, err)
	}
	e.mu.Lock()
	cur, ok := e.mu.segs[id]
	if ok {
		cur.desc = desc
	}
	e.mu.Unlock()
	if ok && cur.ipc != nil {
		cur.ipc.sync(deviceBuffers(desc))
	}
	return nil
}

// SegmentDesc returns the descriptor of the opened peer segment id as last
// read (by OpenSegment or RefreshSegment); the caller must not modify it.
// Errors: ErrSegmentNotFound for an unknown handle (LocalSegment included:
// the engine's own buffers are in Registry). Mirrors upstream
// getSegmentDescByID.
func (e *Engine) SegmentDesc(id SegmentID) (*metadata.SegmentDesc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.mu.segs[id]
	if !ok {
		return nil, fmt.Errorf("%w: handle %d", ErrSegmentNotFound, id)
	}
	return s.desc, nil
}

// CloseSegment forgets a peer handle and closes its connections. Errors:
// ErrSegmentNotFound for an unknown handle.
func (e *Engine) CloseSegment(id SegmentID) error {
	e.mu.Lock()
	s, ok := e.mu.segs[id]
	if ok {
		delete(e.mu.segs, id)
		delete(e.mu.byName, s.name)
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: handle %d", ErrSegmentNotFound, id)
	}
	return s.close()
}

// Close stops the engine (see the package doc for the order). Errors: the
// transport's close error. A second Close returns ErrClosed.
func (e *Engine) Close() error {
	e.life.Lock()
	was := e.closed.Swap(true)
	e.life.Unlock()
	if was {
		return ErrClosed
	}
	e.cancel()
	e.inflight.Wait()
	e.mu.Lock()
	segs := e.mu.segs
	e.mu.segs = map[SegmentID]*peerSeg{}
	e.mu.byName = map[string]SegmentID{}
	e.mu.Unlock()
	for _, s := range segs {
		s.close()
	}
	e.staging.close()
	err := e.cfg.Transport.Close()
	if e.cfg.Local != nil {
		e.cfg.Local.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = e.cfg.Metadata.Delete(ctx, metadata.SegmentKey(e.cfg.Cluster, e.cfg.Name))
	_ = e.cfg.Metadata.Delete(ctx, metadata.RPCMetaKey(e.cfg.Cluster, e.cfg.Name))
	return err
}

// descBuffer returns the buffer of d holding [addr, addr+n), or nil.
func descBuffer(d *metadata.SegmentDesc, addr, n uint64) *metadata.BufferDesc {
	for i := range d.Buffers {
		b := &d.Buffers[i]
		if addr >= b.Addr && addr-b.Addr < b.Length && n <= b.Length-(addr-b.Addr) {
			return b
		}
	}
	return nil
}

// deviceBuffers lists d's buffers that carry an IPC token.
func deviceBuffers(d *metadata.SegmentDesc) []bufferRef {
	var out []bufferRef
	for _, b := range d.Buffers {
		if b.IPCHandle != "" {
			out = append(out, bufferRef{addr: b.Addr, dev: parseDeviceLocation(b.Name), token: b.IPCHandle})
		}
	}
	return out
}

// hostID identifies this machine: /etc/machine-id, else the hostname.
func hostID() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id
		}
	}
	h, _ := os.Hostname()
	return h
}

// fallbackPeer tries a same-host peer first and the network peer when the
// first cannot serve a request (second may be nil).
type fallbackPeer struct {
	first, second Peer
}

func (f *fallbackPeer) Do(ctx context.Context, op Opcode, local []byte, remoteAddr uint64) error {
	err := f.first.Do(ctx, op, local, remoteAddr)
	if err == nil || f.second == nil || ctx.Err() != nil {
		return err
	}
	return f.second.Do(ctx, op, local, remoteAddr)
}

// DoV implements VectorPeer the same way.
func (f *fallbackPeer) DoV(ctx context.Context, op Opcode, local [][]byte, remoteAddr uint64) error {
	err := doV(ctx, f.first, op, local, remoteAddr)
	if err == nil || f.second == nil || ctx.Err() != nil {
		return err
	}
	return doV(ctx, f.second, op, local, remoteAddr)
}

func (f *fallbackPeer) Close() error {
	err := f.first.Close()
	if f.second != nil {
		f.second.Close()
	}
	return err
}
