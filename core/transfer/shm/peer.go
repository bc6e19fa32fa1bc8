package shm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// mapping is one target buffer mapped into this process.
type mapping struct {
	base, size uint64         // the buffer in the target's address space
	buf        []byte         // the local mapping, len size
	region     *memory.Region // owns buf and the descriptor
}

// peer is a transfer.Peer for one target segment.
type peer struct {
	seg, addr string // segment name, socket address (for errors and dialling)
	dial      time.Duration

	closed atomic.Bool // Close was called
	gone   atomic.Bool // the control connection broke (not by Close)

	// sem admits one descriptor request at a time (dial, ask, map); it is a
	// channel so that waiting for it honours ctx. nextID is guarded by it.
	sem    chan struct{}
	nextID uint64

	// mu is read-held by every copy and write-held to change the mappings,
	// so nothing is unmapped while a copy runs.
	mu struct {
		sync.RWMutex
		maps   []mapping // sorted by base, non-overlapping
		closed bool
	}
	// cmu guards the control connection.
	cmu struct {
		sync.Mutex
		ctrl   *control
		closed bool
	}
	wg sync.WaitGroup // the control connection's reader
}

func newPeer(seg, addr string, dial time.Duration) *peer {
	return &peer{seg: seg, addr: addr, dial: dial, sem: make(chan struct{}, 1)}
}

// Do implements transfer.Peer: a bounds-checked copy between local and the
// target's buffer holding [remoteAddr, +len(local)), mapping the buffer on
// first use. Errors: ErrInvalidArgument (empty local, bad opcode);
// transfer.ErrRejected when the range is not inside one memfd-backed
// registered buffer of the target; ErrClosed after Close; ErrPeerGone once
// the target's transport closed; the dial error; ctx's error.
func (p *peer) Do(ctx context.Context, op transfer.Opcode, local []byte, remoteAddr uint64) error {
	if op != transfer.Read && op != transfer.Write {
		return fmt.Errorf("%w: shm: opcode %d", transfer.ErrInvalidArgument, op)
	}
	if len(local) == 0 {
		return fmt.Errorf("%w: shm: zero-length %s at %#x", transfer.ErrInvalidArgument, op, remoteAddr)
	}
	for attempt := 0; ; attempt++ {
		if err := p.usable(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		found, err := p.copy(op, local, remoteAddr)
		if found || err != nil {
			return err
		}
		if attempt == 2 {
			// Mapped twice and evicted twice by overlapping newer buffers
			// in between: the target is re-registering under us.
			return fmt.Errorf("shm: segment %q: buffer at %#x keeps changing", p.seg, remoteAddr)
		}
		if err := p.fetch(ctx, remoteAddr, uint64(len(local))); err != nil {
			return err
		}
	}
}

// DoV implements transfer.VectorPeer: the buffers of local, in order,
// against the one remote range [remoteAddr, +total), bounds-checked and
// copied under one lookup of the mapping. Errors as Do.
func (p *peer) DoV(ctx context.Context, op transfer.Opcode, local [][]byte, remoteAddr uint64) error {
	if op != transfer.Read && op != transfer.Write {
		return fmt.Errorf("%w: shm: opcode %d", transfer.ErrInvalidArgument, op)
	}
	var n uint64
	for _, l := range local {
		if len(l) == 0 {
			return fmt.Errorf("%w: shm: zero-length piece of a %s at %#x", transfer.ErrInvalidArgument, op, remoteAddr)
		}
		n += uint64(len(l))
	}
	if n == 0 {
		return fmt.Errorf("%w: shm: zero-length %s at %#x", transfer.ErrInvalidArgument, op, remoteAddr)
	}
	for attempt := 0; ; attempt++ {
		if err := p.usable(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		found, err := p.copyV(op, local, n, remoteAddr)
		if found || err != nil {
			return err
		}
		if attempt == 2 {
			return fmt.Errorf("shm: segment %q: buffer at %#x keeps changing", p.seg, remoteAddr)
		}
		if err := p.fetch(ctx, remoteAddr, n); err != nil {
			return err
		}
	}
}

func (p *peer) usable() error {
	if p.closed.Load() {
		return fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	}
	if p.gone.Load() {
		return p.goneErr()
	}
	return nil
}

func (p *peer) goneErr() error {
	p.cmu.Lock()
	c := p.cmu.ctrl
	p.cmu.Unlock()
	cause := error(io.EOF)
	if c != nil {
		select {
		case <-c.done:
			cause = c.err
		default:
		}
	}
	return fmt.Errorf("%w: segment %q at %s: control connection lost: %v", ErrPeerGone, p.seg, p.addr, cause)
}

// copy performs the request if a mapping holds remoteAddr. found is false
// when none does (the caller asks the target).
func (p *peer) copy(op transfer.Opcode, local []byte, remoteAddr uint64) (found bool, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	remote, found, err := p.remoteLocked(op, uint64(len(local)), remoteAddr)
	if remote == nil {
		return found, err
	}
	if op == transfer.Write {
		memory.Copy(remote, local)
	} else {
		memory.Copy(local, remote)
	}
	return true, nil
}

// copyV is copy for the n bytes of the buffers local, in order, against
// [remoteAddr, +n).
func (p *peer) copyV(op transfer.Opcode, local [][]byte, n, remoteAddr uint64) (found bool, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	remote, found, err := p.remoteLocked(op, n, remoteAddr)
	if remote == nil {
		return found, err
	}
	if op == transfer.Write {
		memory.Gather(remote, local)
	} else {
		memory.Scatter(local, remote)
	}
	return true, nil
}

// remoteLocked returns the n mapped bytes at remoteAddr, or nil with found
// false when no mapping holds remoteAddr, or nil with an error (found
// true) when the peer is closed or the range leaves its mapping. p.mu must
// be held (read) for as long as the bytes are used.
func (p *peer) remoteLocked(op transfer.Opcode, n, remoteAddr uint64) (remote []byte, found bool, err error) {
	if p.mu.closed {
		return nil, true, fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	}
	m := p.findLocked(remoteAddr)
	if m == nil {
		return nil, false, nil
	}
	off := remoteAddr - m.base
	if n > m.size-off { // off < m.size by findLocked
		return nil, true, fmt.Errorf("%w: shm: %s of %d bytes at %#x leaves buffer [%#x,+%d) of segment %q", transfer.ErrRejected, op, n, remoteAddr, m.base, m.size, p.seg)
	}
	return m.buf[off : off+n], true, nil
}

// findLocked returns the mapping holding addr, or nil. p.mu must be held.
func (p *peer) findLocked(addr uint64) *mapping {
	lo, hi := 0, len(p.mu.maps)
	for lo < hi { // first mapping with base > addr
		mid := int(uint(lo+hi) >> 1)
		if p.mu.maps[mid].base > addr {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == 0 {
		return nil
	}
	m := &p.mu.maps[lo-1]
	if addr-m.base >= m.size {
		return nil
	}
	return m
}

// fetch asks the target for the buffer holding [addr, +n) and maps it.
func (p *peer) fetch(ctx context.Context, addr, n uint64) error {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.sem }()
	p.mu.RLock()
	mapped := p.findLocked(addr) != nil
	p.mu.RUnlock()
	if mapped { // another caller mapped it while we waited
		return nil
	}
	c, err := p.control(ctx)
	if err != nil {
		return err
	}
	p.nextID++
	resp, err := c.ask(ctx, request{id: p.nextID, addr: addr, length: n})
	switch {
	case err == nil:
	case p.closed.Load():
		return fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	case ctx.Err() != nil:
		return fmt.Errorf("shm: segment %q at %s: descriptor request: %w", p.seg, p.addr, err)
	default:
		// No reply and no cancellation: the connection is broken. Make sure
		// the reader ends too, so the peer is marked gone.
		c.conn.Close()
		return fmt.Errorf("%w: segment %q at %s: %v", ErrPeerGone, p.seg, p.addr, err)
	}
	switch resp.status {
	case statusOK:
	case statusNotRegistered:
		return fmt.Errorf("%w: shm: [%#x,+%d) is not inside a registered buffer of segment %q", transfer.ErrRejected, addr, n, p.seg)
	case statusNotShared:
		return fmt.Errorf("%w: shm: the buffer holding [%#x,+%d) of segment %q is not backed by a memory file", transfer.ErrRejected, addr, n, p.seg)
	case statusRefused:
		return fmt.Errorf("%w: shm: segment %q refused to share the buffer holding [%#x,+%d) (not exactly one sealed memory file)", transfer.ErrRejected, p.seg, addr, n)
	default:
		return fmt.Errorf("%w: segment %q: status %d", ErrProtocol, p.seg, resp.status)
	}
	// The target's answer must cover the request, be a buffer this process
	// can map, and be a file the target cannot shrink under us (SIGBUS).
	if !covers(resp.base, resp.size, addr, n) || resp.size > math.MaxInt || resp.base > math.MaxUint64-resp.size {
		unix.Close(resp.fd)
		return fmt.Errorf("%w: segment %q answered buffer [%#x,+%d) for [%#x,+%d)", ErrProtocol, p.seg, resp.base, resp.size, addr, n)
	}
	if err := sealedFile(resp.fd, resp.size, peerSeals); err != nil {
		unix.Close(resp.fd)
		return fmt.Errorf("%w: segment %q buffer [%#x,+%d): %v", ErrProtocol, p.seg, resp.base, resp.size, err)
	}
	r, err := memory.MapFD(resp.fd, int(resp.size)) // owns resp.fd from here
	if err != nil {
		return fmt.Errorf("shm: segment %q: map buffer [%#x,+%d): %w", p.seg, resp.base, resp.size, err)
	}
	// Fault the whole buffer in behind the first transfers: a page fault
	// per 4 KiB on first touch held copies of a fresh mapping to a few
	// GB/s. Best effort; it ends when the mapping is closed.
	go func() { _ = r.Prefault() }()
	return p.insert(mapping{base: resp.base, size: resp.size, buf: r.Bytes(), region: r})
}

// insert adds m, dropping cached mappings it overlaps (the target
// unregistered those buffers and registered a new one in their place).
func (p *peer) insert(m mapping) error {
	var stale []mapping
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		m.region.Close()
		return fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	}
	kept := p.mu.maps[:0:0]
	at := -1
	for _, o := range p.mu.maps {
		if o.base < m.base+m.size && m.base < o.base+o.size {
			stale = append(stale, o)
			continue
		}
		if at < 0 && o.base > m.base {
			at = len(kept)
			kept = append(kept, m)
		}
		kept = append(kept, o)
	}
	if at < 0 {
		kept = append(kept, m)
	}
	p.mu.maps = kept
	p.mu.Unlock()
	// Unreachable now and no copy runs on them (they were removed under the
	// write lock), so unmapping outside the lock is safe.
	for _, o := range stale {
		o.region.Close()
	}
	return nil
}

// control returns the control connection, dialling it on first use. Called
// with p.sem held.
func (p *peer) control(ctx context.Context) (*control, error) {
	p.cmu.Lock()
	c := p.cmu.ctrl
	p.cmu.Unlock()
	if c != nil {
		return c, nil
	}
	d := net.Dialer{Timeout: p.dial}
	conn, err := d.DialContext(ctx, "unixpacket", p.addr)
	if err != nil {
		return nil, fmt.Errorf("shm: segment %q: dial %s: %w", p.seg, p.addr, err)
	}
	c = &control{conn: conn.(*net.UnixConn), done: make(chan struct{}), resp: make(chan response, 1)}
	p.cmu.Lock()
	if p.cmu.closed {
		p.cmu.Unlock()
		conn.Close()
		return nil, fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	}
	p.cmu.ctrl = c
	p.wg.Add(1)
	p.cmu.Unlock()
	go func() {
		defer p.wg.Done()
		c.err = c.read()
		if !p.closed.Load() {
			p.gone.Store(true) // before done closes: whoever sees done sees gone
		}
		close(c.done)
	}()
	return c, nil
}

// Close implements transfer.Peer: closes the control connection, waits for
// running copies and unmaps every buffer. A second Close returns ErrClosed.
func (p *peer) Close() error {
	if p.closed.Swap(true) {
		return fmt.Errorf("%w: shm peer of segment %q", transfer.ErrClosed, p.seg)
	}
	p.cmu.Lock()
	p.cmu.closed = true
	c := p.cmu.ctrl
	p.cmu.Unlock()
	if c != nil {
		c.conn.Close() // ends the reader and any request waiting on it
	}
	p.wg.Wait()
	p.mu.Lock()
	p.mu.closed = true
	maps := p.mu.maps
	p.mu.maps = nil
	p.mu.Unlock()
	var errs []error
	for _, m := range maps {
		if err := m.region.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// control is a peer's connection to the target's socket. One goroutine
// (read) receives every reply; ask sends one request at a time (the peer's
// sem) and waits for the reply with its id.
type control struct {
	conn *net.UnixConn
	done chan struct{} // closed once read returned and the peer is marked gone
	err  error         // why read returned; written before done closes
	resp chan response // the awaited reply, handed over by read

	mu struct {
		sync.Mutex
		want uint64 // id of the request awaiting its reply; 0 none
		sent uint64 // id of the last request sent; ids grow from 1
	}
}

// ask sends req and waits for its reply, the connection's end, or ctx. A
// returned response with status OK carries a descriptor the caller owns.
func (c *control) ask(ctx context.Context, req request) (response, error) {
	c.mu.Lock()
	c.mu.want, c.mu.sent = req.id, req.id
	c.mu.Unlock()
	var out [msgLen]byte
	req.encode(&out)
	werr := c.send(ctx, out[:])
	if werr == nil {
		select {
		case r := <-c.resp:
			return r, nil
		case <-c.done:
			werr = c.err
		case <-ctx.Done():
			werr = ctx.Err()
		}
	}
	// Abandon the request: a late reply is discarded (its descriptor
	// closed) by read; one already handed over is closed here.
	c.mu.Lock()
	c.mu.want = 0
	c.mu.Unlock()
	select {
	case r := <-c.resp:
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
	default:
	}
	if ctx.Err() != nil {
		return response{}, ctx.Err()
	}
	return response{}, werr
}

// send writes one packet; ctx's end interrupts a blocked write.
func (c *control) send(ctx context.Context, pkt []byte) error {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.conn.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	_, _, err := c.conn.WriteMsgUnix(pkt, nil, nil)
	if !stop() {
		<-fired // the callback ran: wait for it, then undo its deadline
		c.conn.SetWriteDeadline(time.Time{})
	}
	return err
}

// read receives replies until the connection ends, handing the awaited one
// to ask and closing the descriptors of late replies to abandoned
// requests. A reply to a request never sent (id 0, or past the last one)
// breaks the protocol and ends the connection, as a malformed reply does.
// It returns why it ended.
func (c *control) read() error {
	var in [msgLen + 1]byte
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for a few descriptors, to see extras
	for {
		n, oobn, flags, _, err := c.conn.ReadMsgUnix(in[:], oob)
		fds := receivedFDs(oob[:oobn])
		if err != nil {
			closeFDs(fds)
			return err
		}
		if n == 0 { // EOF on a packet socket
			closeFDs(fds)
			return errors.New("closed by the target")
		}
		resp, err := decodeResponse(in[:n])
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = fmt.Errorf("%w: truncated reply (flags %#x)", ErrProtocol, flags)
		}
		if err == nil {
			want := 0
			if resp.status == statusOK {
				want = 1
			}
			if len(fds) != want {
				err = fmt.Errorf("%w: reply status %d with %d descriptors", ErrProtocol, resp.status, len(fds))
			}
		}
		if err != nil {
			closeFDs(fds)
			c.conn.Close()
			return err
		}
		if len(fds) == 1 {
			resp.fd = fds[0]
		}
		c.mu.Lock()
		if resp.id == 0 || resp.id > c.mu.sent {
			// Not a late reply to an abandoned request: no such request
			// was ever sent. Waiting for the right id would hang the
			// request until its context ends.
			c.mu.Unlock()
			closeFDs(fds)
			c.conn.Close()
			return fmt.Errorf("%w: reply to request %d, which was never sent", ErrProtocol, resp.id)
		}
		if resp.id == c.mu.want {
			c.mu.want = 0
			c.resp <- resp // buffered, and at most one request is awaited
			resp.fd = -1
		}
		c.mu.Unlock()
		if resp.fd >= 0 {
			unix.Close(resp.fd) // reply to an abandoned request
		}
	}
}
