package tcp

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/transfer"
)

const (
	// serverReadBuffer is the per-connection read-ahead buffer of the
	// server, in bytes: request headers are read through it, payloads
	// are not.
	serverReadBuffer = 4 << 10
	// serverAckBuffer holds acknowledgements not yet sent, in bytes.
	serverAckBuffer = 2 << 10
	// ackEvery: acknowledgements are sent at the latest once they cover
	// this many payload bytes, so a client that keeps the socket busy
	// still sees its window slide; below it they wait for the socket to
	// run dry. In bytes.
	ackEvery = 256 << 10
)

// sconn is the server side of one connection. Headers are read through a
// small read-ahead buffer; a payload is read with readv straight into its
// destination plus the next header into the buffer, so a stream of WRITEs
// costs one system call per request and payload bytes are copied once.
// Acknowledgements are buffered and sent when the next read would block
// (the client may be waiting for them), once they cover ackEvery payload
// bytes, when the buffer fills, and before a READ response. Without a raw socket (not a *net.TCPConn) reads are
// plain and acknowledgements are sent before every read.
type sconn struct {
	c    net.Conn
	rc   syscall.RawConn // nil: plain reads
	buf  []byte          // read-ahead; buf[r:w] is unread
	r, w int
	bw   *bufio.Writer // acknowledgements
	owed int           // payload bytes acknowledged in bw, not yet sent

	// readv state shared with readvFn (a method value made once, so a read
	// allocates nothing).
	iov     [2][]byte
	cur     [][]byte
	n       int
	err     error
	blocked bool
	readvFn func(fd uintptr) bool
}

func newSconn(c net.Conn) *sconn {
	s := &sconn{c: c, buf: make([]byte, serverReadBuffer), bw: bufio.NewWriterSize(c, serverAckBuffer)}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	s.readvFn = s.readv
	return s
}

// readv is the RawConn callback: one readv into s.cur. On EAGAIN it asks
// to wait for readability, unless acknowledgements are pending, which it
// returns to send first.
func (s *sconn) readv(fd uintptr) bool {
	s.n, s.err = unix.Readv(int(fd), s.cur)
	if s.err == unix.EAGAIN {
		if s.bw.Buffered() > 0 {
			s.blocked = true
			return true
		}
		return false
	}
	return true
}

// read fills a, then b (may be nil), with one system call; it returns the
// bytes read (> 0) or an error (io.EOF at end of stream).
func (s *sconn) read(a, b []byte) (int, error) {
	if s.rc == nil {
		if err := s.flush(); err != nil {
			return 0, err
		}
		return s.c.Read(a)
	}
	s.iov[0], s.iov[1] = a, b
	s.cur = s.iov[:1]
	if len(b) > 0 {
		s.cur = s.iov[:2]
	}
	for {
		s.blocked = false
		if err := s.rc.Read(s.readvFn); err != nil {
			return 0, err
		}
		switch {
		case s.blocked:
			if err := s.flush(); err != nil {
				return 0, err
			}
			continue
		case s.err == unix.EINTR:
			continue
		case s.err != nil:
			return 0, s.err
		case s.n == 0:
			return 0, io.EOF
		}
		return s.n, nil
	}
}

// Read implements io.Reader: buffered bytes first; a small p is served
// through the buffer; a large one is read into directly, with the next
// header's worth of bytes read ahead into the buffer.
func (s *sconn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.r < s.w {
		n := copy(p, s.buf[s.r:s.w])
		s.r += n
		return n, nil
	}
	s.r, s.w = 0, 0
	if len(p) < len(s.buf)/2 {
		n, err := s.read(s.buf, nil)
		if n == 0 {
			return 0, err
		}
		s.w = n
		k := copy(p, s.buf[:n])
		s.r = k
		return k, nil
	}
	n, err := s.read(p, s.buf[:headerLen])
	if n > len(p) {
		s.w = n - len(p)
		return len(p), nil
	}
	return n, err
}

// header reads the next request header.
func (s *sconn) header() ([]byte, error) {
	if s.w-s.r < headerLen {
		if s.r > 0 {
			s.w = copy(s.buf, s.buf[s.r:s.w])
			s.r = 0
		}
		for s.w < headerLen {
			n, err := s.read(s.buf[s.w:], nil)
			if n == 0 {
				return nil, err
			}
			s.w += n
		}
	}
	h := s.buf[s.r : s.r+headerLen]
	s.r += headerLen
	return h, nil
}

// ack queues a status frame for a request of size payload bytes, and
// sends the queued ones once they cover ackEvery bytes.
func (s *sconn) ack(code uint64, size uint64) error {
	var st [statusLen]byte
	binary.LittleEndian.PutUint64(st[:], statusMagic|code)
	if _, err := s.bw.Write(st[:]); err != nil {
		return err
	}
	s.owed += int(min(size, ackEvery))
	if s.owed >= ackEvery {
		return s.flush()
	}
	return nil
}

// flush sends the queued acknowledgements.
func (s *sconn) flush() error {
	s.owed = 0
	return s.bw.Flush()
}

// respond sends an OK status frame followed by payload (a READ response)
// after any queued acknowledgements, in one vectored write.
func (s *sconn) respond(payload []byte) error {
	var st [statusLen]byte
	binary.LittleEndian.PutUint64(st[:], statusMagic|statusOK)
	if s.bw.Buffered() > 0 {
		if _, err := s.bw.Write(st[:]); err != nil {
			return err
		}
		if err := s.flush(); err != nil {
			return err
		}
		_, err := s.c.Write(payload)
		return err
	}
	nb := net.Buffers{st[:], payload}
	_, err := nb.WriteTo(s.c)
	return err
}

// serve handles requests on one connection until EOF or an error.
// Requests are served in order, so status frames go out in request order
// (clients match them by position).
func serve(c net.Conn, target transfer.Target) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s := newSconn(c)
	dt, _ := target.(transfer.DeviceTarget)
	var bounce []byte // device memory staging, allocated on first use
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
		buf, rerr := target.Resolve(addr, size)
		if rerr != nil && dt != nil {
			if dr, err := dt.ResolveDevice(addr, size); err == nil {
				if !serveDevice(s, &bounce, dr, transfer.Opcode(op), v2) {
					return
				}
				continue
			}
		}
		switch transfer.Opcode(op) {
		case transfer.Write:
			if rerr != nil {
				// Drain the payload so nothing lands, then refuse.
				if _, err := io.CopyN(io.Discard, s, int64(size)); err != nil || !v2 {
					return
				}
				if s.ack(statusRej, size) != nil {
					return
				}
				continue
			}
			if _, err := io.ReadFull(s, buf); err != nil {
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
				if s.respond(buf) != nil {
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

// serveDevice serves one request on the device range dr through the
// connection's bounce buffer (grown to at most deviceChunk bytes). It
// returns false when the connection must be dropped.
func serveDevice(s *sconn, bounce *[]byte, dr transfer.DeviceRange, op transfer.Opcode, v2 bool) bool {
	size := dr.Length
	if want := int(min(size, deviceChunk)); len(*bounce) < want {
		*bounce = make([]byte, want)
	}
	b := *bounce
	switch op {
	case transfer.Write:
		var cerr error
		for off := uint64(0); off < size; {
			n := min(size-off, uint64(len(b)))
			if _, err := io.ReadFull(s, b[:n]); err != nil {
				return false
			}
			if cerr == nil {
				cerr = dr.CopyIn(off, b[:n])
			}
			off += n
		}
		if !v2 {
			return cerr == nil
		}
		if cerr != nil {
			return s.ack(statusRej, size) == nil
		}
		return s.ack(statusOK, size) == nil
	case transfer.Read:
		n := min(size, uint64(len(b)))
		if err := dr.CopyOut(b[:n], 0); err != nil {
			return v2 && s.ack(statusRej, size) == nil
		}
		if v2 {
			if s.respond(b[:n]) != nil {
				return false
			}
		} else if s.flush() != nil {
			return false
		} else if _, err := s.c.Write(b[:n]); err != nil {
			return false
		}
		for off := n; off < size; off += n {
			n = min(size-off, uint64(len(b)))
			if dr.CopyOut(b[:n], off) != nil {
				return false // part of the response is out: only dropping the connection tells the peer
			}
			if _, err := s.c.Write(b[:n]); err != nil {
				return false
			}
		}
		return true
	}
	return false // unknown opcode: protocol error
}

// readPayload fills buf with the next len(buf) bytes of the stream: what
// br already buffered, then the rest straight from c, so payload bytes are
// copied once (into the destination), not through br's buffer.
func readPayload(br *bufio.Reader, c net.Conn, buf []byte) error {
	n := min(br.Buffered(), len(buf))
	if n > 0 {
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return err
		}
	}
	_, err := io.ReadFull(c, buf[n:])
	return err
}
