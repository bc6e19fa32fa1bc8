package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// serveFramedTCP serves h's framed sessions on 127.0.0.1 and returns the
// address and the channel ServeFramedSessions' result arrives on.
func serveFramedTCP(t *testing.T, h *harness) (string, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- h.srv.ServeFramedSessions(ln) }()
	return ln.Addr().String(), done
}

// framedClient is a raw framed session connection for tests.
type framedClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialFramedTest(t *testing.T, addr string, hello string) *framedClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = io.WriteString(c, hello)
	require.NoError(t, err)
	return &framedClient{c: c, br: bufio.NewReader(c)}
}

func (f *framedClient) send(t *testing.T, req *pb.SessionRequest) {
	t.Helper()
	b, err := store.AppendFrame(nil, req)
	require.NoError(t, err)
	_, err = f.c.Write(b)
	require.NoError(t, err)
}

func (f *framedClient) recv(t *testing.T) *pb.SessionResponse {
	t.Helper()
	b, err := store.ReadFrame(f.br, store.MaxAnswerBytes)
	require.NoError(t, err)
	resp := new(pb.SessionResponse)
	require.NoError(t, proto.Unmarshal(b, resp))
	return resp
}

// closedByServer reports whether the server closed f (a read ends with EOF
// or a reset before the deadline).
func (f *framedClient) closedByServer(t *testing.T) bool {
	t.Helper()
	f.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, f.br)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestFramedSessionCalls: the port call fails Unimplemented until the
// listener is served, then names its port; over a connection, pipelined
// requests are answered by id with the unary calls' results (put started,
// ended, listed; a missing key's code; a request naming no call
// InvalidArgument), and count in the per-method metrics.
func TestFramedSessionCalls(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096))
	port := new(wrapperspb.UInt32Value)
	err := h.conn.Invoke(ctx(t), store.FramedSessionPortMethod, new(emptypb.Empty), port)
	assert.Equal(t, codes.Unimplemented, gstatus.Code(err), "port call before the listener: %v", err)
	addr, _ := serveFramedTCP(t, h)
	_, portStr, _ := net.SplitHostPort(addr)
	require.Eventually(t, func() bool {
		return h.conn.Invoke(ctx(t), store.FramedSessionPortMethod, new(emptypb.Empty), port) == nil
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, portStr, strconv.Itoa(int(port.Value)))

	f := dialFramedTest(t, addr, store.FramedSessionMagic)
	keys := &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"x"})}
	f.send(t, &pb.SessionRequest{Id: 7, TimeoutMs: 5000, Call: &pb.SessionRequest_PutStart{PutStart: &pb.BatchPutStartRequest{
		ClientId: "c1", Keys: pb.Keys([]string{"x"}), Sizes: []uint64{1024}, Config: &pb.ReplicaConfig{ReplicaNum: 1}}}})
	r := f.recv(t)
	require.Equal(t, uint64(7), r.Id)
	require.Len(t, r.GetPutStart().GetResults(), 1)
	assert.Zero(t, r.GetPutStart().Results[0].GetStatus().GetCode())
	require.Equal(t, 1, h.srv.FramedSessions())
	// Three requests in one write; answers come back by id, in any order.
	var batch []byte
	for _, req := range []*pb.SessionRequest{
		{Id: 8, Call: &pb.SessionRequest_PutEnd{PutEnd: keys}},
		{Id: 9},
	} {
		batch, err = store.AppendFrame(batch, req)
		require.NoError(t, err)
	}
	_, err = f.c.Write(batch)
	require.NoError(t, err)
	got := map[uint64]*pb.SessionResponse{}
	for range 2 {
		r := f.recv(t)
		got[r.Id] = r
	}
	require.Len(t, got[8].GetPutEnd().GetResults(), 1)
	assert.Zero(t, got[8].GetPutEnd().Results[0].GetCode())
	assert.Equal(t, int32(codes.InvalidArgument), got[9].GrpcCode)
	assert.Nil(t, got[9].Result)
	f.send(t, &pb.SessionRequest{Id: 10, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"x", "nope"})}}})
	r = f.recv(t)
	require.Equal(t, uint64(10), r.Id)
	require.Len(t, r.GetGetReplicaList().GetResults(), 2)
	assert.Equal(t, uint64(1024), r.GetGetReplicaList().Results[0].Replicas[0].Size)
	assert.NotZero(t, r.GetGetReplicaList().Results[1].GetStatus().GetCode(), "missing key")

	rec := httptest.NewRecorder()
	h.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, m := range []string{"BatchPutStart", "BatchPutEnd", "BatchGetReplicaList"} {
		assert.Contains(t, rec.Body.String(), `master_rpc_requests_total{method="`+m+`"} 1`, m)
	}
	f.c.Close()
	require.Eventually(t, func() bool { return h.srv.FramedSessions() == 0 }, 10*time.Second, time.Millisecond)
}

// TestFramedSessionRefusesBadInput: a wrong hello, a frame longer than
// the request limit and a frame that is no SessionRequest each close
// their connection (nothing is run), and the listener goes on serving.
func TestFramedSessionRefusesBadInput(t *testing.T) {
	h := newHarness(t)
	addr, _ := serveFramedTCP(t, h)
	f := dialFramedTest(t, addr, "GET / HTTP/1.1\r\n")
	assert.True(t, f.closedByServer(t), "wrong hello")

	f = dialFramedTest(t, addr, store.FramedSessionMagic)
	var big [4]byte
	binary.LittleEndian.PutUint32(big[:], store.MaxRequestBytes+1)
	_, err := f.c.Write(big[:])
	require.NoError(t, err)
	assert.True(t, f.closedByServer(t), "frame over the limit")

	f = dialFramedTest(t, addr, store.FramedSessionMagic)
	_, err = f.c.Write([]byte{3, 0, 0, 0, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	assert.True(t, f.closedByServer(t), "undecodable frame")

	f = dialFramedTest(t, addr, store.FramedSessionMagic)
	f.send(t, &pb.SessionRequest{Id: 1, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"k"})}}})
	r := f.recv(t)
	assert.Equal(t, uint64(1), r.Id)
	require.Len(t, r.GetGetReplicaList().GetResults(), 1)
	assert.NotZero(t, r.GetGetReplicaList().Results[0].GetStatus().GetCode(), "missing key")
}

// TestFramedSessionLargeFrameStalls: a client announcing a large frame
// and stalling is disconnected after framedBodyTimeout; one idling
// between frames is not.
func TestFramedSessionLargeFrameStalls(t *testing.T) {
	old := framedBodyTimeout
	framedBodyTimeout = 200 * time.Millisecond
	t.Cleanup(func() { framedBodyTimeout = old }) // after the harness's cleanup stopped the server
	h := newHarness(t)
	addr, _ := serveFramedTCP(t, h)
	idle := dialFramedTest(t, addr, store.FramedSessionMagic)
	stall := dialFramedTest(t, addr, store.FramedSessionMagic)
	_, err := stall.c.Write([]byte{0, 0, 0x10, 0, 1, 2, 3}) // 1 MiB announced, 3 bytes sent
	require.NoError(t, err)
	assert.True(t, stall.closedByServer(t), "a stalled large frame")
	idle.send(t, &pb.SessionRequest{Id: 3}) // after more than the body timeout of idling
	assert.Equal(t, uint64(3), idle.recv(t).Id)
}

// TestFramedSessionClose: Close closes the open connections and ends
// ServeFramedSessions with net.ErrClosed; a listener served after Close
// is refused the same way.
func TestFramedSessionClose(t *testing.T) {
	h := newHarness(t)
	addr, done := serveFramedTCP(t, h)
	f := dialFramedTest(t, addr, store.FramedSessionMagic)
	f.send(t, &pb.SessionRequest{Id: 1})
	assert.Equal(t, int32(codes.InvalidArgument), f.recv(t).GrpcCode)
	h.srv.Close()
	assert.True(t, f.closedByServer(t), "connection after Close")
	select {
	case err := <-done:
		assert.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("ServeFramedSessions still running after Close")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	assert.ErrorIs(t, h.srv.ServeFramedSessions(ln), net.ErrClosed)
}

// FuzzFramedSession: whatever bytes follow the hello, the master never
// panics, every answer it writes is a whole SessionResponse frame, and
// once the client half-closes, the connection's handler answers what it
// read and returns.
func FuzzFramedSession(f *testing.F) {
	req := func(m *pb.SessionRequest) []byte {
		b, err := store.AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(req(&pb.SessionRequest{Id: 1, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "c", Keys: pb.Keys([]string{"k"})}}}))
	f.Add(append(req(&pb.SessionRequest{Id: 2}), req(&pb.SessionRequest{Id: 3, Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{Keys: pb.Keys([]string{"a", "b"})}}})...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0, 0x08})
	h := newHarness(f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(f, err)
	defer ln.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		cli, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer cli.Close()
		srvSide, err := ln.Accept()
		require.NoError(t, err)
		served := make(chan struct{})
		go func() {
			defer close(served)
			h.srv.serveFramed(srvSide)
			srvSide.Close()
		}()
		answers := make(chan error, 1)
		go func() {
			br := bufio.NewReader(cli)
			for {
				b, err := store.ReadFrame(br, store.MaxAnswerBytes)
				if errors.Is(err, io.EOF) {
					answers <- nil
					return
				}
				if err == nil {
					err = proto.Unmarshal(b, new(pb.SessionResponse))
				}
				if err != nil {
					answers <- err
					return
				}
			}
		}()
		cli.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := cli.Write(append([]byte(store.FramedSessionMagic), in...)); err == nil {
			cli.(*net.TCPConn).CloseWrite()
		}
		select {
		case err := <-answers:
			require.NoError(t, err, "answer frames")
		case <-time.After(30 * time.Second):
			t.Fatal("no end of the answers 30 s after the input ended")
		}
		<-served
	})
}

// flakyListener fails its first n Accepts with EMFILE, as a process out
// of descriptors, then accepts.
type flakyListener struct {
	net.Listener
	n atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestFramedSessionSurvivesAcceptErrors: Accept failing with EMFILE is
// waited out; the listener then serves a connection.
func TestFramedSessionSurvivesAcceptErrors(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fl := &flakyListener{Listener: ln}
	fl.n.Store(4)
	done := make(chan error, 1)
	go func() { done <- h.srv.ServeFramedSessions(fl) }()
	f := dialFramedTest(t, ln.Addr().String(), store.FramedSessionMagic)
	f.send(t, &pb.SessionRequest{Id: 5})
	r := f.recv(t)
	assert.Equal(t, uint64(5), r.Id)
	assert.Equal(t, int32(codes.InvalidArgument), r.GrpcCode)
	assert.Less(t, fl.n.Load(), int32(0), "every failing Accept was retried")
	h.srv.Close()
	assert.ErrorIs(t, <-done, net.ErrClosed)
}

// TestFramedSessionLookupBehindItsSeal: on one framed connection, a
// replica-list call of a precommitted key followed by that key's PutEnd
// finds the value: the lookup, which waits for the seal, runs apart
// from the read loop, so the PutEnd behind it is read and run (run in the
// read loop, the lookup would hold the PutEnd unread until SealWait and
// answer REPLICA_IS_NOT_READY). Quick calls (a lookup of a sealed key, a
// missing key) are answered on the same connection too.
func TestFramedSessionLookupBehindItsSeal(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "node", pbSeg("s1", 1<<30, 1<<20))
	addr, _ := serveFramedTCP(t, h)
	h.precommit(t, "writer", "k", 4096)
	f := dialFramedTest(t, addr, store.FramedSessionMagic)
	var batch []byte
	for _, req := range []*pb.SessionRequest{
		{Id: 1, TimeoutMs: 30000, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "reader", Keys: pb.Keys([]string{"k"})}}},
		{Id: 2, Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{ClientId: "writer", Keys: pb.Keys([]string{"k"})}}},
	} {
		var err error
		batch, err = store.AppendFrame(batch, req)
		require.NoError(t, err)
	}
	_, err := f.c.Write(batch)
	require.NoError(t, err)
	got := map[uint64]*pb.SessionResponse{}
	for range 2 {
		r := f.recv(t)
		got[r.Id] = r
	}
	require.Len(t, got[2].GetPutEnd().GetResults(), 1)
	assert.Zero(t, got[2].GetPutEnd().Results[0].GetCode(), "the seal")
	require.Len(t, got[1].GetGetReplicaList().GetResults(), 1)
	res := got[1].GetGetReplicaList().Results[0]
	require.Zero(t, res.GetStatus().GetCode(), "lookup of the precommitted key after its seal: %s", res.GetStatus().GetMessage())
	require.Len(t, res.Replicas, 1)
	assert.Equal(t, uint64(4096), res.Replicas[0].Size)

	f.send(t, &pb.SessionRequest{Id: 3, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "reader", Keys: pb.Keys([]string{"k", "nope"})}}})
	r := f.recv(t)
	require.Equal(t, uint64(3), r.Id)
	require.Len(t, r.GetGetReplicaList().GetResults(), 2)
	assert.Zero(t, r.GetGetReplicaList().Results[0].GetStatus().GetCode())
	assert.Equal(t, int32(store.ObjectNotFound), r.GetGetReplicaList().Results[1].GetStatus().GetCode())
}
