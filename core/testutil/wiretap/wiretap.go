// Package wiretap records real traffic for fuzz seeds: a Tap is a TCP
// proxy on 127.0.0.1 that forwards every connection to a target address
// and keeps a copy of the bytes each way. Fuzz targets run a real client
// against a real server through a Tap and add the recorded streams to
// their seed corpus, so fuzzing starts from frames a peer actually sends.
//
// Bytes are recorded as they are read, before they are forwarded: once an
// endpoint has received something, the recording holds it.
//
// Concurrency: a Tap is safe for concurrent use; each proxied connection
// has two goroutines, which Close ends and waits for.
package wiretap

import (
	"io"
	"net"
	"sync"
)

// Recording is one proxied connection: Up is what the client sent, Down
// what the server answered, each in order.
type Recording struct {
	Up, Down []byte
}

// Tap is a recording proxy. Create with Start; Close returns what it saw.
type Tap struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		recs   []*Recording // in accept order
		conns  []net.Conn   // both ends of every proxied connection, for Close
		closed bool
	}
}

// Start listens on 127.0.0.1 (an ephemeral port) and proxies every
// accepted connection to target ("host:port", dialled per connection).
// Errors: the listen error.
func Start(target string) (*Tap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &Tap{ln: ln, target: target}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Addr is the address clients dial instead of the target ("127.0.0.1:port").
func (t *Tap) Addr() string { return t.ln.Addr().String() }

// Port is Addr's port.
func (t *Tap) Port() int { return t.ln.Addr().(*net.TCPAddr).Port }

func (t *Tap) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", t.target)
		if err != nil {
			c.Close()
			continue
		}
		rec := &Recording{}
		t.mu.Lock()
		if t.mu.closed {
			t.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		t.mu.recs = append(t.mu.recs, rec)
		t.mu.conns = append(t.mu.conns, c, s)
		t.mu.Unlock()
		t.wg.Add(2)
		go t.pipe(s, c, &rec.Up)
		go t.pipe(c, s, &rec.Down)
	}
}

// pipe copies src to dst, appending every chunk to *log (under t.mu)
// before forwarding it; at src's end it half-closes dst when it can.
func (t *Tap) pipe(dst, src net.Conn, log *[]byte) {
	defer t.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			t.mu.Lock()
			*log = append(*log, buf[:n]...)
			t.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == io.EOF {
				cw.CloseWrite()
			} else {
				dst.Close()
			}
			return
		}
	}
}

// Close stops the proxy, closes every proxied connection, waits for its
// goroutines and returns the recordings, in accept order. Call it once
// the exchanges to record are over.
func (t *Tap) Close() []Recording {
	t.mu.Lock()
	t.mu.closed = true
	conns := t.mu.conns
	t.mu.Unlock()
	t.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Recording, len(t.mu.recs))
	for i, r := range t.mu.recs {
		out[i] = *r
	}
	return out
}
