package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// framedWriteTimeout bounds a framed request's write when its call has no
// deadline.
const framedWriteTimeout = 30 * time.Second

// framedStream is a framed session connection to the master (see
// session.go): requests are written by the calls (send), answers read by
// the session's reader (Recv).
type framedStream struct {
	c    net.Conn
	br   *bufio.Reader // Recv's, used by the reader goroutine only
	once sync.Once     // closes c

	wmu  sync.Mutex
	wbuf []byte // send's frame buffer, under wmu
}

// dialFramed opens a framed session: it asks the master for the port
// (store.FramedSessionPortMethod), dials it on the master's host (mutual
// TLS with s.tls) and sends the hello, all within framedDialTimeout.
// Errors: the port call's (Unimplemented: the master serves none), a bad
// master address, the dial's or handshake's.
func (s *session) dialFramed() (*framedStream, error) {
	host, _, err := net.SplitHostPort(s.addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), framedDialTimeout)
	defer cancel()
	port := new(wrapperspb.UInt32Value)
	if err := s.conn.Invoke(ctx, store.FramedSessionPortMethod, new(emptypb.Empty), port); err != nil {
		return nil, err
	}
	if port.Value == 0 || port.Value > 65535 {
		return nil, fmt.Errorf("master answered framed session port %d", port.Value)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port.Value))))
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		tc := s.tls.Client()
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		tcn := tls.Client(c, tc)
		if err := tcn.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tcn
	}
	dl, _ := ctx.Deadline()
	c.SetWriteDeadline(dl)
	if _, err := c.Write([]byte(store.FramedSessionMagic)); err != nil {
		c.Close()
		return nil, err
	}
	return &framedStream{c: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

// send writes req as one frame, within ctx's deadline (framedWriteTimeout
// without one). A failed write closes the connection: its reader then
// fails every call waiting on it. Errors: only an encoding failure, which
// concerns req alone (nothing is written, the connection stays).
func (f *framedStream) send(ctx context.Context, req *pb.SessionRequest) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	b, err := store.AppendFrame(f.wbuf[:0], req)
	if err != nil {
		return status.Errorf(codes.Internal, "framed session: encode request: %v", err)
	}
	if cap(b) <= 1<<20 {
		f.wbuf = b // keep no large request's buffer for the connection's life
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(framedWriteTimeout)
	}
	f.c.SetWriteDeadline(dl)
	if _, err := f.c.Write(b); err != nil {
		f.CloseSend()
	}
	return nil
}

// Recv reads the next answer. Errors: Unavailable when the connection
// failed or was closed, Internal for an answer that does not decode (the
// connection is closed then too).
func (f *framedStream) Recv() (*pb.SessionResponse, error) {
	b, err := store.ReadFrame(f.br, store.MaxAnswerBytes)
	if err != nil {
		f.CloseSend()
		return nil, status.Errorf(codes.Unavailable, "framed session to the master: %v", err)
	}
	resp := new(pb.SessionResponse)
	if err := proto.Unmarshal(b, resp); err != nil {
		f.CloseSend()
		return nil, status.Errorf(codes.Internal, "framed session: bad answer from the master: %v", err)
	}
	return resp, nil
}

// CloseSend closes the connection (both directions); Recv then fails.
func (f *framedStream) CloseSend() error {
	f.once.Do(func() { f.c.Close() })
	return nil
}
