package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// Framed sessions (ours; upstream's master speaks its own coro_rpc): the
// calls of a put and a get, as on the gRPC Session stream, over a plain
// TCP connection (mutual TLS when the master has TLS) to a second
// listener of the master. A connection starts with the client's 8 bytes
// store.FramedSessionMagic; then each direction is a sequence of frames, a
// uint32 little-endian length and that many bytes of protobuf
// (storepb.SessionRequest from the client, storepb.SessionResponse from
// the master), answered by id in any order. Why: a call over gRPC's
// stream takes HTTP/2 framing and more goroutine hand-offs (the stream's
// sender and reader, gRPC's writer and reader) than one frame written by
// the calling goroutine and read by one reader on each side: 38-47
// against 48 CPU-us per call (BenchmarkMasterCall), and tcp put and get
// at 1 MiB ran 1.13-1.15 x faster framed (make bench-store), where the
// master call's latency on busy cores is what a put or get waits for
// beyond its transfer. Clients find the listener's port with the unary
// call store.FramedSessionPortMethod and fall back to the gRPC stream where it
// fails (an older master, a port they cannot reach).

// framedHelloTimeout bounds how long an accepted connection (its TLS
// handshake included) may take to send store.FramedSessionMagic.
const framedHelloTimeout = 10 * time.Second

// framedBodyTimeout bounds how long the bytes of a request larger than
// framedSmallFrame may take to arrive once its length did (a variable for
// tests).
var framedBodyTimeout = 30 * time.Second

// framedSmallFrame is the largest request allowed to arrive slowly.
const framedSmallFrame = 64 << 10

// framedWriteTimeout bounds one answer's write: a client that reads none
// for this long loses its connection (its calls then fail, as when a gRPC
// stream breaks), instead of holding the master's call goroutines.
const framedWriteTimeout = 30 * time.Second

// framedSessionDesc registers the port call by hand (no generated stub:
// it is not part of storepb.Master, which mirrors upstream's service).
var framedSessionDesc = grpc.ServiceDesc{
	ServiceName: "mooncake_go.FramedSession",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Port",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) { return srv.(*Server).framedPort() }
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: store.FramedSessionPortMethod}, h)
		},
	}},
}

// framedPort answers store.FramedSessionPortMethod.
func (s *Server) framedPort() (*wrapperspb.UInt32Value, error) {
	s.framed.mu.Lock()
	defer s.framed.mu.Unlock()
	if s.framed.ln == nil {
		return nil, gstatus.Error(codes.Unimplemented, "master serves no framed session listener")
	}
	return wrapperspb.UInt32(uint32(s.framed.ln.Addr().(*net.TCPAddr).Port)), nil
}

// framedState is the Server's framed session listener and connections.
type framedState struct {
	mu     sync.Mutex
	ln     net.Listener // TCP (listenFramed checks); nil = none
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection goroutines
}

// ServeFramedSessions serves framed sessions (see store.FramedSessionMagic) on
// ln until Close, with mutual TLS when the Server has Options.TLS, and
// advertises ln's port to clients (store.FramedSessionPortMethod). At most one
// listener: a second call fails. Errors: that; ln's Accept error other
// than its closing by Close (net.ErrClosed is returned after Close).
func (s *Server) ServeFramedSessions(ln net.Listener) error {
	if err := s.listenFramed(ln); err != nil {
		return err
	}
	return s.acceptFramed(ln)
}

// listenFramed makes ln the framed session listener and advertises its
// port (ServeFramedSessions before its accept loop; Process.Start runs it
// before serving gRPC, so that no client asks for the port before it is
// set). Errors as ServeFramedSessions'.
func (s *Server) listenFramed(ln net.Listener) error {
	if _, ok := ln.Addr().(*net.TCPAddr); !ok {
		return fmt.Errorf("master: framed session listener on %v: not TCP", ln.Addr())
	}
	s.framed.mu.Lock()
	defer s.framed.mu.Unlock()
	switch {
	case s.framed.closed:
		ln.Close()
		return net.ErrClosed
	case s.framed.ln != nil:
		return fmt.Errorf("master: a framed session listener is already served (%v)", s.framed.ln.Addr())
	}
	s.framed.ln = ln
	s.framed.conns = map[net.Conn]struct{}{}
	return nil
}

// acceptFramed is ServeFramedSessions' accept loop on ln (listenFramed's).
// An Accept error other than the listener's closing (EMFILE when the
// process is out of descriptors, ECONNABORTED, ...) is waited out, as
// net/http and gRPC do: 5 ms doubling to 1 s, reset by a success; the
// listener keeps serving once descriptors are free again.
func (s *Server) acceptFramed(ln net.Listener) error {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			s.framed.mu.Lock()
			closed := s.framed.closed
			s.framed.mu.Unlock()
			if closed {
				return net.ErrClosed
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if s.logf != nil {
				s.logf("master: framed session accept: %v; retrying in %v", err, backoff)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if s.tls != nil {
			c = tls.Server(c, s.tls.Server())
		}
		s.framed.mu.Lock()
		if s.framed.closed {
			s.framed.mu.Unlock()
			c.Close()
			return net.ErrClosed
		}
		s.framed.conns[c] = struct{}{}
		s.framed.wg.Add(1)
		s.framed.mu.Unlock()
		go func() {
			defer s.framed.wg.Done()
			s.serveFramed(c)
			s.framed.mu.Lock()
			delete(s.framed.conns, c)
			s.framed.mu.Unlock()
			c.Close()
		}()
	}
}

// FramedSessions is the number of framed session connections open now
// (those past their hello and those still sending it).
func (s *Server) FramedSessions() int {
	s.framed.mu.Lock()
	defer s.framed.mu.Unlock()
	return len(s.framed.conns)
}

// closeFramed stops the framed listener, closes every connection and waits
// for their calls to end (Close).
func (s *Server) closeFramed() {
	s.framed.mu.Lock()
	s.framed.closed = true
	if s.framed.ln != nil {
		s.framed.ln.Close()
	}
	for c := range s.framed.conns {
		c.Close()
	}
	s.framed.mu.Unlock()
	s.framed.wg.Wait()
}

// serveFramed reads the hello and then serves c's frames as a Session
// stream until c fails or closes.
func (s *Server) serveFramed(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(framedHelloTimeout))
	var hello [len(store.FramedSessionMagic)]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		if s.logf != nil {
			s.logf("master: framed session from %v: no hello within %v: %v", c.RemoteAddr(), framedHelloTimeout, err)
		}
		return
	}
	if string(hello[:]) != store.FramedSessionMagic {
		if s.logf != nil {
			s.logf("master: framed session from %v: refused: it did not start with %q", c.RemoteAddr(), store.FramedSessionMagic)
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.serveSession(&framedConn{ctx: ctx, cancel: cancel, c: c, br: bufio.NewReaderSize(c, 64<<10)})
}

// framedConn is a framed session connection seen by the master: a
// sessionStream.
type framedConn struct {
	ctx    context.Context
	cancel context.CancelFunc // ends ctx: the connection failed
	c      net.Conn
	br     *bufio.Reader
	wbuf   []byte // Send's frame buffer (Sends are serialized by serveSession)
}

func (f *framedConn) Context() context.Context { return f.ctx }

// Recv reads the next request. Errors: the connection's (io.EOF when the
// client closed it); a frame longer than store.MaxRequestBytes or one
// that is not a SessionRequest, after which the connection is unusable.
func (f *framedConn) Recv() (*pb.SessionRequest, error) {
	// A connection may idle between frames, but a large frame's bytes
	// must arrive within framedBodyTimeout once its length did: a client
	// announcing large frames and stalling holds their memory no longer.
	if h, err := f.br.Peek(4); err == nil && binary.LittleEndian.Uint32(h) > framedSmallFrame {
		f.c.SetReadDeadline(time.Now().Add(framedBodyTimeout))
		defer f.c.SetReadDeadline(time.Time{})
	}
	b, err := store.ReadFrame(f.br, store.MaxRequestBytes)
	if err != nil {
		f.cancel()
		return nil, err
	}
	req := new(pb.SessionRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		f.cancel()
		return nil, fmt.Errorf("framed session: bad request frame: %w", err)
	}
	return req, nil
}

// Send writes resp as one frame within framedWriteTimeout; on failure it
// closes the connection, so that Recv fails too.
func (f *framedConn) Send(resp *pb.SessionResponse) error {
	var err error
	if f.wbuf, err = store.AppendFrame(f.wbuf[:0], resp); err == nil {
		f.c.SetWriteDeadline(time.Now().Add(framedWriteTimeout))
		_, err = f.c.Write(f.wbuf)
	}
	if cap(f.wbuf) > 1<<20 {
		f.wbuf = nil // keep no large answer's buffer for the connection's life
	}
	if err != nil {
		f.cancel()
		f.c.Close()
	}
	return err
}
