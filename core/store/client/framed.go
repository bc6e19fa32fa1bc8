package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
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

	wsem chan struct{} // one writer at a time; waited for within the call's ctx
	wbuf []byte        // send's frame buffer, held with wsem
}

// dialFramed opens a framed session: it asks the master for the port
// (store.FramedSessionPortMethod), dials it on the master's host (mutual
// TLS with s.tls) and sends the hello, all within ctx and
// framedDialTimeout. Errors: the port call's (Unimplemented: the master
// serves none; Unavailable: the master connection failed), a bad master
// address, the dial's or handshake's.
func (s *session) dialFramed(ctx context.Context) (*framedStream, error) {
	host, _, err := net.SplitHostPort(s.addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, framedDialTimeout)
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
	return &framedStream{c: c, br: bufio.NewReaderSize(c, 64<<10), wsem: make(chan struct{}, 1)}, nil
}

// send writes req as one frame, waiting for the connection (another
// call's write) and writing within ctx's deadline (framedWriteTimeout
// without one). Errors, when nothing of req was written and the
// connection stays usable: ctx's, when it ended before the write could
// start or while the write had sent nothing yet; an encoding failure.
// A write cut short in the middle of the frame closes the connection (the
// byte stream cannot be resumed): its reader then fails every call waiting
// on it, this one too, and send returns nil; so does any other write
// failure (a broken connection).
func (f *framedStream) send(ctx context.Context, req *pb.SessionRequest) error {
	select {
	case f.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.wsem }()
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
	n, err := f.c.Write(b)
	if err == nil {
		return nil
	}
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		if ok {
			return context.DeadlineExceeded
		}
		return status.Errorf(codes.DeadlineExceeded, "framed session: master read nothing for %v", framedWriteTimeout)
	}
	f.CloseSend()
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
