package transfer

import (
	"fmt"
	"net"
	"sync"
)

// ConnServer is the listening side shared by the socket transports (tcp's
// data plane, rdma's control channel): it accepts connections, runs one
// handler goroutine per connection, and on Close stops accepting, closes
// every live connection and waits for the handlers. The zero value is ready
// to use; it serves one listener.
type ConnServer struct {
	mu struct {
		sync.Mutex
		ln     net.Listener
		conns  map[net.Conn]struct{} // accepted and still being handled
		closed bool
	}
	wg sync.WaitGroup // accept loop and handlers
}

// Listen binds addr ("host:port", port 0 = ephemeral) and serves each
// accepted connection with handle, closing the connection when handle
// returns. Errors: ErrClosed after Close; the listen error naming addr.
func (s *ConnServer) Listen(addr string, handle func(net.Conn)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.mu.ln = ln
	s.mu.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln, handle)
	return nil
}

func (s *ConnServer) accept(ln net.Listener, handle func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			handle(c)
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// Addr is the bound address (nil before Listen).
func (s *ConnServer) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.ln == nil {
		return nil
	}
	return s.mu.ln.Addr()
}

// Endpoint is what peers should dial: host (when not empty), else the bound
// IP, or LANAddress() when bound to every interface; and the bound port.
// Port 0 and host as given before Listen.
func (s *ConnServer) Endpoint(host string) (string, int) {
	a, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return host, 0
	}
	if host == "" {
		host = a.IP.String()
		if a.IP.IsUnspecified() {
			host = LANAddress()
		}
	}
	return host, a.Port
}

// Close stops accepting, closes every live connection and waits for their
// handlers. Errors: ErrClosed on a second call; the listener's close error.
func (s *ConnServer) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closed = true
	ln := s.mu.ln
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	s.wg.Wait()
	return err
}
