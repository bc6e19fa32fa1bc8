//go:build rdma

package rdma

import (
	"bufio"
	"context"
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
	dev     *device
	srvCQ   *cq         // shared by target-side QPs; never polled (one-sided ops raise no target completions)
	regions regionCache // this process's memory regions

	mu struct {
		sync.Mutex
		ln     net.Listener
		target transfer.Target
		conns  map[net.Conn]struct{} // accepted control connections
		peers  map[*peer]struct{}
		closed bool
	}
	wg sync.WaitGroup // accept loop and control handlers
}

// New opens cfg.Device (default: the first device), checks its port,
// allocates a protection domain and a completion queue. Errors: the
// Validate error; ErrNoDevice (wrapping transfer.ErrUnsupported) when no
// device, the named device or an active port is missing; verbs errors.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names, err := deviceList()
	if err != nil {
		return nil, err
	}
	name := cfg.Device
	if name == "" {
		name = names[0]
	} else if !slices.Contains(names, name) {
		return nil, fmt.Errorf("%w: device %q not among %v", ErrNoDevice, name, names)
	}
	dev, err := openDevice(name, &cfg)
	if err != nil {
		return nil, err
	}
	srvCQ, err := dev.createCQ(dev.maxCQE)
	if err != nil {
		dev.close()
		return nil, err
	}
	t := &Transport{cfg: cfg, dev: dev, srvCQ: srvCQ}
	t.mu.conns = map[net.Conn]struct{}{}
	t.mu.peers = map[*peer]struct{}{}
	return t, nil
}

// Device is the name of the opened verbs device.
func (t *Transport) Device() string { return t.dev.name }

// Protocol implements transfer.Transport ("rdma").
func (t *Transport) Protocol() string { return Protocol }

// Listen implements transfer.Transport: serves the control channel on
// BindAddr; memory is registered on first use, checked against target.
// Errors: the listen error naming the address; transfer.ErrClosed.
func (t *Transport) Listen(name string, target transfer.Target) error {
	ln, err := net.Listen("tcp", t.cfg.BindAddr)
	if err != nil {
		return fmt.Errorf("rdma: listen %s for segment %q: %w", t.cfg.BindAddr, name, err)
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		ln.Close()
		return transfer.ErrClosed
	}
	t.mu.ln = ln
	t.mu.target = target
	t.mu.Unlock()
	t.wg.Add(1)
	go t.accept(ln, target)
	return nil
}

// Publish implements transfer.Transport: protocol "rdma" and the control
// channel endpoint as rpc_meta (ip_or_host_name, rpc_port).
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) {
	d.Protocol = Protocol
	t.mu.Lock()
	ln := t.mu.ln
	t.mu.Unlock()
	host := t.cfg.Host
	if ln != nil {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			rpc.RPCPort = a.Port
			if host == "" {
				host = a.IP.String()
				if a.IP.IsUnspecified() {
					host = lanAddress()
				}
			}
		}
	}
	rpc.IPOrHostName = host
}

// lanAddress is the first non-loopback IPv4 address, or 127.0.0.1.
func lanAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// DeregisterMemory drops every memory region of this transport that
// overlaps [addr, addr+length) and returns how many it dropped. Call it
// before unmapping a buffer that was registered with the engine; peers
// holding the old rkey then fail with a remote access error.
func (t *Transport) DeregisterMemory(addr, length uint64) int {
	rs := t.regions.removeOverlapping(addr, length)
	for _, r := range rs {
		deregMR(r)
	}
	return len(rs)
}

// register registers [addr, addr+length), or returns an equivalent region
// another goroutine registered meanwhile.
func (t *Transport) register(addr, length uint64, remote bool) (region, error) {
	r, err := t.dev.regMR(addr, length, remote)
	if err != nil {
		return region{}, err
	}
	got, added := t.regions.add(r)
	if !added {
		deregMR(r)
	}
	return got, nil
}

// localKey returns the lkey for a local buffer, registering the engine
// buffer that contains it on first use.
func (t *Transport) localKey(b []byte) (uint32, error) {
	addr, n := memory.AddrOf(b), uint64(len(b))
	if r, ok := t.regions.find(addr, n, false); ok {
		return r.lkey, nil
	}
	t.mu.Lock()
	target := t.mu.target
	t.mu.Unlock()
	base, size := addr, n
	if target != nil {
		base, size = registrationRange(target, addr, n, false)
	}
	r, err := t.register(base, size, false)
	if err != nil {
		return 0, err
	}
	return r.lkey, nil
}

func (t *Transport) accept(ln net.Listener, target transfer.Target) {
	defer t.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.mu.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.mu.conns[c] = struct{}{}
		t.mu.Unlock()
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c, target)
			t.mu.Lock()
			delete(t.mu.conns, c)
			t.mu.Unlock()
			c.Close()
		}()
	}
}

// serve answers one control connection. The target-side QPs it creates
// live until the connection ends.
func (t *Transport) serve(c net.Conn, target transfer.Target) {
	qps := map[uint32]*qp{}
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
			for _, n := range m.Release {
				if q, ok := qps[n]; ok {
					q.destroy()
					delete(qps, n)
				}
			}
			if len(qps) >= maxServerQPs {
				resp = errMessage(codeBadReq, fmt.Errorf("more than %d queue pairs on one connection", maxServerQPs))
				break
			}
			q, info, err := t.acceptQP(m.QP)
			if err != nil {
				resp = errMessage(codeInternal, err)
				break
			}
			qps[q.num()] = q
			resp = &message{Op: opConnect, QP: &info}
		case opMR:
			resp = t.serveMR(target, m.Addr, m.Length)
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

// acceptQP creates the target end of a connection requested by remote.
func (t *Transport) acceptQP(remote *qpInfo) (*qp, qpInfo, error) {
	rgid, err := checkQPInfo(remote)
	if err != nil {
		return nil, qpInfo{}, err
	}
	q, err := t.dev.createQP(t.srvCQ)
	if err != nil {
		return nil, qpInfo{}, err
	}
	if err := t.dev.connect(q, remote, rgid); err != nil {
		q.destroy()
		return nil, qpInfo{}, err
	}
	return q, t.dev.info(q), nil
}

// serveMR answers an rkey request: the range must resolve as
// remote-accessible in target; the whole containing buffer is registered
// when target can list buffers.
func (t *Transport) serveMR(target transfer.Target, addr, length uint64) *message {
	if _, err := target.Resolve(addr, length); err != nil {
		return errMessage(codeRejected, err)
	}
	r, ok := t.regions.find(addr, length, true)
	if !ok {
		base, size := registrationRange(target, addr, length, true)
		var err error
		if r, err = t.register(base, size, true); err != nil {
			return errMessage(codeInternal, err)
		}
	}
	return &message{Op: opMR, Addr: r.addr, Length: r.length, RKey: r.rkey}
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
		t:     t,
		name:  d.Name,
		addr:  net.JoinHostPort(rpc.IPOrHostName, strconv.Itoa(rpc.RPCPort)),
		ctl:   make(chan *ctlConn, 1),
		idle:  make(chan *qpConn, t.cfg.QPsPerPeer),
		slots: make(chan struct{}, t.cfg.QPsPerPeer),
	}
	p.ctl <- nil
	p.mu.live = map[*qpConn]struct{}{}
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
// memory regions, the completion queue, the PD and the device. Requests
// must have finished (the engine waits for them). A second Close returns
// transfer.ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return transfer.ErrClosed
	}
	t.mu.closed = true
	ln := t.mu.ln
	for c := range t.mu.conns {
		c.Close()
	}
	var peers []*peer
	for p := range t.mu.peers {
		peers = append(peers, p)
	}
	t.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	t.wg.Wait()
	for _, p := range peers {
		p.Close()
	}
	for _, r := range t.regions.removeAll() {
		deregMR(r)
	}
	t.srvCQ.destroy()
	t.dev.close()
	return err
}

// ctlConn is a peer's control connection; gen numbers reconnections, since
// the target destroys a connection's QPs when it ends.
type ctlConn struct {
	conn net.Conn
	r    *bufio.Reader
	gen  uint64
}

// qpConn is one connected QP with its own CQ.
type qpConn struct {
	cq        *cq
	qp        *qp
	remoteQPN uint32
	gen       uint64 // control connection generation it was made on
}

type peer struct {
	t     *Transport
	name  string
	addr  string
	ctl   chan *ctlConn // 1 slot: the control connection (nil: not connected); holding it serialises requests
	gen   atomic.Uint64 // generation of the current control connection
	idle  chan *qpConn  // connected QPs not in use
	slots chan struct{} // one token per existing QP (cap QPsPerPeer)
	rkeys regionCache   // remote regions (keys only)
	mu    struct {
		sync.Mutex
		live     map[*qpConn]struct{} // every QP, for Close
		released []uint32             // target QPNs to release on the next connect
		conn     net.Conn             // current control connection, for Close
		closed   bool
	}
}

// request sends m on the control connection (connecting if needed) and
// returns the answer and the connection's generation. Errors:
// transfer.ErrRejected for a refused range; ErrHandshake (wrapped) for a
// broken channel or an error answer; ctx's error; transfer.ErrClosed.
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
			return nil, 0, fmt.Errorf("%w: dial %s: %v", ErrHandshake, p.addr, err)
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
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrHandshake, p.addr, err)
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

// remoteKey returns the rkey covering [addr, addr+n) on the target.
func (p *peer) remoteKey(ctx context.Context, addr, n uint64) (uint32, error) {
	if r, ok := p.rkeys.find(addr, n, false); ok {
		return r.rkey, nil
	}
	resp, _, err := p.request(ctx, &message{Op: opMR, Addr: addr, Length: n})
	if err != nil {
		return 0, err
	}
	r := region{addr: resp.Addr, length: resp.Length, rkey: resp.RKey, remote: true}
	if !r.covers(addr, n) {
		return 0, fmt.Errorf("%w: target region [%#x,+%d) does not cover [%#x,+%d)", ErrHandshake, r.addr, r.length, addr, n)
	}
	p.rkeys.add(r)
	return r.rkey, nil
}

// getQP takes an idle QP of the current generation or connects a new one
// when fewer than QPsPerPeer exist; otherwise it waits.
func (p *peer) getQP(ctx context.Context) (*qpConn, error) {
	for {
		var q *qpConn
		select {
		case q = <-p.idle:
		default:
			select {
			case q = <-p.idle:
			case p.slots <- struct{}{}:
				q, err := p.newQP(ctx)
				if err != nil {
					<-p.slots
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

// newQP creates a QP and connects it through the control channel. The
// caller holds a slot.
func (p *peer) newQP(ctx context.Context) (*qpConn, error) {
	d := p.t.dev
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
	resp, gen, err := p.request(ctx, &message{Op: opConnect, QP: &local, Release: release})
	if err == nil {
		var rgid [16]byte
		if rgid, err = checkQPInfo(resp.QP); err == nil {
			err = d.connect(q, resp.QP, rgid)
			if err != nil {
				p.mu.Lock()
				p.mu.released = append(p.mu.released, resp.QP.QPN)
				p.mu.Unlock()
			}
		}
	}
	if err != nil {
		q.destroy()
		c.destroy()
		return nil, fmt.Errorf("rdma: connect QP to %s: %w", p.addr, err)
	}
	qc := &qpConn{cq: c, qp: q, remoteQPN: resp.QP.QPN, gen: gen}
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
		p.mu.released = append(p.mu.released, q.remoteQPN)
	}
	p.mu.Unlock()
	<-p.slots
}

// putQP returns q to the idle pool, or destroys it when the peer closed.
func (p *peer) putQP(q *qpConn) {
	p.mu.Lock()
	if !p.mu.closed {
		p.idle <- q // never blocks: at most cap(idle) QPs exist
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.destroyQP(q, false)
}

// Do implements transfer.Peer with one-sided RDMA: the whole local buffer
// moves to or from [remoteAddr, +len(local)) in SliceSize work requests.
// local must be off-heap memory that stays mapped while registered (a
// buffer registered with the engine, as the engine guarantees): its
// containing engine buffer is pinned with ibv_reg_mr on first use.
// Errors: transfer.ErrInvalidArgument for an empty buffer or bad opcode;
// transfer.ErrRejected when the target refuses the range; ErrHandshake for
// a control-channel failure; a work-completion error (the QP is then
// replaced); ctx's error; transfer.ErrClosed.
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
	lkey, err := p.t.localKey(local)
	if err != nil {
		return err
	}
	rkey, err := p.remoteKey(ctx, remoteAddr, n)
	if err != nil {
		return err
	}
	q, err := p.getQP(ctx)
	if err != nil {
		return err
	}
	if err := p.run(ctx, q, op == transfer.Write, memory.AddrOf(local), lkey, remoteAddr, rkey, n); err != nil {
		p.destroyQP(q, true)
		return fmt.Errorf("rdma: %s of %d bytes at %#x on %s: %w", op, n, remoteAddr, p.name, err)
	}
	p.putQP(q)
	return nil
}

// run posts the slices with at most MaxWR outstanding and busy-polls the
// QP's CQ until all completed; ctx is checked while waiting.
func (p *peer) run(ctx context.Context, q *qpConn, write bool, laddr uint64, lkey uint32, raddr uint64, rkey uint32, n uint64) error {
	d := p.t.dev
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
	err := forEachSlice(n, uint64(p.t.cfg.SliceSize), func(off, l uint64) error {
		if outstanding >= d.maxWR {
			if err := reap(d.maxWR - 1); err != nil {
				return err
			}
		}
		if err := d.postRW(q.qp, write, laddr+off, uint32(l), lkey, raddr+off, rkey, off); err != nil {
			return err
		}
		outstanding++
		return nil
	})
	if err == nil {
		err = reap(0)
	}
	return err
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
drain:
	for {
		select {
		case q := <-p.idle:
			idle = append(idle, q)
		default:
			break drain
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
