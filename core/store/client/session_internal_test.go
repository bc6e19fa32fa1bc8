package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// stuckMaster accepts Session streams and never answers: with read it
// reads every request (reporting each on got), without it reads none.
type stuckMaster struct {
	pb.UnimplementedMasterServer
	read bool
	got  chan uint64
}

func (m *stuckMaster) Session(st pb.Master_SessionServer) error {
	if !m.read {
		<-st.Context().Done()
		return nil
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		m.got <- req.Id
	}
}

// stuckSession serves m on 127.0.0.1 (with gopts) and returns a session
// of a connection to it, ready; the server is stopped at cleanup.
func stuckSession(t *testing.T, m *stuckMaster, gopts ...grpc.ServerOption) (*session, *grpc.Server) {
	t.Helper()
	conn, g := readyConn(t, func(g *grpc.Server) { pb.RegisterMasterServer(g, m) }, gopts...)
	return newSession(conn, pb.NewMasterClient(conn), false, "", nil, nil), g
}

// readyConn serves a gRPC server (its services registered by reg, with
// gopts) on 127.0.0.1 and returns a ready connection to it and the
// server; both are stopped at cleanup.
func readyConn(t *testing.T, reg func(*grpc.Server), gopts ...grpc.ServerOption) (*grpc.ClientConn, *grpc.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer(gopts...)
	reg(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		require.True(t, conn.WaitForStateChange(ctx, st), "connection to the stuck master not ready")
	}
	return conn, g
}

// returnsWithin runs f and fails the test if it has not returned after d.
func returnsWithin(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
	}
}

// callsOutlastMaster starts n calls on s (half with a deadline), waits
// until got has reported each at the master, runs kill, and checks that
// every call returns Unavailable, that close then ends the session's
// goroutines, and that later calls go unary.
func callsOutlastMaster(t *testing.T, s *session, n int, got <-chan uint64, kill func()) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i%2 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			_, errs[i] = s.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{Keys: pb.Keys([]string{fmt.Sprint(i)})}}})
		}()
	}
	for range n {
		select {
		case <-got: // every call is at the master
		case <-time.After(20 * time.Second):
			t.Fatal("requests never reached the master")
		}
	}
	kill()
	returnsWithin(t, 20*time.Second, "calls in flight when the master died", wg.Wait)
	for i, err := range errs {
		assert.Equal(t, codes.Unavailable, status.Code(err), "call %d: %v", i, err)
	}
	returnsWithin(t, 20*time.Second, "session close", s.close)
	// Closed: calls go unary.
	_, err := s.call(context.Background(), &pb.SessionRequest{})
	assert.ErrorIs(t, err, errNoSession)
}

// TestSessionCallsReturnWhenMasterDies: calls in flight on the stream
// (with and without a deadline) all return, Unavailable, when the master
// goes away under them; close then ends the stream's goroutines.
func TestSessionCallsReturnWhenMasterDies(t *testing.T) {
	const n = 40
	m := &stuckMaster{read: true, got: make(chan uint64, n)}
	s, g := stuckSession(t, m)
	callsOutlastMaster(t, s, n, m.got, g.Stop)
}

// TestSessionDeadlineWhileStreamBlocked: a call whose request cannot be
// sent (the master reads nothing, so gRPC flow control holds the stream)
// still returns at its deadline, as the unary call would.
func TestSessionDeadlineWhileStreamBlocked(t *testing.T) {
	m := &stuckMaster{}
	// Small fixed windows: the client may send 64 KiB that nobody reads.
	s, _ := stuckSession(t, m, grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	defer s.close()
	big := []string{strings.Repeat("k", 256<<10)} // more than the window
	for i := range 3 {
		returnsWithin(t, 20*time.Second, fmt.Sprintf("call %d with a 200 ms deadline", i), func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := s.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{Keys: pb.Keys(big)}}})
			assert.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
		})
	}
}

// TestSessionOversizedRequestGoesUnary: a request over the master's
// receive limit is not sent on the stream (it would end the stream for
// every call on it) but returned as errNoSession, so it goes out as its
// unary RPC; the next normal request uses the stream.
func TestSessionOversizedRequestGoesUnary(t *testing.T) {
	m := &stuckMaster{read: true, got: make(chan uint64, 4)}
	s, _ := stuckSession(t, m)
	defer s.close()
	keys := make([][]byte, 0, 1100)
	for range cap(keys) {
		keys = append(keys, make([]byte, 4096))
	}
	_, err := s.call(context.Background(), &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{Keys: keys}}})
	require.ErrorIs(t, err, errNoSession)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = s.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{Keys: keys[:1]}}})
	require.ErrorIs(t, err, context.DeadlineExceeded) // the stuck master never answers
	select {
	case id := <-m.got:
		assert.Equal(t, uint64(1), id, "the first request on the stream is the small one")
	case <-time.After(10 * time.Second):
		t.Fatal("the small request never reached the master's stream")
	}
}

// stuckFramed is a master whose framed session listener reads requests
// (reporting their ids on got, with read) or reads nothing, and never
// answers; its gRPC side answers only the framed port call.
type stuckFramed struct {
	pb.UnimplementedMasterServer
	read bool
	got  chan uint64
	ln   net.Listener
	mu   sync.Mutex
	cs   []net.Conn
}

func (m *stuckFramed) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		m.cs = append(m.cs, c)
		m.mu.Unlock()
		if !m.read {
			continue
		}
		go readFrames(c, func(req *pb.SessionRequest) bool {
			m.got <- req.Id
			return true
		})
	}
}

// kill closes the framed listener and every connection, as a master
// process that died.
func (m *stuckFramed) kill() {
	m.ln.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.cs {
		c.Close()
	}
}

// readFrames reads a framed session's hello and then its requests from
// c, calling each for every one, until c fails, a frame does not decode
// or each returns false.
func readFrames(c net.Conn, each func(*pb.SessionRequest) bool) {
	br := bufio.NewReader(c)
	var hello [len(store.FramedSessionMagic)]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return
	}
	for {
		b, err := store.ReadFrame(br, store.MaxRequestBytes)
		if err != nil {
			return
		}
		req := new(pb.SessionRequest)
		if proto.Unmarshal(b, req) != nil || !each(req) {
			return
		}
	}
}

// portService is a master's framed port call (store.FramedSessionPortMethod)
// answered by port.
func portService(port func(ctx context.Context) (*wrapperspb.UInt32Value, error)) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "mooncake_go.FramedSession", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Port", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return port(ctx)
		}}},
	}
}

// listenerPort answers the port of ln.
func listenerPort(ln net.Listener) func(context.Context) (*wrapperspb.UInt32Value, error) {
	return func(context.Context) (*wrapperspb.UInt32Value, error) {
		return wrapperspb.UInt32(uint32(ln.Addr().(*net.TCPAddr).Port)), nil
	}
}

// stuckFramedSession serves m (its framed listener on 127.0.0.1, the
// port call over gRPC) and returns a session of a ready connection to it,
// with framed sessions on; everything is stopped at cleanup.
func stuckFramedSession(t *testing.T, m *stuckFramed) *session {
	t.Helper()
	var err error
	m.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go m.serve()
	t.Cleanup(m.kill)
	conn, _ := readyConn(t, func(g *grpc.Server) {
		pb.RegisterMasterServer(g, m)
		g.RegisterService(portService(listenerPort(m.ln)), m)
	})
	return newSession(conn, pb.NewMasterClient(conn), false, conn.Target(), nil, nil)
}

// TestFramedCallsReturnWhenMasterDies: calls in flight on a framed
// session (with and without a deadline) all return, Unavailable, when
// the master's connection goes away under them; close then ends the
// reader; the calls went out framed (the master saw them there).
func TestFramedCallsReturnWhenMasterDies(t *testing.T) {
	const n = 40
	m := &stuckFramed{read: true, got: make(chan uint64, n)}
	s := stuckFramedSession(t, m)
	callsOutlastMaster(t, s, n, m.got, m.kill)
}

// TestFramedDeadlineWhileMasterReadsNothing: calls whose requests cannot
// be written (the master reads nothing; the socket buffers fill), several
// at once so that most wait for another call's blocked write, each
// return at about their deadline, not after the blocked writes.
func TestFramedDeadlineWhileMasterReadsNothing(t *testing.T) {
	m := &stuckFramed{}
	s := stuckFramedSession(t, m)
	defer s.close()
	big := []string{strings.Repeat("k", 2<<20)} // under the request limit; a few fill the buffers
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			returnsWithin(t, 5*time.Second, fmt.Sprintf("call %d with a 200 ms deadline", i), func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				_, err := s.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{Keys: pb.Keys(big)}}})
				c := status.Code(err)
				assert.True(t, errors.Is(err, context.DeadlineExceeded) || c == codes.Unavailable, "call %d: %v", i, err)
			})
		}()
	}
	wg.Wait()
}

// hangingPort is a master whose framed port call never answers.
type hangingPort struct{ pb.UnimplementedMasterServer }

// TestFramedOpenWithinCallDeadline: opening a stream while the port call
// hangs takes no longer than the call's own deadline (not the dial's 2 s),
// and a dial in progress does not hold the session's lock.
func TestFramedOpenWithinCallDeadline(t *testing.T) {
	conn, _ := readyConn(t, func(g *grpc.Server) {
		g.RegisterService(portService(func(ctx context.Context) (*wrapperspb.UInt32Value, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}), &hangingPort{})
	})
	s := newSession(conn, pb.NewMasterClient(conn), false, conn.Target(), nil, nil)
	defer s.close()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := s.call(ctx, &pb.SessionRequest{})
	assert.Error(t, err)
	assert.Less(t, time.Since(start), framedDialTimeout, "a 100 ms call waited for the whole dial timeout")
	s.mu.Lock()
	assert.Zero(t, s.mu.framedBackoff, "the call's own deadline counted as a framed failure")
	s.mu.Unlock()

	// The dial holds no lock: while a call waits on the hanging port
	// call, close returns at once, and the call then goes unary.
	dialing := make(chan error, 1)
	go func() {
		_, err := s.call(context.Background(), &pb.SessionRequest{})
		dialing <- err
	}()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mu.dialing != nil
	}, 10*time.Second, time.Millisecond)
	returnsWithin(t, framedDialTimeout/2, "close during a dial", s.close)
	select {
	case err := <-dialing:
		assert.ErrorIs(t, err, errNoSession)
	case <-time.After(20 * time.Second):
		t.Fatal("the dialling call never returned")
	}
}

// answeringMaster answers every request with an empty result of its id,
// on its gRPC Session stream and on its framed listener; while refuse is
// set its port call fails Unimplemented.
type answeringMaster struct {
	pb.UnimplementedMasterServer
	refuse atomic.Bool
	ln     net.Listener
	framed atomic.Int64 // framed connections accepted
}

func (m *answeringMaster) Session(st pb.Master_SessionServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if err := st.Send(&pb.SessionResponse{Id: req.Id}); err != nil {
			return err
		}
	}
}

func (m *answeringMaster) serveFramed() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.framed.Add(1)
		go func() {
			defer c.Close()
			readFrames(c, func(req *pb.SessionRequest) bool {
				out, _ := store.AppendFrame(nil, &pb.SessionResponse{Id: req.Id})
				_, err := c.Write(out)
				return err == nil
			})
		}()
	}
}

// TestFramedUpgradeAfterBackoff: a master that refuses framed sessions
// gets the client's calls on the gRPC stream, with the backoff set; once
// the next try is due and the stream is idle, the client moves to a
// framed session (the master then serves one) and the backoff resets.
func TestFramedUpgradeAfterBackoff(t *testing.T) {
	m := &answeringMaster{}
	var err error
	m.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { m.ln.Close() })
	go m.serveFramed()
	m.refuse.Store(true)
	conn, _ := readyConn(t, func(g *grpc.Server) {
		pb.RegisterMasterServer(g, m)
		serve := listenerPort(m.ln)
		g.RegisterService(portService(func(ctx context.Context) (*wrapperspb.UInt32Value, error) {
			if m.refuse.Load() {
				return nil, status.Error(codes.Unimplemented, "no framed sessions")
			}
			return serve(ctx)
		}), m)
	})
	var logged []string
	var logMu sync.Mutex
	s := newSession(conn, pb.NewMasterClient(conn), false, conn.Target(), nil, func(f string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, fmt.Sprintf(f, a...))
	})
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		_, err := s.call(ctx, &pb.SessionRequest{})
		require.NoError(t, err)
	}
	s.mu.Lock()
	_, framed := s.mu.stream.(*framedStream)
	backoff := s.mu.framedBackoff
	s.mu.framedAfter = time.Now().Add(-time.Second) // the next try is due
	s.mu.Unlock()
	assert.False(t, framed, "on a framed session while the master refuses them")
	assert.Equal(t, framedRetryAfter, backoff)
	logMu.Lock()
	require.Len(t, logged, 1)
	assert.Contains(t, logged[0], "no framed session")
	logMu.Unlock()
	m.refuse.Store(false)
	for range 3 {
		_, err := s.call(ctx, &pb.SessionRequest{})
		require.NoError(t, err)
	}
	s.mu.Lock()
	_, framed = s.mu.stream.(*framedStream)
	backoff = s.mu.framedBackoff
	s.mu.Unlock()
	assert.True(t, framed, "still on the gRPC stream after the try was due")
	assert.Zero(t, backoff, "backoff after a framed session opened")
	assert.Equal(t, int64(1), m.framed.Load(), "framed connections")
}
