package tcp

import (
	"cmp"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

const (
	// serverReadBuffer is the per-connection read-ahead buffer of the
	// server, in bytes: request headers are read through it, payloads
	// are not.
	serverReadBuffer = 4 << 10
	// maxQueuedFrames bounds the status frames, and maxQueuedIOV the
	// pieces, an sconn's output queue holds before it is sent.
	maxQueuedFrames = 256
	maxQueuedIOV    = 128
	// sendEvery: queued output is sent at the latest once it covers this
	// many payload bytes (acknowledged WRITEs and READ responses), so a
	// client that keeps the socket busy still sees its window slide;
	// below it, output waits for the socket to run dry. In bytes.
	sendEvery = 256 << 10
)

// sconn is the server side of one connection: requests are read with a
// frameReader (payloads into registered memory: readTarget); responses
// (status frames, and READ payloads straight from registered memory) are
// queued in request order and sent in one vectored write when the next
// read would block (the client may be waiting for them), once they cover
// sendEvery payload bytes, or when the queue is full.
type sconn struct {
	*frameReader
	st   []byte   // queued status frames; fixed capacity, so iov's views stay valid
	iov  [][]byte // queued output, in order: views of st and payloads
	run  int      // start in st of the status frames iov's last piece views; -1 if that piece is a payload
	owed int      // payload bytes covered by queued output
	// reads counts queued READ payloads: views of registered memory,
	// read when the queue is sent, so a later WRITE into them must wait
	// for that (see settle).
	reads int
	dev   devicePipe // device WRITEs' copies in flight behind the reads
}

func newSconn(c net.Conn) *sconn {
	s := &sconn{
		frameReader: newFrameReader(c, serverReadBuffer, headerLen),
		st:          make([]byte, 0, maxQueuedFrames*statusLen),
		iov:         make([][]byte, 0, maxQueuedIOV),
		run:         -1,
	}
	s.frameReader.pending = func() bool { return len(s.iov) > 0 }
	s.frameReader.send = s.flush
	return s
}

// header reads the next request header.
func (s *sconn) header() ([]byte, error) { return s.next(headerLen) }

// queue appends a status frame and, when payload is not nil, the payload
// (a READ response, sent from registered memory when the queue is
// flushed) for a request of size bytes; the queue is sent once it covers
// sendEvery bytes or is full.
func (s *sconn) queue(code uint64, payload []byte, size uint64) error {
	if len(s.st) == cap(s.st) || len(s.iov)+2 > cap(s.iov) {
		if err := s.flush(); err != nil {
			return err
		}
	}
	s.st = binary.LittleEndian.AppendUint64(s.st, statusMagic|code)
	if s.run >= 0 {
		s.iov[len(s.iov)-1] = s.st[s.run:]
	} else {
		s.run = len(s.st) - statusLen
		s.iov = append(s.iov, s.st[s.run:])
	}
	if payload != nil {
		s.iov = append(s.iov, payload)
		s.run = -1
		s.reads++
	}
	s.owed += int(min(size, sendEvery))
	if s.owed >= sendEvery {
		return s.flush()
	}
	return nil
}

// ack queues a status frame for a request of size bytes.
func (s *sconn) ack(code uint64, size uint64) error { return s.queue(code, nil, size) }

// flush sends the queued output.
func (s *sconn) flush() error {
	if len(s.iov) == 0 {
		return nil
	}
	nb := net.Buffers(s.iov)
	_, err := nb.WriteTo(s.c)
	clear(s.iov)
	s.iov, s.st, s.run, s.owed, s.reads = s.iov[:0], s.st[:0], -1, 0, 0
	return err
}

// settle sends the queued output first when a queued READ payload
// overlaps dst, the registered bytes a WRITE is about to land in: requests
// are served in order, so a READ answers the bytes as they were before
// every later request on the connection.
func (s *sconn) settle(dst []byte) error {
	if s.reads == 0 {
		return nil
	}
	lo, hi := memory.AddrOf(dst), memory.AddrOf(dst)+uint64(len(dst))
	for _, v := range s.iov { // status frames live apart from registered memory
		if a := memory.AddrOf(v); a < hi && lo < a+uint64(len(v)) {
			return s.flush()
		}
	}
	return nil
}

// respondNow sends an OK status frame and payload after the queued
// output, before returning (payload may be reused afterwards).
func (s *sconn) respondNow(payload []byte) error {
	if err := s.queue(statusOK, payload, 0); err != nil {
		return err
	}
	return s.flush()
}

// serve handles requests on one connection until EOF or an error.
// Requests are served in order, so status frames go out in request order
// (clients match them by position). Whatever ends the connection (the
// peer's EOF, a protocol error), the answers to the requests served
// before are sent first: a peer that half-closes after its last request
// still gets every acknowledgement.
func serve(c net.Conn, target transfer.Target) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s := newSconn(c)
	defer func() {
		_, _ = s.dev.wait() // the copy in flight lands (and is acknowledged) before its buffer goes
		_ = s.flush()
		s.dev.release() // device memory staging, allocated on first use
	}()
	dt, _ := target.(transfer.DeviceTarget)
	for {
		hdr, err := s.header()
		if err != nil {
			return
		}
		size := binary.LittleEndian.Uint64(hdr[0:])
		addr := binary.LittleEndian.Uint64(hdr[8:])
		op := hdr[16]
		v2 := op&protoV2 != 0
		op &^= protoV2
		buf, rerr := transfer.ResolveFor(target, transfer.Opcode(op), addr, size)
		if rerr != nil && dt != nil {
			if dr, err := dt.ResolveDevice(addr, size); err == nil {
				if !serveDevice(s, dr, transfer.Opcode(op), v2) {
					return
				}
				continue
			}
		}
		// Answers go out in request order: a device WRITE still copying
		// is acknowledged before this request is answered.
		if _, err := s.dev.wait(); err != nil {
			return
		}
		switch transfer.Opcode(op) {
		case transfer.Write:
			if rerr != nil {
				// Drain the payload so nothing lands, then refuse. A
				// payload longer than any stream can carry (the drain
				// would take size as a negative count) is a protocol
				// error.
				if drain(s, size) != nil || !v2 {
					return
				}
				if s.ack(statusRej, size) != nil {
					return
				}
				continue
			}
			if s.settle(buf) != nil {
				return
			}
			if s.readTarget(buf) != nil {
				return
			}
			if v2 && s.ack(statusOK, size) != nil {
				return
			}
		case transfer.Read:
			if rerr != nil {
				if v2 && s.ack(statusRej, size) == nil {
					continue
				}
				return // v1 has no way to refuse a read: drop the connection
			}
			if v2 {
				if s.queue(statusOK, buf, size) != nil {
					return
				}
			} else if s.flush() != nil {
				return
			} else if _, err := c.Write(buf); err != nil {
				return
			}
		default:
			return // unknown opcode: protocol error, drop the connection
		}
	}
}

// drain reads and discards a refused WRITE's size-byte payload. A payload
// longer than any stream can carry is a protocol error.
func drain(s *sconn, size uint64) error {
	if size > math.MaxInt64 {
		return errors.New("tcp: payload length over 2^63")
	}
	_, err := io.CopyN(io.Discard, s, int64(size))
	return err
}

// serveDevice serves one request on the device range dr through the
// connection's bounce buffer (deviceChunk bytes off the Go heap,
// page-locked when the runtime can pin, made on the first device request,
// with the connection's copier; devicePipe). A WRITE's payload is read in
// chunks into the buffer's two halves in turn, each chunk's copy to the
// device running while the next chunk (of this request or the next) is
// read; a READ, after the copy in flight landed, is copied out chunk by
// chunk into the halves in turn, each chunk sent while the next is copied
// out. It returns false when the connection must be dropped.
func serveDevice(s *sconn, dr transfer.DeviceRange, op transfer.Opcode, v2 bool) bool {
	size := dr.Length
	p := &s.dev
	if p.bounce == nil {
		// deviceChunk at once: one pin per connection, whatever the
		// sizes of its requests.
		if err := p.setup(s, dr); err != nil { // no memory for staging: refuse the request
			if !v2 || (op == transfer.Write && drain(s, size) != nil) {
				return false
			}
			return s.ack(statusRej, size) == nil
		}
	}
	switch op {
	case transfer.Write:
		var failed error // the first failed copy of this request's chunks
		for off := uint64(0); off < size; {
			chunk := p.halves[p.half][:min(size-off, uint64(len(p.halves[p.half])))]
			if _, err := io.ReadFull(s, chunk); err != nil {
				return false
			}
			// The copy before this one ends first: copies land in
			// order, and the half it reads is the one read into next.
			cerr, err := p.wait()
			if err != nil {
				return false
			}
			failed = cmp.Or(failed, cerr)
			last := off+uint64(len(chunk)) == size
			switch {
			case failed == nil:
				if p.copyIn(s, dr, off, chunk, last, v2) != nil {
					return false
				}
			case last && !v2:
				return false // v1 has no refusal: drop the connection
			case last:
				if s.ack(statusRej, size) != nil {
					return false
				}
			}
			p.half ^= 1
			off += uint64(len(chunk))
		}
		return true
	case transfer.Read:
		if _, err := p.wait(); err != nil {
			return false
		}
		// The first chunk decides the status frame; then each chunk is
		// sent while the next one is copied out into the other half.
		cur := p.halves[0][:min(size, uint64(len(p.halves[0])))]
		if err := dr.CopyOut(cur, 0); err != nil {
			return v2 && s.ack(statusRej, size) == nil
		}
		for k, off := 0, uint64(0); ; k ^= 1 {
			next := off + uint64(len(cur))
			var nextBuf []byte
			if next < size {
				nextBuf = p.halves[k^1][:min(size-next, uint64(len(p.halves[k^1])))]
				p.copyOut(dr, next, nextBuf)
			}
			var err error
			switch {
			case off > 0:
				_, err = s.c.Write(cur)
			case v2:
				err = s.respondNow(cur)
			default:
				if err = s.flush(); err == nil {
					_, err = s.c.Write(cur)
				}
			}
			if nextBuf == nil {
				return err == nil
			}
			// The next copy ends before anything returns: the bounce
			// buffer outlives it.
			if cerr, _ := p.wait(); err != nil || cerr != nil {
				return false // part of the response may be out: only dropping the connection tells the peer
			}
			cur, off = nextBuf, next
		}
	}
	return false // unknown opcode: protocol error
}

// devicePipe is a connection's device staging: the bounce buffer and one
// copier goroutine, made together on the connection's first device
// request and ended by release. At most one copy is in flight, so copies
// land in request order, while the connection reads or sends on. A
// WRITE's copy of a v2 request's last chunk writes the request's status
// frame itself once it landed (OK, or refused when the copy failed), so a
// COMPLETED device WRITE is on the device as with host memory, and the
// peer gets it even while the connection's reader waits for more input.
// Answers keep request order: a copy starts after the queued output was
// sent, and the connection waits for it (wait) before it answers anything
// else. Belongs to the connection's goroutine.
type devicePipe struct {
	bounce *transfer.HostStaging
	halves [2][]byte // the bounce buffer's two halves, chunks read in turn
	half   int       // the half the next WRITE chunk is read into
	jobs   chan devCopy
	done   chan devCopy // the job back, its errors set
	busy   bool         // a job is in flight
}

// devCopy is one copy for the copier: in (host to device, a WRITE's chunk)
// or out; frame asks a status frame after it (a v2 WRITE's last chunk);
// last and v1 describe the WRITE's chunk for wait. The copier returns it
// with copyErr and sendErr (the status frame's write) set.
type devCopy struct {
	dr               transfer.DeviceRange
	off              uint64
	buf              []byte
	in, frame        bool
	last, v1         bool
	copyErr, sendErr error
}

// setup makes the bounce buffer (pinned through dr's runtime when it can
// pin) and starts the copier. Errors: the buffer's allocation.
func (p *devicePipe) setup(s *sconn, dr transfer.DeviceRange) error {
	nb, err := dr.NewHostStaging(deviceChunk)
	if err != nil {
		return err
	}
	b := nb.Bytes()
	p.bounce, p.halves = nb, [2][]byte{b[: len(b)/2 : len(b)/2], b[len(b)/2:]}
	p.jobs, p.done = make(chan devCopy), make(chan devCopy, 1)
	go func() {
		for j := range p.jobs {
			if j.in {
				j.copyErr = j.dr.CopyIn(j.off, j.buf)
			} else {
				j.copyErr = j.dr.CopyOut(j.buf, j.off)
			}
			if j.frame {
				code := uint64(statusOK)
				if j.copyErr != nil {
					code = statusRej
				}
				var frame [statusLen]byte
				binary.LittleEndian.PutUint64(frame[:], statusMagic|code)
				_, j.sendErr = s.c.Write(frame[:])
			}
			p.done <- j
		}
	}()
	return nil
}

// copyIn sends the queued output, then hands chunk (bytes [off, ...) of
// dr; last marks a request's last chunk, v2 its protocol) to the copier.
// Errors: the send's.
func (p *devicePipe) copyIn(s *sconn, dr transfer.DeviceRange, off uint64, chunk []byte, last, v2 bool) error {
	if err := s.flush(); err != nil {
		return err
	}
	p.busy = true
	p.jobs <- devCopy{dr: dr, off: off, buf: chunk, in: true, frame: last && v2, last: last, v1: !v2}
	return nil
}

// copyOut hands the copier a device-to-host copy of dr's bytes at off
// into buf.
func (p *devicePipe) copyOut(dr transfer.DeviceRange, off uint64, buf []byte) {
	p.busy = true
	p.jobs <- devCopy{dr: dr, off: off, buf: buf}
}

// wait waits for the copy in flight, if any, and returns the error of a
// copy that its caller judges: a device-to-host copy's, or a WRITE chunk's
// before the request's last (that request is still being read). Errors
// (second): the connection must be dropped (the status frame could not be
// sent, or a v1 request's last copy failed: v1 has no refusal).
func (p *devicePipe) wait() (copyErr, err error) {
	if !p.busy {
		return nil, nil
	}
	j := <-p.done
	p.busy = false
	switch {
	case j.sendErr != nil:
		return nil, j.sendErr
	case !j.in || !j.last:
		return j.copyErr, nil
	case j.v1 && j.copyErr != nil:
		return nil, j.copyErr
	}
	return nil, nil
}

// release stops the copier and frees the bounce buffer; no copy may be in
// flight.
func (p *devicePipe) release() {
	if p.bounce != nil {
		close(p.jobs)
		_ = p.bounce.Close()
		p.bounce = nil
	}
}
