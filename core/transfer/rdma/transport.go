//go:build rdma

package rdma

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/topology"
)

// maxServerQPs caps the queue pairs one control connection may hold on the
// target side.
const maxServerQPs = 256

var _ transfer.Transport = (*Transport)(nil)

// Available lists the RDMA devices libibverbs sees (ibv_get_device_list).
// Errors: ErrNoDevice (wrapping transfer.ErrUnsupported) when there is
// none or the list cannot be read.
func Available() ([]string, error) { return deviceList() }

// Transport is the RDMA transport. Create with New; install into one
// engine.
type Transport struct {
	cfg     Config
	devs    []*device   // opened devices; index = rails index
	srvCQs  []*cq       // per device, shared by target-side QPs; never polled (one-sided ops raise no target completions)
	rails   *rails      // per-slice device choice
	regions regionCache // this process's memory regions, each registered on every device
	// mrMu orders serveMR's grant-then-register (read-held: rkey requests
	// run side by side, a slow ibv_reg_mr holding up no cache hit) against
	// DeregisterMemory (write-held).
	mrMu sync.RWMutex

	srv transfer.ConnServer // control-channel listener and handlers

	mu struct {
		sync.Mutex
		target transfer.Target
		peers  map[*peer]struct{}
		closed bool
	}
}

// New opens the configured devices (Config.Devices; default every device,
// skipping those that do not open), checks their ports, allocates a
// protection domain and a completion queue on each, and builds the
// priority matrix (Config.Matrix, default discovered from sysfs). Errors:
// the Validate error; ErrNoDevice (wrapping transfer.ErrUnsupported) when
// no device is listed, a named device is missing or its port is inactive,
// or no defaulted device opens; verbs errors for a named device.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	avail, err := deviceList()
	if err != nil {
		return nil, err
	}
	names, named := cfg.deviceNames(avail)
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: the priority matrix names none of %v", ErrNoDevice, avail)
	}
	t := &Transport{cfg: cfg}
	var opened []string
	var lastErr error
	for _, name := range names {
		if !slices.Contains(avail, name) {
			lastErr = fmt.Errorf("%w: device %q not among %v", ErrNoDevice, name, avail)
		} else if dev, err := openDevice(name, &cfg); err != nil {
			lastErr = err
		} else if c, err := dev.createCQ(dev.maxCQE); err != nil {
			dev.close()
			lastErr = err
		} else {
			t.devs = append(t.devs, dev)
			t.srvCQs = append(t.srvCQs, c)
			opened = append(opened, name)
			continue
		}
		if named {
			t.closeDevices()
			return nil, lastErr
		}
	}
	if len(t.devs) == 0 {
		if errors.Is(lastErr, ErrNoDevice) {
			return nil, lastErr
		}
		return nil, fmt.Errorf("%w: none of %v opened: %v", ErrNoDevice, names, lastErr)
	}
	matrix := cfg.Matrix
	if matrix == nil {
		matrix = discoverMatrix("", opened)
	}
	t.rails = newRails(opened, matrix, topology.SelectorOptions{RoundRobin: cfg.RoundRobin}, cfg.DestDeviceAffinity)
	t.mu.peers = map[*peer]struct{}{}
	return t, nil
}

// closeDevices releases the completion queues and devices (Close, or New
// failing).
func (t *Transport) closeDevices() {
	for i, d := range t.devs {
		t.srvCQs[i].destroy()
		d.close()
	}
}

// Device is the name of the first opened verbs device.
func (t *Transport) Device() string { return t.rails.names[0] }

// Devices lists the opened verbs devices.
func (t *Transport) Devices() []string { return slices.Clone(t.rails.names) }

// Matrix returns the priority matrix in use (restricted to the opened
// devices), the one peers are sent. The caller must not modify it.
func (t *Transport) Matrix() map[string][2][]string { return t.rails.matrix }

// Protocol implements transfer.Transport ("rdma").
func (t *Transport) Protocol() string { return Protocol }

// Listen implements transfer.Transport: serves the control channel on
// BindAddr; memory is registered on first use, checked against target.
// Errors: the listen error naming the address; transfer.ErrClosed.
func (t *Transport) Listen(name string, target transfer.Target) error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return transfer.ErrClosed
	}
	t.mu.target = target
	t.mu.Unlock()
	if err := t.srv.Listen(t.cfg.BindAddr, func(c net.Conn) { t.serve(c, target) }); err != nil {
		return fmt.Errorf("rdma: segment %q: %w", name, err)
	}
	return nil
}

// Publish implements transfer.Transport: protocol "rdma" and the control
// channel endpoint as rpc_meta (ip_or_host_name, rpc_port).
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) {
	d.Protocol = Protocol
	host, port := t.srv.Endpoint(t.cfg.Host)
	rpc.RPCPort = port
	rpc.IPOrHostName = host
}

// DeregisterMemory implements transfer.MemoryDeregisterer: it drops every
// memory region of this transport that overlaps [addr, addr+length) and
// returns how many it dropped. The engine calls it when a buffer is
// unregistered. A peer holding the old rkey then fails with a remote
// access error once, and asks for a new rkey on its next request. It waits
// for an rkey request being answered (serveMR), so that no registration
// made for a buffer being unregistered survives it.
func (t *Transport) DeregisterMemory(addr, length uint64) int {
	t.mrMu.Lock()
	defer t.mrMu.Unlock()
	rs := t.regions.removeOverlapping(addr, length)
	for _, r := range rs {
		deregMR(r)
	}
	return len(rs)
}

// register registers [addr, addr+length) on every device with want
// (less accLocalWrite where the memory is mapped read-only: see
// registerWith; every device is registered alike), or returns an
// equivalent region another goroutine registered meanwhile.
func (t *Transport) register(addr, length uint64, want access, location string) (region, error) {
	r := region{addr: addr, length: length, access: want, location: location}
	for i, d := range t.devs {
		var (
			mr  memReg
			err error
		)
		if i == 0 {
			mr, r.access, err = registerWith(want, func(a access) (memReg, error) { return d.regMR(addr, length, a) })
		} else {
			mr, err = d.regMR(addr, length, r.access)
		}
		if err != nil {
			deregMR(r)
			return region{}, err
		}
		r.lkeys = append(r.lkeys, mr.lkey)
		r.rkeys = append(r.rkeys, mr.rkey)
		r.handles = append(r.handles, mr.handle)
	}
	got, added := t.regions.add(r)
	if !added {
		deregMR(r)
	}
	return got, nil
}

// localRegion returns the region (lkeys per device, location) of a local
// buffer, registering the engine buffer that contains it on first use.
// An RDMA READ's destination (read) needs accLocalWrite. Errors: the
// registration's; transfer.ErrInvalidArgument for a READ into memory
// that could be registered only without local write access (mapped
// read-only: the NIC would refuse to write it).
func (t *Transport) localRegion(b []byte, read bool) (region, error) {
	addr, n := memory.AddrOf(b), uint64(len(b))
	need := access(0)
	if read {
		need = accLocalWrite
	}
	if r, ok := t.regions.find(addr, n, need); ok {
		return r, nil
	}
	t.mu.Lock()
	target := t.mu.target
	t.mu.Unlock()
	base, size, loc := addr, n, topology.WildcardLocation
	if target != nil {
		base, size, loc = registrationRange(target, addr, n, false)
	}
	r, err := t.register(base, size, accLocalWrite, loc)
	if err == nil && !r.access.has(need) {
		return region{}, fmt.Errorf("%w: rdma: READ into [%#x,+%d), memory the NIC may not write (mapped read-only)", transfer.ErrInvalidArgument, addr, n)
	}
	return r, err
}

// serve answers one control connection. The target-side QPs it creates
// live until the connection ends.
func (t *Transport) serve(c net.Conn, target transfer.Target) {
	qps := map[qpRef]*qp{}
	defer func() {
		for _, q := range qps {
			q.destroy()
		}
	}()
	r := bufio.NewReader(c)
	for {
		m, err := readMessage(r, t.cfg.MaxMessage)
		if err != nil {
			return
		}
		var resp *message
		switch m.Op {
		case opConnect:
			for _, ref := range m.Release {
				if q, ok := qps[ref]; ok {
					q.destroy()
					delete(qps, ref)
				}
			}
			if len(qps) >= maxServerQPs {
				resp = errMessage(codeBadReq, fmt.Errorf("more than %d queue pairs on one connection", maxServerQPs))
				break
			}
			i, ok := t.deviceIndex(m.Dev)
			if !ok {
				resp = errMessage(codeBadReq, fmt.Errorf("no device %q (devices %v)", m.Dev, t.rails.names))
				break
			}
			q, info, err := t.acceptQP(i, m.QP)
			if err != nil {
				resp = errMessage(codeInternal, err)
				break
			}
			qps[qpRef{Dev: t.rails.names[i], QPN: q.num()}] = q
			resp = &message{Op: opConnect, QP: &info}
		case opMR:
			resp = t.serveMR(target, m.Addr, m.Length)
		case opTopology:
			resp = &message{Op: opTopology, Matrix: t.rails.matrix, Devices: t.rails.names}
		default:
			resp = errMessage(codeBadReq, fmt.Errorf("unknown op %q", m.Op))
		}
		if err := writeMessage(c, resp); err != nil {
			return
		}
	}
}

func errMessage(code string, err error) *message {
	return &message{Op: opError, Code: code, Error: err.Error()}
}

// deviceIndex resolves a device name from a peer; "" is the first device.
func (t *Transport) deviceIndex(name string) (int, bool) {
	if name == "" {
		return 0, true
	}
	i, ok := t.rails.index[name]
	return i, ok
}

// acceptQP creates, on device i, the target end of a connection requested
// by remote.
func (t *Transport) acceptQP(i int, remote *qpInfo) (*qp, qpInfo, error) {
	rgid, err := checkQPInfo(remote)
	if err != nil {
		return nil, qpInfo{}, err
	}
	d := t.devs[i]
	q, err := d.createQP(t.srvCQs[i])
	if err != nil {
		return nil, qpInfo{}, err
	}
	if err := d.connect(q, remote, rgid); err != nil {
		q.destroy()
		return nil, qpInfo{}, err
	}
	return q, d.info(q), nil
}

// serveMR answers an rkey request: the range must resolve as
// remote-accessible in target; the whole containing buffer is registered,
// on every device, when target can list buffers, for remote reads and
// writes, or for remote reads only where peers may only read it
// (mrGrant). The answer carries one rkey per device, the buffer's
// location and whether it is read-only.
func (t *Transport) serveMR(target transfer.Target, addr, length uint64) *message {
	// Held from the grant to the registration, so that a buffer
	// unregistered meanwhile (DeregisterMemory waits) never keeps a
	// registration made with its old grant.
	t.mrMu.RLock()
	defer t.mrMu.RUnlock()
	grant, need, err := mrGrant(target, addr, length)
	if err != nil {
		return errMessage(codeRejected, err)
	}
	r, ok := t.regions.find(addr, length, need)
	if !ok {
		base, size, loc := registrationRange(target, addr, length, true)
		if r, err = t.register(base, size, grant, loc); err != nil {
			return errMessage(codeInternal, err)
		}
	}
	return mrMessage(r, t.rails.names)
}

// Dial implements transfer.Transport: a peer for the segment's control
// endpoint (rpc_meta). No connection is opened until the first request.
// Errors: transfer.ErrInvalidArgument without an endpoint;
// transfer.ErrUnsupported for a segment published by another protocol;
// transfer.ErrClosed.
func (t *Transport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	if d.Protocol != Protocol {
		return nil, fmt.Errorf("%w: segment %q speaks %q, not %s", transfer.ErrUnsupported, d.Name, d.Protocol, Protocol)
	}
	if rpc.IPOrHostName == "" || rpc.RPCPort <= 0 {
		return nil, fmt.Errorf("%w: segment %q has no rdma control endpoint (host %q, port %d)", transfer.ErrInvalidArgument, d.Name, rpc.IPOrHostName, rpc.RPCPort)
	}
	p := &peer{
		t:    t,
		name: d.Name,
		addr: net.JoinHostPort(rpc.IPOrHostName, strconv.Itoa(rpc.RPCPort)),
		ctl:  make(chan *ctlConn, 1),
	}
	p.ctl <- nil
	p.mu.live = map[*qpConn]struct{}{}
	p.mu.eps = map[path]*endpoint{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, transfer.ErrClosed
	}
	t.mu.peers[p] = struct{}{}
	return p, nil
}

// Close implements transfer.Transport: stops the control listener, ends
// control connections (destroying target-side QPs), closes peers, releases
// memory regions and every device's completion queue, PD and context. Requests
// must have finished (the engine waits for them). A second Close returns
// transfer.ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return transfer.ErrClosed
	}
	t.mu.closed = true
	var peers []*peer
	for p := range t.mu.peers {
		peers = append(peers, p)
	}
	t.mu.Unlock()
	err := t.srv.Close()
	for _, p := range peers {
		p.Close()
	}
	for _, r := range t.regions.removeAll() {
		deregMR(r)
	}
	t.closeDevices()
	return err
}

// ctlConn is a peer's control connection; gen numbers reconnections, since
// the target destroys a connection's QPs when it ends.
type ctlConn struct {
	conn net.Conn
	r    *bufio.Reader
	gen  uint64
}

// qpConn is one connected QP with its own CQ, on its endpoint's local
// device.
type qpConn struct {
	ep     *endpoint
	cq     *cq
	qp     *qp
	remote qpRef  // the target's end
	gen    uint64 // control connection generation it was made on
}

// endpoint holds the QPs of one path (local device, peer device), as
// upstream's RdmaEndPoint: up to QPsPerPeer of them.
type endpoint struct {
	key   path
	idle  chan *qpConn  // connected QPs not in use
	slots chan struct{} // one token per existing QP (cap QPsPerPeer)
}

type peer struct {
	t     *Transport
	name  string
	addr  string
	ctl   chan *ctlConn // 1 slot: the control connection (nil: not connected); holding it serialises requests
	gen   atomic.Uint64 // generation of the current control connection
	rkeys regionCache   // peer regions (keys per peer device, location)
	mu    struct {
		sync.Mutex
		eps      map[path]*endpoint   // created on first use
		live     map[*qpConn]struct{} // every QP, for Close
		released []qpRef              // target QPs to release on the next connect
		matrix   map[string][2][]string
		conn     net.Conn // current control connection, for Close
		closed   bool
	}
}

// request sends m on the control connection (connecting if needed) and
// returns the answer and the connection's generation. Errors:
// transfer.ErrRejected for a refused range; ErrHandshake (wrapped) for an
// error answer, and wrapping errUnreachable too for a connection that
// cannot be made or broke; ctx's error; transfer.ErrClosed.
func (p *peer) request(ctx context.Context, m *message) (*message, uint64, error) {
	var c *ctlConn
	select {
	case c = <-p.ctl:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	defer func() { p.ctl <- c }()
	if c == nil {
		d := net.Dialer{Timeout: p.t.cfg.DialTimeout}
		conn, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			return nil, 0, fmt.Errorf("%w: %w: dial %s: %v", ErrHandshake, errUnreachable, p.addr, err)
		}
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			conn.Close()
			return nil, 0, transfer.ErrClosed
		}
		p.mu.conn = conn
		p.mu.Unlock()
		c = &ctlConn{conn: conn, r: bufio.NewReader(conn), gen: p.gen.Add(1)}
	}
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(dl)
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) (*message, uint64, error) {
		c.conn.Close()
		c = nil
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, fmt.Errorf("%w: %w: %s: %v", ErrHandshake, errUnreachable, p.addr, err)
	}
	if err := writeMessage(c.conn, m); err != nil {
		return fail(err)
	}
	resp, err := readMessage(c.r, p.t.cfg.MaxMessage)
	if err != nil {
		return fail(err)
	}
	switch {
	case resp.Op == opError && resp.Code == codeRejected:
		return nil, 0, fmt.Errorf("%w: %s", transfer.ErrRejected, resp.Error)
	case resp.Op == opError:
		return nil, 0, fmt.Errorf("%w: %s: target: %s (%s)", ErrHandshake, p.addr, resp.Error, resp.Code)
	case resp.Op != m.Op:
		return fail(fmt.Errorf("answer %q to %q", resp.Op, m.Op))
	}
	return resp, c.gen, nil
}

// remoteRegion returns the peer region covering [addr, addr+n) that op
// goes to: its rkey on each peer device and its location (peerRegion:
// cached, else asked for). Errors: the control channel's, ErrHandshake
// for a bad answer, transfer.ErrRejected for a range the target refuses
// or a WRITE to a region it registered read-only.
func (p *peer) remoteRegion(ctx context.Context, op transfer.Opcode, addr, n uint64) (region, error) {
	return peerRegion(&p.rkeys, op, addr, n, func() (region, error) {
		resp, _, err := p.request(ctx, &message{Op: opMR, Addr: addr, Length: n})
		if err != nil {
			return region{}, err
		}
		return checkMR(resp, addr, n)
	})
}

// matrix returns the peer's priority matrix (restricted to its devices,
// wildcard resolved; see peerMatrix), asking for it once per peer.
func (p *peer) matrix(ctx context.Context) (map[string][2][]string, error) {
	p.mu.Lock()
	m := p.mu.matrix
	p.mu.Unlock()
	if m != nil {
		return m, nil
	}
	resp, _, err := p.request(ctx, &message{Op: opTopology})
	if err != nil {
		return nil, err
	}
	if m, err = peerMatrix(resp.Matrix, resp.Devices); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.mu.matrix = m
	p.mu.Unlock()
	return m, nil
}

// endpoint returns the endpoint of path k, creating it on first use.
func (p *peer) endpoint(k path) *endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.mu.eps[k]
	if ep == nil {
		n := p.t.cfg.QPsPerPeer
		ep = &endpoint{key: k, idle: make(chan *qpConn, n), slots: make(chan struct{}, n)}
		p.mu.eps[k] = ep
	}
	return ep
}

// getQP takes an idle QP of ep of the current generation or connects a
// new one when fewer than QPsPerPeer exist; otherwise it waits.
func (p *peer) getQP(ctx context.Context, ep *endpoint) (*qpConn, error) {
	for {
		var q *qpConn
		select {
		case q = <-ep.idle:
		default:
			select {
			case q = <-ep.idle:
			case ep.slots <- struct{}{}:
				q, err := p.newQP(ctx, ep)
				if err != nil {
					<-ep.slots
					return nil, err
				}
				return q, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if q.gen == p.gen.Load() {
			return q, nil
		}
		p.destroyQP(q, false) // its target end died with an old control connection
	}
}

// newQP creates a QP on ep's local device and connects it, through the
// control channel, to a QP on ep's peer device. The caller holds a slot.
func (p *peer) newQP(ctx context.Context, ep *endpoint) (*qpConn, error) {
	d := p.t.devs[ep.key.local]
	c, err := d.createCQ(d.maxWR)
	if err != nil {
		return nil, err
	}
	q, err := d.createQP(c)
	if err != nil {
		c.destroy()
		return nil, err
	}
	local := d.info(q)
	p.mu.Lock()
	release := p.mu.released
	p.mu.released = nil
	p.mu.Unlock()
	resp, gen, err := p.request(ctx, &message{Op: opConnect, QP: &local, Dev: ep.key.remote, Release: release})
	if err == nil {
		var rgid [16]byte
		if rgid, err = checkQPInfo(resp.QP); err == nil {
			err = d.connect(q, resp.QP, rgid)
			if err != nil {
				p.mu.Lock()
				p.mu.released = append(p.mu.released, qpRef{Dev: ep.key.remote, QPN: resp.QP.QPN})
				p.mu.Unlock()
			}
		}
	}
	if err != nil {
		q.destroy()
		c.destroy()
		return nil, fmt.Errorf("rdma: connect QP %s to %s %s: %w", d.name, p.addr, ep.key.remote, err)
	}
	qc := &qpConn{ep: ep, cq: c, qp: q, remote: qpRef{Dev: ep.key.remote, QPN: resp.QP.QPN}, gen: gen}
	p.mu.Lock()
	p.mu.live[qc] = struct{}{}
	p.mu.Unlock()
	return qc, nil
}

// destroyQP destroys q and frees its slot; release asks the target to drop
// its end on the next connect.
func (p *peer) destroyQP(q *qpConn, release bool) {
	q.qp.destroy()
	q.cq.destroy()
	p.mu.Lock()
	delete(p.mu.live, q)
	if release {
		p.mu.released = append(p.mu.released, q.remote)
	}
	p.mu.Unlock()
	<-q.ep.slots
}

// putQP returns q to its endpoint's idle pool, or destroys it when the
// peer closed.
func (p *peer) putQP(q *qpConn) {
	p.mu.Lock()
	if !p.mu.closed {
		q.ep.idle <- q // never blocks: at most cap(idle) QPs exist
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.destroyQP(q, false)
}

// xfer is one request being carried out.
type xfer struct {
	write        bool
	laddr, raddr uint64
	local        region // lkeys per local device, the buffer's location
	remote       region // rkeys per peer device, the target buffer's location
}

// Do implements transfer.Peer with one-sided RDMA: the whole local buffer
// moves to or from [remoteAddr, +len(local)) in SliceSize work requests.
// Each slice takes its own path (spec §1.7): the local device from this
// transport's priority matrix entry for the local buffer's location (the
// Location it was registered with), the peer device from the peer's matrix
// entry for the target buffer's location; slices on one path share a QP of
// that path's endpoint, and paths run in parallel. Slices of a failed path
// are resubmitted up to RetryCount times, retry k on the k-th path of the
// retry walk. local must be off-heap memory that stays mapped while
// registered (a buffer registered with the engine, as the engine
// guarantees): its containing engine buffer is pinned with ibv_reg_mr on
// every device on first use. Errors: transfer.ErrInvalidArgument for an
// empty buffer or bad opcode; transfer.ErrRejected when the target refuses
// the range; ErrHandshake for a control-channel failure; the last path's
// work-completion error once retries are spent; ctx's error;
// transfer.ErrClosed.
func (p *peer) Do(ctx context.Context, op transfer.Opcode, local []byte, remoteAddr uint64) error {
	p.mu.Lock()
	closed := p.mu.closed
	p.mu.Unlock()
	if closed {
		return transfer.ErrClosed
	}
	if len(local) == 0 || (op != transfer.Read && op != transfer.Write) {
		return fmt.Errorf("%w: rdma: %s of %d bytes", transfer.ErrInvalidArgument, op, len(local))
	}
	n := uint64(len(local))
	lr, err := p.t.localRegion(local, op == transfer.Read)
	if err != nil {
		return err
	}
	rr, err := p.remoteRegion(ctx, op, remoteAddr, n)
	if err != nil {
		return fmt.Errorf("rdma: %s of %d bytes at %#x on %s: %w", op, n, remoteAddr, p.name, err)
	}
	pm, err := p.matrix(ctx)
	if err != nil {
		return err
	}
	x := &xfer{write: op == transfer.Write, laddr: memory.AddrOf(local), raddr: remoteAddr, local: lr, remote: rr}
	choose := func(retry int) (path, error) { return p.t.rails.choose(lr.location, pm, rr.location, retry) }
	run := func(groups map[path][]span) ([]span, error) {
		return runGroups(ctx, groups, func(k path, spans []span) error { return p.runPath(ctx, x, k, spans) })
	}
	attempts, err := transferSpans(ctx, splitSpans(n, uint64(p.t.cfg.SliceSize)), p.t.cfg.RetryCount, choose, run)
	if err != nil {
		// The rkey may be stale (the target unregistered the buffer and
		// registered it again): the next request asks for it anew.
		p.rkeys.removeOverlapping(rr.addr, rr.length)
		return fmt.Errorf("rdma: %s of %d bytes at %#x on %s (%d attempts): %w", op, n, remoteAddr, p.name, attempts, err)
	}
	return nil
}

// runPath carries spans over path k on one QP of its endpoint. A failed
// QP is destroyed (and its target end released).
func (p *peer) runPath(ctx context.Context, x *xfer, k path, spans []span) error {
	rkey, ok := x.remote.rkeyOn(k.remote)
	if !ok {
		return fmt.Errorf("%w: peer device %q holds no key for [%#x,+%d)", ErrHandshake, k.remote, x.remote.addr, x.remote.length)
	}
	if k.local >= len(x.local.lkeys) {
		return fmt.Errorf("rdma: no local key on device %d", k.local)
	}
	lkey := x.local.lkeys[k.local]
	q, err := p.getQP(ctx, p.endpoint(k))
	if err != nil {
		return err
	}
	if err := p.run(ctx, q, x, lkey, rkey, spans); err != nil {
		p.destroyQP(q, true)
		return fmt.Errorf("path %s -> %s: %w", p.t.rails.names[k.local], k.remote, err)
	}
	p.putQP(q)
	return nil
}

// run posts the spans with at most MaxWR outstanding and busy-polls the
// QP's CQ until all completed; ctx is checked while waiting.
func (p *peer) run(ctx context.Context, q *qpConn, x *xfer, lkey, rkey uint32, spans []span) error {
	d := p.t.devs[q.ep.key.local]
	outstanding := 0
	reap := func(limit int) error { // poll until outstanding <= limit
		for spins := 1; outstanding > limit; spins++ {
			got, err := q.cq.poll()
			if err != nil {
				return err
			}
			for i := 0; i < got; i++ {
				outstanding--
				if ok, status, vendor := q.cq.completion(i); !ok {
					return fmt.Errorf("work completion: %s (vendor error %#x)", status, vendor)
				}
			}
			if got == 0 && spins%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				runtime.Gosched()
			}
		}
		return nil
	}
	for _, s := range spans {
		if outstanding >= d.maxWR {
			if err := reap(d.maxWR - 1); err != nil {
				return err
			}
		}
		if err := d.postRW(q.qp, x.write, x.laddr+s.off, uint32(s.len), lkey, x.raddr+s.off, rkey, s.off); err != nil {
			return err
		}
		outstanding++
	}
	return reap(0)
}

// Close implements transfer.Peer: closes the control connection (the
// target then destroys its QP ends) and destroys the idle QPs; a QP in use
// is destroyed when its request returns.
func (p *peer) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	conn := p.mu.conn
	var idle []*qpConn
	for _, ep := range p.mu.eps {
	drain:
		for {
			select {
			case q := <-ep.idle:
				idle = append(idle, q)
			default:
				break drain
			}
		}
	}
	p.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	for _, q := range idle {
		p.destroyQP(q, false)
	}
	p.t.mu.Lock()
	delete(p.t.mu.peers, p)
	p.t.mu.Unlock()
	return nil
}
