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
	nextB    atomic.Uint64
	ctx      context.Context // cancelled by Close: aborts running requests
	cancel   context.CancelFunc

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
	desc metadata.SegmentDesc
	peer Peer
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
	if cfg.HostID == "" {
		cfg.HostID = hostID()
	}
	e := &Engine{cfg: cfg, sem: make(chan struct{}, cfg.Workers)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.mu.segs = map[SegmentID]*peerSeg{}
	e.mu.byName = map[string]SegmentID{}
	e.mu.nextSeg = 1
	e.mu.batches = map[BatchID]*batch{}
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
			desc.Buffers = append(desc.Buffers, metadata.BufferDesc{Name: b.Location, Addr: b.Addr, Length: b.Length})
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
		_ = e.reg.Remove(b.Addr)
		return err
	}
	return nil
}

// UnregisterLocalMemory removes the buffer starting at addr and republishes
// the descriptor. Errors: ErrAddressNotRegistered; the metadata error.
// Requests in flight on that buffer must have finished (caller's duty, as
// upstream).
func (e *Engine) UnregisterLocalMemory(ctx context.Context, addr uint64) error {
	if err := e.reg.Remove(addr); err != nil {
		return err
	}
	if e.closed.Load() {
		return nil
	}
	return e.publish(ctx)
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
	var local Peer
	if e.cfg.Local != nil && desc.ShmSocket != "" && desc.HostID == e.cfg.HostID {
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
	e.mu.Lock()
	defer e.mu.Unlock()
	if id, ok := e.mu.byName[name]; ok { // lost a race with another opener
		peer.Close()
		return id, nil
	}
	id := e.mu.nextSeg
	e.mu.nextSeg++
	e.mu.segs[id] = &peerSeg{name: name, desc: *desc, peer: peer}
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
	defer e.mu.Unlock()
	if cur, ok := e.mu.segs[id]; ok {
		cur.desc = *desc
	}
	return nil
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
	return s.peer.Close()
}

// Close stops the engine (see the package doc for the order). Errors: the
// transport's close error. A second Close returns ErrClosed.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
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
		s.peer.Close()
	}
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

// descInRange reports whether [addr, addr+n) lies inside one buffer of d.
func descInRange(d *metadata.SegmentDesc, addr, n uint64) bool {
	for _, b := range d.Buffers {
		if addr >= b.Addr && addr-b.Addr < b.Length && n <= b.Length-(addr-b.Addr) {
			return true
		}
	}
	return false
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

func (f *fallbackPeer) Close() error {
	err := f.first.Close()
	if f.second != nil {
		f.second.Close()
	}
	return err
}
