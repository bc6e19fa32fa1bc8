package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// maxWindow bounds Config.Window (the in-flight ring lives on the stack).
const maxWindow = 16

// Dial implements transfer.Transport: a pooled peer for the segment's
// ip_or_host_name:tcp_data_port. No connection is opened until the first
// request. Errors: ErrInvalidArgument when the descriptor has no port or
// host; ErrUnsupported for a proto version below 2 (v1 cannot acknowledge
// writes).
func (t *Transport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	if d.TCPDataPort <= 0 || rpc.IPOrHostName == "" {
		return nil, fmt.Errorf("%w: segment %q has no tcp address (host %q, port %d)", transfer.ErrInvalidArgument, d.Name, rpc.IPOrHostName, d.TCPDataPort)
	}
	if d.TCPProtoVersion < 2 {
		return nil, fmt.Errorf("%w: segment %q speaks tcp protocol v%d, acknowledged writes need v2", transfer.ErrUnsupported, d.Name, d.TCPProtoVersion)
	}
	p := &peer{
		cfg:   t.cfg,
		addr:  net.JoinHostPort(rpc.IPOrHostName, strconv.Itoa(d.TCPDataPort)),
		slots: make(chan struct{}, t.cfg.MaxConnsPerPeer),
		idle:  make(chan pooledConn, t.cfg.MaxConnsPerPeer),
	}
	return p, nil
}

// Probe implements transfer.Prober: it connects to the descriptor's data
// port (bounded by DialTimeout and ctx) and closes the connection at once.
func (t *Transport) Probe(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) error {
	if d.TCPDataPort <= 0 || rpc.IPOrHostName == "" {
		return fmt.Errorf("%w: segment %q has no tcp address", transfer.ErrInvalidArgument, d.Name)
	}
	dl := net.Dialer{Timeout: t.cfg.DialTimeout}
	c, err := dl.DialContext(ctx, "tcp", net.JoinHostPort(rpc.IPOrHostName, strconv.Itoa(d.TCPDataPort)))
	if err != nil {
		return err
	}
	return c.Close()
}

type pooledConn struct {
	net.Conn
	lastUsed time.Time
}

// peer is the client side towards one segment.
type peer struct {
	cfg   Config
	addr  string
	slots chan struct{}   // one token per open connection (caps MaxConnsPerPeer)
	idle  chan pooledConn // open, unused connections; each holds its slot
	dials atomic.Int64    // connections opened (tests, metrics)

	mu struct {
		sync.Mutex
		closed bool // guards pushes into idle against Close's drain
	}
}

// acquire returns a connection: an idle one that is not too old, else a new
// one once a slot is free. It waits for whichever comes first, so a
// connection released into the pool wakes a waiter just as a closed one
// does. Errors: ErrClosed, dial errors, ctx.
func (p *peer) acquire(ctx context.Context) (net.Conn, error) {
	for {
		p.mu.Lock()
		closed := p.mu.closed
		p.mu.Unlock()
		if closed {
			return nil, transfer.ErrClosed
		}
		// Prefer a pooled connection over dialling.
		select {
		case pc := <-p.idle:
			if c := p.fresh(pc); c != nil {
				return c, nil
			}
			continue
		default:
		}
		select {
		case pc := <-p.idle:
			if c := p.fresh(pc); c != nil {
				return c, nil
			}
			continue
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		d := net.Dialer{Timeout: p.cfg.DialTimeout}
		c, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			<-p.slots
			return nil, fmt.Errorf("dial %s: %w", p.addr, err)
		}
		p.dials.Add(1)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		return c, nil
	}
}

// fresh returns pc's connection, or closes it (freeing its slot) and
// returns nil when it sat idle longer than IdleTimeout.
func (p *peer) fresh(pc pooledConn) net.Conn {
	if time.Since(pc.lastUsed) < p.cfg.IdleTimeout {
		return pc.Conn
	}
	pc.Close()
	<-p.slots
	return nil
}

// release returns a healthy connection to the pool, or closes it.
func (p *peer) release(c net.Conn, healthy bool) {
	p.mu.Lock()
	if healthy && !p.mu.closed && len(p.idle) < p.cfg.MaxIdlePerPeer {
		select {
		case p.idle <- pooledConn{Conn: c, lastUsed: time.Now()}:
			p.mu.Unlock()
			return
		default:
		}
	}
	p.mu.Unlock()
	c.Close()
	<-p.slots
}

// Close implements transfer.Peer: closes idle connections; connections in
// use are closed when their request ends.
func (p *peer) Close() error {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	for {
		select {
		case pc := <-p.idle:
			pc.Close()
			<-p.slots
		default:
			return nil
		}
	}
}

// job is one request being executed: its slices are handed out by next and,
// after a connection failure, by the retry list.
type job struct {
	op     transfer.Opcode
	local  []byte
	remote uint64
	slice  int // bytes per slice
	count  int // number of slices
	next   atomic.Int64

	mu struct {
		sync.Mutex
		retry    []int // slices to resend
		attempts map[int]int
		err      error // first fatal error
		pending  int   // slices not yet acknowledged
	}
	progress chan struct{} // signalled when retry gains work or pending hits 0
}

// bounds returns slice i's [off, end) in the request.
func (j *job) bounds(i int) (int, int) {
	off := i * j.slice
	end := off + j.slice
	if i == j.count-1 {
		end = len(j.local)
	}
	return off, end
}

// take returns a slice to send, or -1 when none is available now.
func (j *job) take() int {
	if n := j.next.Add(1) - 1; n < int64(j.count) {
		return int(n)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if k := len(j.mu.retry); k > 0 {
		i := j.mu.retry[k-1]
		j.mu.retry = j.mu.retry[:k-1]
		return i
	}
	return -1
}

func (j *job) signal() {
	select {
	case j.progress <- struct{}{}:
	default:
	}
}

// acked records one acknowledged slice.
func (j *job) acked() {
	j.mu.Lock()
	j.mu.pending--
	done := j.mu.pending == 0
	j.mu.Unlock()
	if done {
		j.signal()
	}
}

// failed records a fatal error; the request stops.
func (j *job) failed(err error) {
	j.mu.Lock()
	if j.mu.err == nil {
		j.mu.err = err
	}
	j.mu.Unlock()
	j.signal()
}

// requeue gives unacknowledged slices back after a connection failure;
// a slice past its retry budget fails the request with cause.
func (j *job) requeue(slices []int, cause error, limit int) {
	j.mu.Lock()
	if j.mu.attempts == nil {
		j.mu.attempts = map[int]int{}
	}
	for _, i := range slices {
		j.mu.attempts[i]++
		if j.mu.attempts[i] >= limit && j.mu.err == nil {
			j.mu.err = fmt.Errorf("slice %d failed %d times: %w", i, j.mu.attempts[i], cause)
		}
		j.mu.retry = append(j.mu.retry, i)
	}
	j.mu.Unlock()
	j.signal()
}

func (j *job) state() (pending int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.pending, j.mu.err
}

// Do implements transfer.Peer: slices local and stripes the slices over up
// to Stripe pooled connections; returns once every slice was acknowledged
// (nil), or on the first fatal error after every worker has stopped
// touching local.
func (p *peer) Do(ctx context.Context, op transfer.Opcode, local []byte, remoteAddr uint64) error {
	if len(local) == 0 {
		return fmt.Errorf("%w: empty request", transfer.ErrInvalidArgument)
	}
	if uint64(len(local)) > ^uint64(0)-remoteAddr {
		return fmt.Errorf("%w: range [%#x,+%d) wraps the address space", transfer.ErrInvalidArgument, remoteAddr, len(local))
	}
	j := &job{op: op, local: local, remote: remoteAddr, slice: p.cfg.SliceSize, progress: make(chan struct{}, 1)}
	j.count = (len(local) + j.slice - 1) / j.slice
	if j.count > 1 {
		if tail := len(local) - (j.count-1)*j.slice; tail <= j.slice/4 {
			j.count-- // merge a small tail into the previous slice
		}
	}
	j.mu.pending = j.count
	workers := min(j.count, p.cfg.Stripe)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer wg.Done()
			p.work(ctx, j)
		}()
	}
	// Wait for completion or a fatal error; then stop the workers.
	for {
		pending, err := j.state()
		if pending == 0 || err != nil {
			break
		}
		select {
		case <-j.progress:
			continue
		case <-ctx.Done():
		}
		break
	}
	cancel()
	wg.Wait()
	pending, err := j.state()
	if pending == 0 {
		return nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = context.Canceled
	}
	return fmt.Errorf("tcp %s: %w", p.addr, err)
}

// work runs one connection's share of a job until no slice is left to take,
// the job failed, or ctx ended. On a connection error it requeues the
// connection's unacknowledged slices and continues on a fresh connection
// (another path), so its own slices are always resent by itself.
func (p *peer) work(ctx context.Context, j *job) {
	for ctx.Err() == nil {
		if _, err := j.state(); err != nil {
			return
		}
		c, err := p.acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				j.failed(err)
			}
			return
		}
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		unacked, err := p.stream(c, j)
		healthy := err == nil && stop()
		p.release(c, healthy)
		if err == nil {
			// Nothing left to take: the slices still in flight belong to
			// other workers, and a worker whose connection fails resends its
			// own slices, so this one is done.
			return
		}
		if errors.Is(err, transfer.ErrRejected) {
			j.failed(err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		j.requeue(unacked, err, p.cfg.RetryCount)
	}
}

// stream sends slices of j on c with up to Window in flight and reads their
// acknowledgements in order. It returns nil when no slice is left to take,
// or the connection error with the slices sent but not acknowledged.
func (p *peer) stream(c net.Conn, j *job) ([]int, error) {
	var ring [maxWindow]int // in-flight slices, oldest at head
	head, n := 0, 0
	var hdr [headerLen]byte
	var st [statusLen]byte
	var bufs [2][]byte
	unacked := func() []int {
		out := make([]int, 0, n)
		for k := 0; k < n; k++ {
			out = append(out, ring[(head+k)%maxWindow])
		}
		return out
	}
	window := p.cfg.Window
	c.SetDeadline(time.Time{})
	for {
		// Fill the window.
		for n < window {
			i := j.take()
			if i < 0 {
				break
			}
			off, end := j.bounds(i)
			binary.LittleEndian.PutUint64(hdr[0:], uint64(end-off))
			binary.LittleEndian.PutUint64(hdr[8:], j.remote+uint64(off))
			hdr[16] = byte(j.op) | protoV2
			var err error
			if j.op == transfer.Write {
				bufs[0], bufs[1] = hdr[:], j.local[off:end]
				nb := net.Buffers(bufs[:])
				_, err = nb.WriteTo(c)
			} else {
				_, err = c.Write(hdr[:])
			}
			ring[(head+n)%maxWindow] = i
			n++
			if err != nil {
				return unacked(), err
			}
		}
		if n == 0 {
			return nil, nil
		}
		// Read the oldest acknowledgement.
		i := ring[head]
		if _, err := io.ReadFull(c, st[:]); err != nil {
			return unacked(), err
		}
		v := binary.LittleEndian.Uint64(st[:])
		if v&0xFFFFFFFF00000000 != statusMagic {
			return unacked(), fmt.Errorf("bad status frame %#x", v)
		}
		off, end := j.bounds(i)
		if v&0xFFFFFFFF != statusOK {
			return unacked(), fmt.Errorf("%w: %s of %d bytes at %#x", transfer.ErrRejected, j.op, end-off, j.remote+uint64(off))
		}
		if j.op == transfer.Read {
			if _, err := io.ReadFull(c, j.local[off:end]); err != nil {
				return unacked(), err
			}
		}
		head = (head + 1) % maxWindow
		n--
		j.acked()
	}
}
