package client

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// The calls of a put and a get (BatchPutStart, BatchPutEnd,
// BatchPutRevoke, BatchGetReplicaList) go over one long-lived Session
// stream per client (storepb.SessionRequest): a call is then one message
// each way on an open HTTP/2 stream instead of a new stream with its own
// headers and per-call state on both sides, which is most of the CPU of a
// small unary call. Concurrent calls share the stream and are answered
// by id, in any order.
//
// The stream is opened on first use, only while the master connection is
// ready (so opening never waits for a connection: a call made while the
// master is unreachable goes out as the unary RPC, which waits for it
// within the call's own deadline), and again after it breaks; calls in
// flight when it breaks fail as unary calls in flight would
// (Unavailable). A master without Session (Unimplemented) and an
// etcd:// master address (whose unary calls retry across a leader
// failover) use the unary RPCs only.

// errNoSession says a call must go out as its unary RPC.
var errNoSession = errors.New("client: no session stream")

// Where the master serves framed sessions (server.ServeFramedSessions),
// the stream is instead a plain TCP connection to that listener (mutual
// TLS with Config.TLS): each call writes its request frame itself and one
// reader delivers the answers: fewer goroutine hand-offs and less CPU
// per call than the gRPC stream (BenchmarkMasterCall). Its port comes
// from the master (store.FramedSessionPortMethod) each time a stream is
// opened; where that call or the dial fails, the
// gRPC stream is used and framed sessions are not tried again for
// framedRetryAfter, doubled after each further failure up to
// framedRetryMax and reset by a success (a port a firewall drops costs a
// stream opening up to framedDialTimeout each time), then the gRPC stream
// is retired once idle (see open). A failure logs one line
// (Config.Logf).

// framedRetryAfter is how long a client whose framed session could not be
// opened first uses the gRPC stream before trying again; framedRetryMax
// bounds the doubled waits.
const (
	framedRetryAfter = 30 * time.Second
	framedRetryMax   = 30 * time.Minute
)

// framedDialTimeout bounds the port call and the dial (with its TLS
// handshake) of a framed session, which run while calls wait for a
// stream.
const framedDialTimeout = 2 * time.Second

// clientStream is an open session stream: gRPC's (pb.Master_SessionClient,
// whose requests go through the session's sender) or a framed session
// (*framedStream, written by the calls themselves).
type clientStream interface {
	Recv() (*pb.SessionResponse, error)
	CloseSend() error
}

// session is a client's Session stream; see above.
type session struct {
	conn *grpc.ClientConn
	rpc  pb.MasterClient
	// addr and tls: the master's host:port (Config.MasterAddr; "" = no
	// framed sessions) and the client's TLS identity.
	addr string
	tls  *tlsconfig.Config
	logf func(format string, args ...any) // Config.Logf; nil = none

	wg sync.WaitGroup // reader and sender goroutines

	mu struct {
		sync.Mutex
		stream  clientStream            // nil: none open
		sendq   chan *pb.SessionRequest // stream's requests, sent by its sender
		cancel  context.CancelFunc      // ends stream
		pending map[uint64]chan *pb.SessionResponse
		next    uint64
		off     bool   // unary only (no Session at the master, etcd:// address, closed)
		gen     uint64 // streams opened so far: the current one's number
		// framedAfter: no framed session is tried before this time;
		// framedBackoff: the last wait set (doubled after each failure);
		// dialing: closed when the framed dial in progress ends (nil: none).
		framedAfter   time.Time
		framedBackoff time.Duration
		dialing       chan struct{}
	}
}

// generation is the number of the stream open now, 0 when none is: a
// reservation granted on one stream is not used on another (the master
// may have restarted or failed over in between).
func (s *session) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.stream == nil {
		return 0
	}
	return s.mu.gen
}

// sessionQueue is how many requests may wait for a stream's sender; a
// call finding it full waits for room (or its context).
const sessionQueue = 1024

// maxSessionRequestBytes is the largest request sent on the stream, under
// the master's receive limit (store.MaxRequestBytes) with room to spare: a
// larger one would end the stream for every call on it; it goes out as
// its unary RPC instead, which fails alone (ResourceExhausted) if the
// master refuses it.
const maxSessionRequestBytes = store.MaxRequestBytes - 1<<20

func newSession(conn *grpc.ClientConn, rpc pb.MasterClient, off bool, addr string, tc *tlsconfig.Config, logf func(string, ...any)) *session {
	s := &session{conn: conn, rpc: rpc, addr: addr, tls: tc, logf: logf}
	s.mu.pending = map[uint64]chan *pb.SessionResponse{}
	s.mu.off = off
	return s
}

// open returns the current stream and its send queue (nil for a framed
// stream), opening one if none is and the master connection is ready: a
// framed session where the master serves one, else a gRPC stream;
// errNoSession when the call must go unary; ctx's error when it ends
// while a framed session is being dialled. A framed session is dialled
// within ctx (the call's) and framedDialTimeout, without holding s.mu
// (calls that find a dial in progress wait for it). A gRPC stream in use
// because a framed session could not be had is retired, once no call is
// waiting on it, when the next try is due, so a client goes back to a
// framed session after a master restart or a passing failure.
func (s *session) open(ctx context.Context) (clientStream, chan<- *pb.SessionRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.mu.off {
			return nil, nil, errNoSession
		}
		if st := s.mu.stream; st != nil {
			if _, framed := st.(*framedStream); framed || s.addr == "" || len(s.mu.pending) > 0 || time.Now().Before(s.mu.framedAfter) {
				return st, s.mu.sendq, nil
			}
			// Idle: no call can be waiting on it (a call registers only
			// while its stream is current), so its reader fails nothing.
			s.mu.stream = nil
			s.mu.cancel()
		}
		if s.conn.GetState() != connectivity.Ready {
			return nil, nil, errNoSession
		}
		if s.addr == "" || time.Now().Before(s.mu.framedAfter) {
			break
		}
		if dialing := s.mu.dialing; dialing != nil {
			// Another call is dialling (without the lock: the port call,
			// dial and handshake are network round trips): wait for it
			// within this call's ctx, then look again.
			s.mu.Unlock()
			select {
			case <-dialing:
			case <-ctx.Done():
				s.mu.Lock()
				return nil, nil, ctx.Err()
			}
			s.mu.Lock()
			continue
		}
		dialing := make(chan struct{})
		s.mu.dialing = dialing
		s.mu.Unlock()
		start := time.Now()
		fs, err := s.dialFramed(ctx)
		s.mu.Lock()
		s.mu.dialing = nil
		close(dialing)
		if err == nil {
			if s.mu.off { // closed while dialling
				fs.CloseSend()
				return nil, nil, errNoSession
			}
			s.mu.framedBackoff = 0
			s.mu.stream, s.mu.sendq, s.mu.cancel = fs, nil, func() { fs.CloseSend() }
			s.mu.gen++
			s.wg.Add(1)
			go s.read(fs)
			return fs, nil, nil
		}
		switch {
		case callEnded(ctx, start, err):
			// The call's own deadline: no verdict on framed sessions.
			return nil, nil, context.DeadlineExceeded
		case status.Code(err) == codes.Unavailable:
			// The master connection failed under the port call (a master
			// restarting): try again soon, without backing off.
			s.mu.framedAfter = time.Now().Add(time.Second)
		default:
			s.mu.framedBackoff = min(max(2*s.mu.framedBackoff, framedRetryAfter), framedRetryMax)
			s.mu.framedAfter = time.Now().Add(s.mu.framedBackoff)
			if s.logf != nil {
				s.logf("master %s: no framed session (%v); the put and get calls use the gRPC stream, next try in %v", s.addr, err, s.mu.framedBackoff)
			}
		}
		// Another call may have opened a stream meanwhile: look again
		// (framedAfter now sends this one to the gRPC stream).
	}
	sctx, cancel := context.WithCancel(context.Background())
	st, err := s.rpc.Session(sctx)
	if err != nil {
		cancel()
		return nil, nil, errNoSession
	}
	q := make(chan *pb.SessionRequest, sessionQueue)
	s.mu.stream, s.mu.sendq, s.mu.cancel = st, q, cancel
	s.mu.gen++
	s.wg.Add(2)
	go s.read(st)
	go s.send(sctx, st, q)
	return st, q, nil
}

// callEnded reports whether err, from a framed dial started at start
// within ctx, is ctx's end rather than the dial's verdict: ctx ended, or
// its deadline came before the dial's own and err is a deadline error
// (the master may answer the port call DeadlineExceeded, for the deadline
// it was sent with, just before ctx's own timer fires).
func callEnded(ctx context.Context, start time.Time, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && dl.Before(start.Add(framedDialTimeout)) &&
		(status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded))
}

// send sends the requests queued on q over st, one at a time (gRPC
// streams take one Send at a time), until st fails or ctx (the stream's)
// ends. It runs apart from the calls because a Send can block for as
// long as gRPC flow control holds the stream (a master that reads
// nothing), and a call must still return at its deadline. A request whose
// call has already returned is dropped unsent.
func (s *session) send(ctx context.Context, st pb.Master_SessionClient, q <-chan *pb.SessionRequest) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-q:
			s.mu.Lock()
			_, waiting := s.mu.pending[req.Id]
			s.mu.Unlock()
			if !waiting {
				continue
			}
			if err := st.Send(req); err != nil {
				// The stream is broken; its reader fails the calls
				// waiting with the cause.
				st.CloseSend()
				return
			}
		}
	}
}

// read delivers the answers of st until it fails, then fails every call
// still waiting on it with the stream's error (errNoSession when the
// master has no Session: those calls go unary).
func (s *session) read(st clientStream) {
	defer s.wg.Done()
	for {
		resp, err := st.Recv()
		if err != nil {
			fail := &pb.SessionResponse{GrpcCode: int32(status.Code(err)), GrpcMessage: status.Convert(err).Message()}
			s.mu.Lock()
			if s.mu.stream != st {
				// Retired by open while idle: the calls waiting now are
				// the current stream's.
				s.mu.Unlock()
				return
			}
			if status.Code(err) == codes.Unimplemented {
				s.mu.off = true
			}
			s.mu.stream = nil
			s.mu.cancel()
			for id, ch := range s.mu.pending {
				ch <- fail
				delete(s.mu.pending, id)
			}
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		ch, ok := s.mu.pending[resp.Id]
		delete(s.mu.pending, resp.Id)
		s.mu.Unlock()
		if ok {
			ch <- resp // buffered: never blocks
		}
	}
}

// call sends req (its id is set here) and waits for its answer, or ctx.
// Errors: errNoSession (send it as the unary RPC instead); the call's
// failure as a gRPC status error, as the unary RPC would return it;
// ctx.Err() when ctx ends first.
func (s *session) call(ctx context.Context, req *pb.SessionRequest) (*pb.SessionResponse, error) {
	if proto.Size(req) > maxSessionRequestBytes {
		return nil, errNoSession
	}
	st, q, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutMs = uint64(max(time.Until(dl).Milliseconds(), 1))
	}
	ch := make(chan *pb.SessionResponse, 1)
	s.mu.Lock()
	if s.mu.stream != st { // it broke since open
		s.mu.Unlock()
		return nil, errNoSession
	}
	s.mu.next++
	req.Id = s.mu.next
	s.mu.pending[req.Id] = ch
	s.mu.Unlock()
	var resp *pb.SessionResponse
	if fs, ok := st.(*framedStream); ok {
		// A framed request is written here, within ctx's deadline (see
		// send: a write cut short closes the connection, whose reader then
		// fails every call waiting on it, this one too).
		if err := fs.send(ctx, req); err != nil {
			s.mu.Lock()
			delete(s.mu.pending, req.Id)
			s.mu.Unlock()
			return nil, err
		}
		select {
		case resp = <-ch:
		case <-ctx.Done():
		}
	} else {
		// The request goes to the stream's sender rather than being sent
		// here: a Send blocked by flow control must not hold the call past
		// ctx. Neither req nor what it points to is changed after this.
		select {
		case q <- req:
			select {
			case resp = <-ch:
			case <-ctx.Done():
			}
		case resp = <-ch: // the stream broke before the request was queued
		case <-ctx.Done():
		}
	}
	if resp == nil { // ctx ended first
		s.mu.Lock()
		delete(s.mu.pending, req.Id)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
	if resp.GrpcCode == int32(codes.Unimplemented) && resp.Result == nil {
		return nil, errNoSession
	}
	if resp.GrpcCode != 0 {
		return nil, status.Error(codes.Code(resp.GrpcCode), resp.GrpcMessage)
	}
	return resp, nil
}

// close ends the stream and waits for its reader and sender; later calls
// go unary.
func (s *session) close() {
	s.mu.Lock()
	s.mu.off = true
	if s.mu.cancel != nil {
		s.mu.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// The put and get calls: over the session when there is one, else the
// unary RPC. Errors as the unary RPC's.

func (c *Client) batchPutStart(ctx context.Context, in *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	resp, err := c.sess.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutStart{PutStart: in}})
	if errors.Is(err, errNoSession) {
		return c.rpc.BatchPutStart(ctx, in)
	}
	if err != nil {
		return nil, err
	}
	if r := resp.GetPutStart(); r != nil {
		return r, nil
	}
	return nil, status.Error(codes.Internal, "session: answer to BatchPutStart carries no result")
}

func (c *Client) batchPutEnd(ctx context.Context, in *pb.KeysRequest, _ ...grpc.CallOption) (*pb.StatusList, error) {
	resp, err := c.sess.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: in}})
	if errors.Is(err, errNoSession) {
		return c.rpc.BatchPutEnd(ctx, in)
	}
	if err != nil {
		return nil, err
	}
	if r := resp.GetPutEnd(); r != nil {
		return r, nil
	}
	return nil, status.Error(codes.Internal, "session: answer to BatchPutEnd carries no result")
}

func (c *Client) batchPutRevoke(ctx context.Context, in *pb.KeysRequest, _ ...grpc.CallOption) (*pb.StatusList, error) {
	resp, err := c.sess.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutRevoke{PutRevoke: in}})
	if errors.Is(err, errNoSession) {
		return c.rpc.BatchPutRevoke(ctx, in)
	}
	if err != nil {
		return nil, err
	}
	if r := resp.GetPutRevoke(); r != nil {
		return r, nil
	}
	return nil, status.Error(codes.Internal, "session: answer to BatchPutRevoke carries no result")
}

func (c *Client) batchGetReplicaList(ctx context.Context, in *pb.KeysRequest) (*pb.BatchGetReplicaListResponse, error) {
	resp, err := c.sess.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: in}})
	if errors.Is(err, errNoSession) {
		return c.rpc.BatchGetReplicaList(ctx, in)
	}
	if err != nil {
		return nil, err
	}
	if r := resp.GetGetReplicaList(); r != nil {
		return r, nil
	}
	return nil, status.Error(codes.Internal, "session: answer to BatchGetReplicaList carries no result")
}

// batchPutCommit goes over the session only (errNoSession without one):
// reservations are used only on the stream they were granted on.
func (c *Client) batchPutCommit(ctx context.Context, in *pb.PutCommitRequest) (*pb.PutCommitResponse, error) {
	resp, err := c.sess.call(ctx, &pb.SessionRequest{Call: &pb.SessionRequest_PutCommit{PutCommit: in}})
	if err != nil {
		return nil, err
	}
	if r := resp.GetPutCommit(); r != nil {
		return r, nil
	}
	return nil, status.Error(codes.Internal, "session: answer to BatchPutCommit carries no result")
}
