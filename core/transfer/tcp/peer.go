package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// maxWindow bounds Config.Window (slices in flight on one connection).
const maxWindow = 256

// clientReadBuffer is the per-connection buffer status frames are read
// through, in bytes (a READ's payload is read straight into the caller's
// buffer, with the next status frame).
const clientReadBuffer = 4 << 10

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
	return &peer{cfg: t.cfg, addr: net.JoinHostPort(rpc.IPOrHostName, strconv.Itoa(d.TCPDataPort)), born: time.Now()}, nil
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

// peer is the client side towards one segment: a pool of multiplexed
// connections (see conn) shared by every request to the segment.
type peer struct {
	cfg    Config
	addr   string
	dials  atomic.Int64 // connections opened (tests, metrics)
	closed atomic.Bool  // set once by Close (under mu), read lock-free
	jobs   sync.Pool    // *job, reused across requests
	born   time.Time    // origin of now

	mu struct {
		sync.Mutex
		conns   []*conn       // healthy open connections, in the order they were opened
		dialing int           // dials in progress; count towards MaxConnsPerPeer
		dialed  chan struct{} // closed when the current dials end; nil when none
	}
}

// slot is one slice of one request assigned to a connection.
type slot struct {
	j *job
	i int // slice index in j
}

// ring is a FIFO of slots that grows as needed.
type ring struct {
	buf  []slot
	head int
	n    int
}

func (r *ring) push(s slot) {
	if r.n == len(r.buf) {
		nb := make([]slot, max(8, 2*len(r.buf)))
		for k := 0; k < r.n; k++ {
			nb[k] = r.buf[(r.head+k)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = s
	r.n++
}

func (r *ring) pop() (slot, bool) {
	if r.n == 0 {
		return slot{}, false
	}
	s := r.buf[r.head]
	r.buf[r.head] = slot{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return s, true
}

// drain appends every slot to out, oldest first, and empties r.
func (r *ring) drain(out []slot) []slot {
	for {
		s, ok := r.pop()
		if !ok {
			return out
		}
		out = append(out, s)
	}
}

// conn is one pooled connection carrying slices of any number of requests.
// Requests append slots to queue; the writer goroutine moves them to
// inflight and sends their frames, up to Window unacknowledged, several per
// vectored write; the reader goroutine reads status frames, which the
// server sends in request order, and completes inflight's head for each.
// When the connection fails, both goroutines exit and the last one hands
// every slot still queued or in flight back to its request (see exited), so
// no slot is released while a goroutine can still touch its buffer.
type conn struct {
	p        *peer
	c        net.Conn
	window   int
	load     atomic.Int64  // slots queued or in flight, plus pick's reservations
	lastUsed atomic.Int64  // monotonic nanoseconds (see peer.now) of the last pick
	wake     chan struct{} // capacity 1: the writer has work or window room
	dead     chan struct{} // closed by fail

	mu struct {
		sync.Mutex
		queue      ring  // assigned, not yet written, in order
		inflight   ring  // written (or being written), awaiting status, in order
		err        error // first failure; set once
		acked      bool  // a status frame arrived (the connection worked)
		readerDone bool
		writerDone bool
	}
}

// now is monotonic nanoseconds since the peer was made.
func (p *peer) now() int64 { return int64(time.Since(p.born)) }

// pick returns up to want connections, each with a reservation of its
// share of total slices (see share). It prefers, in the
// order they were opened, connections carrying fewer than Window slices
// (so load packs onto few connections and each vectored write carries
// several frames), opens one when none has room and the cap allows, and
// past the cap uses the least loaded. Errors: ErrClosed; a dial error when
// no connection is open; ctx.
func (p *peer) pick(ctx context.Context, want, total int, out []*conn) ([]*conn, error) {
	p.mu.Lock()
	stale := p.sweepLocked(nil)
	p.mu.Unlock()
	for _, m := range stale {
		m.fail(errIdle)
	}
	dialFailed := false
	var opened, died []*conn // opened by this call; those of them that failed already (out of the pool)
	for {
		p.mu.Lock()
		if p.closed.Load() {
			p.mu.Unlock()
			return nil, transfer.ErrClosed
		}
		out = out[:0]
		for _, m := range p.mu.conns {
			if m.load.Load() < int64(p.cfg.Window) {
				out = append(out, m)
				if len(out) == want {
					break
				}
			}
		}
		// A connection this call opened that failed already is handed out
		// all the same: the slices dealt to it fail to queue and count an
		// attempt (see deal), so a target that closes every connection
		// right after accepting it exhausts the retries instead of being
		// redialled here for ever.
		for _, m := range died {
			if len(out) < want && !contains(out, m) {
				out = append(out, m)
			}
		}
		atCap := len(p.mu.conns)+p.mu.dialing >= p.cfg.MaxConnsPerPeer
		if len(out) == want || (len(p.mu.conns) > 0 && (atCap || dialFailed)) {
			// Top up with the least loaded connections not chosen yet.
			for len(out) < want && len(out) < len(p.mu.conns) {
				var best *conn
				for _, m := range p.mu.conns {
					if !contains(out, m) && (best == nil || m.load.Load() < best.load.Load()) {
						best = m
					}
				}
				out = append(out, best)
			}
			t := p.now()
			for k, m := range out {
				m.load.Add(int64(share(total, len(out), k)))
				m.lastUsed.Store(t)
			}
			p.mu.Unlock()
			return out, nil
		}
		if len(p.mu.conns) == 0 && p.mu.dialing > 0 {
			// Wait for the dial in progress rather than racing it.
			ch := p.mu.dialed
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		p.mu.dialing++
		if p.mu.dialed == nil {
			p.mu.dialed = make(chan struct{})
		}
		p.mu.Unlock()
		m, err := p.dial(ctx)
		p.mu.Lock()
		p.mu.dialing--
		if p.mu.dialing == 0 {
			close(p.mu.dialed)
			p.mu.dialed = nil
		}
		switch {
		case err != nil:
			dialFailed = true
			if len(p.mu.conns) == 0 {
				p.mu.Unlock()
				return nil, err
			}
		case p.closed.Load():
			p.mu.Unlock()
			m.fail(transfer.ErrClosed)
			return nil, transfer.ErrClosed
		default:
			// Start its goroutines only once it is in the pool, so a
			// failure (which takes it out) cannot come first.
			p.mu.conns = append(p.mu.conns, m)
			go m.readLoop()
			go m.writeLoop()
		}
		p.mu.Unlock()
		if m != nil {
			opened = append(opened, m)
		}
		for _, o := range opened {
			if o.failed() && !contains(died, o) {
				died = append(died, o)
			}
		}
	}
}

// failed reports whether m has failed.
func (m *conn) failed() bool {
	select {
	case <-m.dead:
		return true
	default:
		return false
	}
}

// share is how many of total slices, dealt round-robin over n connections,
// the k-th gets.
func share(total, n, k int) int { return (total - k + n - 1) / n }

func contains(cs []*conn, m *conn) bool {
	for _, c := range cs {
		if c == m {
			return true
		}
	}
	return false
}

// sweepLocked takes out of the pool, and appends to stale for the caller
// to close, connections that carry nothing and sat unused longer than
// IdleTimeout, and unused ones past MaxIdlePerPeer (the most recently
// opened go first). A connection with a reservation is never taken.
func (p *peer) sweepLocked(stale []*conn) []*conn {
	t := p.now()
	idle := 0
	for k := 0; k < len(p.mu.conns); {
		m := p.mu.conns[k]
		if m.load.Load() == 0 {
			idle++
			if idle > p.cfg.MaxIdlePerPeer || time.Duration(t-m.lastUsed.Load()) > p.cfg.IdleTimeout {
				p.mu.conns = append(p.mu.conns[:k], p.mu.conns[k+1:]...)
				stale = append(stale, m)
				continue
			}
		}
		k++
	}
	return stale
}

var errIdle = errors.New("idle connection closed")

// dial opens a connection; the caller starts its reader and writer.
func (p *peer) dial(ctx context.Context) (*conn, error) {
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", p.addr, err)
	}
	p.dials.Add(1)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	m := &conn{p: p, c: c, window: p.cfg.Window, wake: make(chan struct{}, 1), dead: make(chan struct{})}
	m.lastUsed.Store(p.now())
	return m, nil
}

// remove takes m out of the pool (no-op when it is not there).
func (p *peer) remove(m *conn) {
	p.mu.Lock()
	for k, c := range p.mu.conns {
		if c == m {
			p.mu.conns = append(p.mu.conns[:k], p.mu.conns[k+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// Close implements transfer.Peer: later requests fail with ErrClosed;
// connections carrying nothing are closed now, the others once their last
// slice completes, so requests in progress finish.
func (p *peer) Close() error {
	p.mu.Lock()
	p.closed.Store(true)
	conns := p.mu.conns
	p.mu.conns = nil
	p.mu.Unlock()
	for _, m := range conns {
		if m.load.Load() == 0 {
			m.fail(transfer.ErrClosed)
		}
	}
	return nil
}

// fail marks m failed with err (the first cause wins), takes it out of the
// pool and closes the socket, which ends the reader and the writer.
func (m *conn) fail(err error) {
	m.mu.Lock()
	first := m.mu.err == nil
	if first {
		m.mu.err = err
	}
	m.mu.Unlock()
	if first {
		close(m.dead)
		m.p.remove(m)
		m.c.Close()
	}
}

// unload drops n slots from m's load; a connection of a closed peer is
// closed once it carries nothing.
func (m *conn) unload(n int) {
	if m.load.Add(int64(-n)) == 0 && m.p.closed.Load() {
		m.fail(transfer.ErrClosed)
	}
}

// enqueue appends j's slices idx[k], idx[k+step], ... to m's queue (their
// load was reserved by pick). It reports false, leaving the slices with the
// caller, when m already failed.
func (m *conn) enqueue(j *job, idx []int, k, step int) bool {
	m.mu.Lock()
	if m.mu.err != nil {
		m.mu.Unlock()
		return false
	}
	for x := k; x < len(idx); x += step {
		m.mu.queue.push(slot{j: j, i: idx[x]})
	}
	m.mu.Unlock()
	m.signal()
	return true
}

// failure returns why m failed and whether it ever delivered a status
// frame.
func (m *conn) failure() (error, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.err, m.mu.acked
}

func (m *conn) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// exited records that the reader or the writer ended. The last one hands
// every queued and in-flight slot back to its request as lost: nothing can
// touch their buffers any more. Slots never written count as attempts only
// when the connection never delivered a status frame, so a queue behind a
// connection that worked for a while is resent for free, while a target
// that drops every connection at once still exhausts the retries.
func (m *conn) exited(reader bool) {
	m.mu.Lock()
	if reader {
		m.mu.readerDone = true
	} else {
		m.mu.writerDone = true
	}
	var lost []slot
	if m.mu.readerDone && m.mu.writerDone {
		lost = m.mu.inflight.drain(nil)
		unsent := len(lost)
		lost = m.mu.queue.drain(lost)
		cause, worked := m.mu.err, m.mu.acked
		m.mu.Unlock()
		for k, s := range lost {
			s.j.lost(s.i, cause, k < unsent || !worked)
		}
		m.unload(len(lost))
		return
	}
	m.mu.Unlock()
}

// writeLoop sends queued slots: each round moves as many as the window
// allows from queue to inflight and writes all their frames (header, and a
// WRITE's payload straight from the caller's buffer) in one vectored write.
func (m *conn) writeLoop() {
	defer m.exited(false)
	hdrs := make([]byte, m.window*headerLen)
	iov := make([][]byte, 0, 2*m.window)
	for {
		select {
		case <-m.wake:
		case <-m.dead:
			return
		}
		for {
			m.mu.Lock()
			if m.mu.err != nil {
				m.mu.Unlock()
				return
			}
			iov = iov[:0]
			k := 0
			for m.mu.inflight.n < m.window && m.mu.queue.n > 0 {
				s, _ := m.mu.queue.pop()
				m.mu.inflight.push(s)
				j := s.j
				off, end := j.bounds(s.i)
				h := hdrs[k*headerLen : (k+1)*headerLen]
				binary.LittleEndian.PutUint64(h[0:], uint64(end-off))
				binary.LittleEndian.PutUint64(h[8:], j.remote+uint64(off))
				h[16] = byte(j.op) | protoV2
				iov = append(iov, h)
				if j.op == transfer.Write {
					iov = j.appendViews(iov, off, end)
				}
				k++
			}
			m.mu.Unlock()
			if k == 0 {
				break
			}
			nb := net.Buffers(iov)
			if _, err := nb.WriteTo(m.c); err != nil {
				m.fail(err)
				return
			}
		}
	}
}

// readLoop reads status frames (and READ payloads) and completes inflight's
// head for each, until the connection fails.
func (m *conn) readLoop() {
	defer m.exited(true)
	fr := newFrameReader(m.c, clientReadBuffer, statusLen)
	var views [][]byte // scratch: a READ slice's destination pieces
	for {
		st, err := fr.next(statusLen)
		if err != nil {
			m.fail(err)
			return
		}
		v := binary.LittleEndian.Uint64(st)
		m.mu.Lock()
		s, ok := m.mu.inflight.pop()
		more := m.mu.queue.n > 0
		m.mu.acked = true
		m.mu.Unlock()
		if !ok {
			m.fail(fmt.Errorf("status frame %#x with no request in flight", v))
			return
		}
		if more {
			m.signal() // window room for the writer
		}
		j := s.j
		off, end := j.bounds(s.i)
		var res error
		switch {
		case v&0xFFFFFFFF00000000 != statusMagic:
			err := fmt.Errorf("bad status frame %#x", v)
			m.fail(err)
			j.lost(s.i, err, true)
			m.unload(1)
			return
		case v&0xFFFFFFFF != statusOK:
			res = fmt.Errorf("%w: %s of %d bytes at %#x", transfer.ErrRejected, j.op, end-off, j.remote+uint64(off))
		case j.op == transfer.Read:
			views = j.appendViews(views[:0], off, end)
			err := fr.readFullV(views)
			clear(views)
			if err != nil {
				m.fail(err)
				j.lost(s.i, err, true)
				m.unload(1)
				return
			}
		}
		m.unload(1)
		j.finish(s.i, res)
	}
}

// job is one request being executed: its slices are dealt to connections,
// completed by their readers, and on a connection failure handed back for
// the Do goroutine to deal again.
type job struct {
	op transfer.Opcode
	// parts is the local side, the concatenation of its buffers (one for
	// Do, several for DoV); starts[k] is parts[k]'s offset in it and size
	// its length in bytes.
	parts    [][]byte
	starts   []int
	size     int
	one      [1][]byte // parts' storage for Do
	remote   uint64
	slice    int // bytes per slice
	count    int // number of slices
	limit    int // attempts per slice
	progress chan struct{}
	idx      []int   // scratch: slices being dealt
	conns    []*conn // scratch: pick's result
	used     []*conn // connections given slices (killed on cancellation)

	mu struct {
		sync.Mutex
		pending  int         // slices not yet acknowledged
		out      int         // slices queued or in flight on a connection
		retry    []int       // slices to deal again
		attempts map[int]int // failed sends per slice (after a failure only)
		err      error       // first fatal error
	}
}

// bounds returns slice i's [off, end) in the request.
func (j *job) bounds(i int) (int, int) {
	off := i * j.slice
	end := off + j.slice
	if i == j.count-1 {
		end = j.size
	}
	return off, end
}

// appendViews appends to dst the views of the local bytes [off, end) of
// the request, one per part they touch.
func (j *job) appendViews(dst [][]byte, off, end int) [][]byte {
	if len(j.parts) == 1 {
		return append(dst, j.parts[0][off:end])
	}
	k := sort.SearchInts(j.starts, off+1) - 1 // the part holding off
	for ; off < end; k++ {
		p := j.parts[k]
		lo := off - j.starts[k]
		hi := min(len(p), end-j.starts[k])
		dst = append(dst, p[lo:hi])
		off = j.starts[k] + hi
	}
	return dst
}

// signalLocked wakes Do (non-blocking; Do re-reads the state).
func (j *job) signalLocked() {
	select {
	case j.progress <- struct{}{}:
	default:
	}
}

// finish records slice i's status: acknowledged (res nil) or refused by
// the target (res wraps ErrRejected, fatal for the request).
func (j *job) finish(i int, res error) {
	j.mu.Lock()
	j.mu.out--
	if res == nil {
		j.mu.pending--
	} else if j.mu.err == nil {
		j.mu.err = res
	}
	if j.mu.out == 0 || res != nil {
		j.signalLocked()
	}
	j.mu.Unlock()
}

// lost hands back slice i whose connection failed with cause. A slice that
// was sent counts one attempt; past the limit the request fails with cause.
// Otherwise it is dealt again.
func (j *job) lost(i int, cause error, sent bool) {
	j.mu.Lock()
	j.mu.out--
	if j.mu.err == nil {
		if sent {
			if j.mu.attempts == nil {
				j.mu.attempts = map[int]int{}
			}
			j.mu.attempts[i]++
			if n := j.mu.attempts[i]; n >= j.limit {
				j.mu.err = fmt.Errorf("slice %d failed %d times: %w", i, n, cause)
			}
		}
		if j.mu.err == nil {
			j.mu.retry = append(j.mu.retry, i)
		}
	}
	j.signalLocked()
	j.mu.Unlock()
}

// fatal records err as the request's failure unless one is recorded.
func (j *job) fatal(err error) {
	j.mu.Lock()
	if j.mu.err == nil {
		j.mu.err = err
	}
	j.mu.Unlock()
}

// Do implements transfer.Peer: slices local and deals the slices over up to
// Stripe pooled connections; returns nil once every slice was acknowledged,
// or the first fatal error once no connection still holds one of the
// request's slices. On ctx's end the connections holding its slices are
// closed (other requests' slices on them are dealt again, as after any
// connection failure). Errors wrap ErrRejected, ErrClosed, the retry
// limit's cause ("slice N failed K times: ..."), a dial error, or ctx's.
func (p *peer) Do(ctx context.Context, op transfer.Opcode, local []byte, remoteAddr uint64) error {
	if len(local) == 0 {
		return fmt.Errorf("%w: empty request", transfer.ErrInvalidArgument)
	}
	j := p.newJob()
	j.one[0] = local
	j.parts, j.size = j.one[:], len(local)
	j.starts = append(j.starts[:0], 0)
	return p.do(ctx, j, op, remoteAddr)
}

// DoV implements transfer.VectorPeer: as Do, with the slices cut from the
// remote range [remoteAddr, +total), so a slice's frame carries bytes of
// several buffers of local (gathered into one vectored write for a WRITE,
// read into each in turn for a READ): the same frames as one contiguous
// request of that size. Errors as Do; ErrInvalidArgument for an empty
// buffer.
func (p *peer) DoV(ctx context.Context, op transfer.Opcode, local [][]byte, remoteAddr uint64) error {
	j := p.newJob()
	j.parts, j.size = local, 0
	j.starts = j.starts[:0]
	for _, l := range local {
		if len(l) == 0 {
			j.parts = nil
			p.jobs.Put(j)
			return fmt.Errorf("%w: empty piece", transfer.ErrInvalidArgument)
		}
		j.starts = append(j.starts, j.size)
		j.size += len(l)
	}
	if j.size == 0 {
		j.parts = nil
		p.jobs.Put(j)
		return fmt.Errorf("%w: empty request", transfer.ErrInvalidArgument)
	}
	return p.do(ctx, j, op, remoteAddr)
}

// newJob returns a reset job from the pool.
func (p *peer) newJob() *job {
	j, _ := p.jobs.Get().(*job)
	if j == nil {
		j = &job{progress: make(chan struct{}, 1)}
	}
	return j
}

// do runs j (its parts, starts and size set) and puts it back in the pool.
func (p *peer) do(ctx context.Context, j *job, op transfer.Opcode, remoteAddr uint64) error {
	err := p.doJob(ctx, j, op, remoteAddr)
	// No connection holds a slot of j any more: it can be reused.
	clear(j.used)
	j.used = j.used[:0]
	clear(j.conns)
	j.one[0], j.parts = nil, nil
	j.mu.retry, j.mu.attempts = j.mu.retry[:0], nil
	select {
	case <-j.progress:
	default:
	}
	p.jobs.Put(j)
	if err != nil {
		return fmt.Errorf("tcp %s: %w", p.addr, err)
	}
	return nil
}

func (p *peer) doJob(ctx context.Context, j *job, op transfer.Opcode, remoteAddr uint64) error {
	if uint64(j.size) > ^uint64(0)-remoteAddr {
		return fmt.Errorf("%w: range [%#x,+%d) wraps the address space", transfer.ErrInvalidArgument, remoteAddr, j.size)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	j.op, j.remote, j.slice, j.limit = op, remoteAddr, p.cfg.SliceSize, p.cfg.RetryCount
	j.count = (j.size + j.slice - 1) / j.slice
	if j.count > 1 {
		if tail := j.size - (j.count-1)*j.slice; tail <= j.slice/4 {
			j.count-- // merge a small tail into the previous slice
		}
	}
	j.mu.pending, j.mu.out, j.mu.err = j.count, 0, nil
	j.idx = j.idx[:0]
	for i := 0; i < j.count; i++ {
		j.idx = append(j.idx, i)
	}
	return p.run(ctx, j)
}

// run deals j.idx, then waits, dealing lost slices again, until every
// slice was acknowledged or a fatal error with nothing of j left on a
// connection.
func (p *peer) run(ctx context.Context, j *job) error {
	cancelled := false
	for {
		if len(j.idx) > 0 {
			if err := p.deal(ctx, j); err != nil {
				j.fatal(err)
			}
		}
		j.mu.Lock()
		pending, out, err := j.mu.pending, j.mu.out, j.mu.err
		j.idx = append(j.idx[:0], j.mu.retry...)
		j.mu.retry = j.mu.retry[:0]
		if err != nil {
			j.idx = j.idx[:0]
		}
		j.mu.Unlock()
		if pending == 0 {
			return nil
		}
		if err != nil && out == 0 {
			return err
		}
		if len(j.idx) > 0 {
			continue
		}
		if cancelled {
			<-j.progress
			continue
		}
		select {
		case <-j.progress:
		case <-ctx.Done():
			// Nothing may touch local after we return: close every
			// connection that may hold a slice of j; their goroutines hand
			// the slices back promptly.
			cancelled = true
			j.fatal(ctx.Err())
			for _, m := range j.used {
				m.fail(fmt.Errorf("request abandoned: %w", ctx.Err()))
			}
		}
	}
}

// deal assigns j.idx over up to Stripe connections, round-robin.
func (p *peer) deal(ctx context.Context, j *job) error {
	n := len(j.idx)
	conns, err := p.pick(ctx, min(n, p.cfg.Stripe), n, j.conns)
	j.conns = conns
	if err != nil {
		return err
	}
	for k, m := range conns {
		cnt := share(n, len(conns), k)
		j.mu.Lock()
		j.mu.out += cnt
		j.mu.Unlock()
		if !contains(j.used, m) {
			j.used = append(j.used, m)
		}
		if !m.enqueue(j, j.idx, k, len(conns)) {
			// m failed between pick and now: nothing was sent, deal
			// again. A connection that never answered at all counts an
			// attempt, as its queued slices do (see exited): a target
			// that drops every connection at once must exhaust the
			// retries, not be redialled for ever.
			cause, worked := m.failure()
			p.remove(m)
			for x := k; x < n; x += len(conns) {
				j.lost(j.idx[x], cause, !worked)
			}
			m.unload(cnt)
		}
	}
	j.idx = j.idx[:0]
	return nil
}
