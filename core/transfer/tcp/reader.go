package tcp

import (
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/memory"
)

// frameReader reads one connection's framed stream. Fixed-size frame parts
// (headers, status frames) are read through a small read-ahead buffer; a
// payload is read with readv straight into its destination plus the next
// frame's fixed part (ahead bytes) into the buffer, so a stream of
// payload-carrying frames costs one system call per frame and payload
// bytes are copied once. The server reads a WRITE's payload of at least
// streamMin bytes through a small bounce buffer instead, copied out with
// streaming stores (readTarget). Without a raw socket (not a
// *net.TCPConn) reads are plain.
//
// A frameReader belongs to one goroutine.
type frameReader struct {
	c     net.Conn
	rc    syscall.RawConn // nil: plain reads
	buf   []byte          // read-ahead; buf[r:w] is unread
	r, w  int
	ahead int
	// pending, when set, reports output waiting to be sent, and send sends it:
	// a read that would block sends it first, since the peer may be
	// waiting for it before it sends more.
	pending func() bool
	send    func() error

	// readv state shared with readvFn (a method value made once, so a read
	// allocates nothing).
	iov     [2][]byte
	iovs    [][]byte // readFullV's scratch
	cur     [][]byte
	n       int
	err     error
	blocked bool
	readvFn func(fd uintptr) bool
}

// newFrameReader returns a reader over c with a size-byte buffer; ahead
// (at most size/2) is the fixed part of the next frame read along with a
// payload.
func newFrameReader(c net.Conn, size, ahead int) *frameReader {
	f := &frameReader{c: c, buf: make([]byte, size), ahead: ahead}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			f.rc = rc
		}
	}
	f.readvFn = f.readv
	return f
}

// readv is the RawConn callback: one readv into f.cur. On EAGAIN it asks
// to wait for readability, unless output is pending, which it returns to
// send first.
func (f *frameReader) readv(fd uintptr) bool {
	f.n, f.err = unix.Readv(int(fd), f.cur)
	if f.err == unix.EAGAIN {
		if f.pending != nil && f.pending() {
			f.blocked = true
			return true
		}
		return false
	}
	return true
}

// read fills a, then b (may be nil), with one system call; it returns the
// bytes read (> 0) or an error (io.EOF at end of stream).
func (f *frameReader) read(a, b []byte) (int, error) {
	if f.rc == nil {
		if f.send != nil {
			if err := f.send(); err != nil {
				return 0, err
			}
		}
		return f.c.Read(a)
	}
	f.iov[0], f.iov[1] = a, b
	if len(b) > 0 {
		return f.readIOV(f.iov[:2])
	}
	return f.readIOV(f.iov[:1])
}

// Read implements io.Reader: buffered bytes first; a small p is served
// through the buffer; a large one is read into directly, with the next
// frame's fixed part read ahead into the buffer.
func (f *frameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if f.r < f.w {
		n := copy(p, f.buf[f.r:f.w])
		f.r += n
		return n, nil
	}
	f.r, f.w = 0, 0
	if len(p) < len(f.buf)/2 {
		n, err := f.read(f.buf, nil)
		if n == 0 {
			return 0, err
		}
		f.w = n
		k := copy(p, f.buf[:n])
		f.r = k
		return k, nil
	}
	n, err := f.read(p, f.buf[:f.ahead])
	if n > len(p) {
		f.w = n - len(p)
		return len(p), nil
	}
	return n, err
}

// streamMin is the smallest payload readTarget reads through a bounce
// buffer with streaming copies (readStreamed) instead of straight into its
// destination; bounceSize is that buffer's size in bytes.
//
// Why: a WRITE's payload lands in registered memory (a pool's segment)
// last written long ago and no longer in the CPU cache. The kernel's copy
// out of the socket reads each destination line from memory before
// writing it: on the 2-core dev machine, 1 MiB writes spread over a 1 GiB
// target (mooncake bench transfer --target_span) cost 1.3-1.45x the CPU
// per byte of writes to the same, cached, offsets, and ran 1.11x faster
// this way (the same-offsets writes 0.87-0.89x: they no longer stay in
// cache). Read into a small buffer
// that stays in cache and copied out with streaming stores
// (memory.StreamUnfenced), the destination is written without being read
// and the engine's cache is left alone. Upstream's tcp transport reads
// straight into the destination.
const (
	streamMin  = 64 << 10
	bounceSize = 64 << 10
)

// bounces holds bounceSize-byte buffers for readStreamed: the buffer taken
// on a P is usually the one last put back there, still in that core's
// cache.
var bounces = sync.Pool{New: func() any { return new([bounceSize]byte) }}

// readTarget fills p, a WRITE's destination in registered host memory
// (its bytes are not read again at once), as io.ReadFull would: the
// bytes already in the read-ahead buffer first, then the rest, when it is
// at least streamMin bytes on a raw socket (any syscall.Conn) and the CPU
// streams (memory.Streams: amd64 with AVX), through readStreamed, else
// with Read.
// Errors: the read error; io.ErrUnexpectedEOF when the stream ends inside
// p, io.EOF before its first byte.
func (f *frameReader) readTarget(p []byte) error {
	n := copy(p, f.buf[f.r:f.w])
	f.r += n
	rest := p[n:]
	if len(rest) < streamMin || f.rc == nil || !memory.Streams() {
		_, err := io.ReadFull(f, rest)
		if err == io.EOF && n > 0 {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	k, err := f.readStreamed(rest)
	switch {
	case k == len(rest):
		return nil
	case err == io.EOF && n+k > 0:
		return io.ErrUnexpectedEOF
	}
	return err
}

// readStreamed fills p (the read-ahead buffer empty) through a bounce
// buffer: one readv per system call, the last one also reading the next
// frame's fixed part ahead into f.buf, and each chunk copied into p with
// streaming stores, fenced once at the end (the bytes are visible when it
// returns, whatever the error). It returns the bytes filled, len(p) or
// fewer with the read error (io.EOF when the stream ended before any).
func (f *frameReader) readStreamed(p []byte) (int, error) {
	b := bounces.Get().(*[bounceSize]byte)
	defer func() {
		memory.Fence()
		f.iov[0], f.cur = nil, nil // no view of a buffer back in the pool
		bounces.Put(b)
	}()
	f.r, f.w = 0, 0
	filled := 0
	for filled < len(p) {
		chunk := b[:min(len(p)-filled, bounceSize)]
		var ahead []byte // the next frame's fixed part, read with the last chunk
		if filled+len(chunk) == len(p) {
			ahead = f.buf[:f.ahead]
		}
		n, err := f.read(chunk, ahead)
		if n == 0 {
			return filled, err
		}
		got := min(n, len(chunk))
		memory.StreamUnfenced(p[filled:], chunk[:got])
		filled += got
		f.w = n - got // the next frame's fixed part, read ahead into buf
	}
	return filled, nil
}

// maxReadIOV bounds the buffers of one readv (the kernel refuses more
// than IOV_MAX, 1024).
const maxReadIOV = 256

// readFullV fills every buffer of dst, in order, as io.ReadFull would
// each in turn, but with one readv per system call over all the buffers
// still to fill (and the next frame's fixed part read ahead into the
// buffer): a payload scattered over several buffers costs what one
// contiguous payload does. Errors: the read error; io.ErrUnexpectedEOF
// when the stream ends inside dst.
func (f *frameReader) readFullV(dst [][]byte) error {
	k, done := 0, 0 // current buffer and the bytes of it filled
	for k < len(dst) && f.r < f.w {
		n := copy(dst[k][done:], f.buf[f.r:f.w])
		f.r += n
		if done += n; done == len(dst[k]) {
			k, done = k+1, 0
		}
	}
	if k == len(dst) {
		return nil
	}
	if f.rc == nil {
		for ; k < len(dst); k, done = k+1, 0 {
			if _, err := io.ReadFull(f, dst[k][done:]); err != nil {
				return err
			}
		}
		return nil
	}
	f.r, f.w = 0, 0
	for k < len(dst) {
		f.iovs = append(f.iovs[:0], dst[k][done:])
		if rest := dst[k+1:]; len(rest) < maxReadIOV {
			f.iovs = append(f.iovs, rest...)
			f.iovs = append(f.iovs, f.buf[:f.ahead])
		} else {
			f.iovs = append(f.iovs, rest[:maxReadIOV-1]...)
		}
		n, err := f.readIOV(f.iovs)
		clear(f.iovs)
		if n == 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		for n > 0 && k < len(dst) {
			m := min(n, len(dst[k])-done)
			n -= m
			if done += m; done == len(dst[k]) {
				k, done = k+1, 0
			}
		}
		f.w = n // bytes read ahead into buf
	}
	return nil
}

// readIOV is read over any number of buffers (a raw socket only).
func (f *frameReader) readIOV(iov [][]byte) (int, error) {
	f.cur = iov
	for {
		f.blocked = false
		if err := f.rc.Read(f.readvFn); err != nil {
			return 0, err
		}
		switch {
		case f.blocked:
			if err := f.send(); err != nil {
				return 0, err
			}
			continue
		case f.err == unix.EINTR:
			continue
		case f.err != nil:
			return 0, f.err
		case f.n == 0:
			return 0, io.EOF
		}
		return f.n, nil
	}
}

// next returns the next n bytes (n at most the buffer's size); they stay
// valid until the next call.
func (f *frameReader) next(n int) ([]byte, error) {
	if f.w-f.r < n {
		if f.r > 0 {
			f.w = copy(f.buf, f.buf[f.r:f.w])
			f.r = 0
		}
		for f.w < n {
			k, err := f.read(f.buf[f.w:], nil)
			if k == 0 {
				return nil, err
			}
			f.w += k
		}
	}
	b := f.buf[f.r : f.r+n]
	f.r += n
	return b, nil
}

// buffered is how many read-ahead bytes are unread.
func (f *frameReader) buffered() int { return f.w - f.r }
