package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/core/store"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// maxSessionCalls bounds the calls of one Session stream running at once,
// so that one client cannot start unbounded work on the master.
const maxSessionCalls = 256

// maxSessionResponseBytes is the largest answer sent on a Session stream:
// the client's receive limit (store.MaxAnswerBytes) less framing slack. A
// larger one would fail the client's Recv and so the stream, with every
// call in flight on it; the client would refuse it as a unary answer too.
// Such an answer goes out as ResourceExhausted for its call alone.
const maxSessionResponseBytes = store.MaxAnswerBytes - 64<<10

// capResponse returns resp, or, when it encodes to more than limit bytes,
// a ResourceExhausted answer to the same id naming its size.
func capResponse(resp *pb.SessionResponse, limit int) *pb.SessionResponse {
	if n := proto.Size(resp); n > limit {
		return &pb.SessionResponse{Id: resp.Id, GrpcCode: int32(codes.ResourceExhausted),
			GrpcMessage: fmt.Sprintf("session: answer of %d bytes exceeds the stream's %d-byte limit (ask for fewer keys per call)", n, limit)}
	}
	return resp
}

// chainUnary runs h inside the interceptors, first outermost, as
// grpc.ChainUnaryInterceptor does for unary calls.
func chainUnary(ics []grpc.UnaryServerInterceptor) func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		for i := len(ics) - 1; i >= 0; i-- {
			ic, next := ics[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

// Session implements storepb.MasterServer: every request on the stream is
// run, concurrently with the others, as the unary call it names would be
// (the same interceptors: metrics, and an HA follower's refusal), under
// the stream's context bounded by the request's timeout_ms, and its
// result or error is sent back with the request's id. A request naming no
// call is answered InvalidArgument. The stream ends when the client
// closes it (its calls still running finish first) or fails. At most
// maxSessionCalls of a stream's calls run at once; further requests wait
// unread (gRPC flow control then holds the client back).
func (s *Server) Session(stream pb.Master_SessionServer) error {
	s.serveSession(stream)
	return nil
}

// sessionStream is one client's stream of session requests: a gRPC
// Session stream, or a framed session connection (framedConn).
type sessionStream interface {
	Context() context.Context
	Recv() (*pb.SessionRequest, error)
	Send(*pb.SessionResponse) error
}

// serveSession runs st's requests as Session describes until Recv fails.
func (s *Server) serveSession(st sessionStream) {
	var (
		wg     sync.WaitGroup
		sendMu sync.Mutex
	)
	defer wg.Wait()
	ctx := st.Context()
	slots := make(chan struct{}, maxSessionCalls)
	for {
		req, err := st.Recv()
		if err != nil {
			return // io.EOF: the client is done; anything else ended the stream
		}
		if resp, ok := s.quickCall(ctx, req); ok {
			// Answered here, without a goroutine of its own: the call
			// did not wait, so the requests behind it wait no longer
			// than the master's lock made them.
			resp = capResponse(resp, maxSessionResponseBytes)
			sendMu.Lock()
			_ = st.Send(resp)
			sendMu.Unlock()
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			resp := capResponse(s.sessionCall(ctx, req), maxSessionResponseBytes)
			sendMu.Lock()
			_ = st.Send(resp) // a failed send ends the stream; Recv sees it
			sendMu.Unlock()
		}()
	}
}

// quickLookupKeys is the most keys of a replica-list call that serveSession
// tries to answer in its read loop (quickCall); larger calls run in a
// goroutine of their own.
const quickLookupKeys = 64

// quickCall answers req in serveSession's read loop when its call cannot
// wait, instead of in a goroutine of its own (starting, growing and
// leaving a goroutine was 5-16% of a small call's CPU, client and master
// together, in alternating BenchmarkMasterCall runs), and reports whether
// it did; on false nothing was done and req runs as any other call. Only
// on a server without Options.Interceptors (which may wait: an HA leader
// waits for each change to be replicated). It answers a reserved put's
// commit, a PutEnd and a PutRevoke (the master's lock and nothing else),
// and a replica-list call of at most quickLookupKeys keys when none of
// them may wait (quickLookup). A PutStart may wait for space, and a lookup
// that may wait could wait for a seal that this same stream carries,
// behind it.
func (s *Server) quickCall(ctx context.Context, req *pb.SessionRequest) (*pb.SessionResponse, bool) {
	if !s.inline {
		return nil, false
	}
	switch c := req.Call.(type) {
	case *pb.SessionRequest_PutCommit, *pb.SessionRequest_PutEnd, *pb.SessionRequest_PutRevoke:
		return s.sessionCall(ctx, req), true
	case *pb.SessionRequest_GetReplicaList:
		out, ok := s.quickLookup(c.GetReplicaList)
		if !ok {
			return nil, false
		}
		return &pb.SessionResponse{Id: req.Id, Result: &pb.SessionResponse_GetReplicaList{GetReplicaList: out}}, true
	}
	return nil, false
}

// quickLookup is BatchGetReplicaList of req's keys when it answers without
// waiting: at most quickLookupKeys keys, none of them precommitted or with
// its only copy on disk (master.LookupWaits), checked and looked up under
// one hold of the master's lock, so that no precommit or offload can come
// between the check and the lookup (one that did would make the lookup
// wait, in the read loop, for a seal up to SealWait or a load up to
// LoadWait). ok false: a key may wait or there are too many keys, and
// nothing was done (no lease granted, no load queued). Counted in the
// metrics as the unary call is.
func (s *Server) quickLookup(req *pb.KeysRequest) (out *pb.BatchGetReplicaListResponse, ok bool) {
	if len(req.Keys) > quickLookupKeys {
		return nil, false
	}
	start := time.Now()
	s.mu.Lock()
	for _, k := range req.Keys {
		if s.mu.m.LookupWaits(string(k)) {
			s.mu.Unlock() // nothing changed: no need for unlock's wake-ups
			return nil, false
		}
	}
	out = &pb.BatchGetReplicaListResponse{Results: make([]*pb.GetReplicaListResult, len(req.Keys))}
	for i, k := range req.Keys {
		rs, ttl, loading, err := s.mu.m.GetOrLoad(string(k))
		if loading { // not reached: LookupWaits said no key is only on disk
			err = store.Errorf(store.ReplicaIsNotReady, "key %q is being loaded from disk", k)
		}
		out.Results[i] = replicaList(rs, ttl, err)
	}
	s.unlock() // leases granted
	s.metrics.lookups(out.Results)
	s.metrics.observe(pb.Master_BatchGetReplicaList_FullMethodName, start)
	return out, true
}

// sessionCall runs one session request and returns its answer.
func (s *Server) sessionCall(ctx context.Context, req *pb.SessionRequest) *pb.SessionResponse {
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	var (
		method string
		in     any
		h      grpc.UnaryHandler
	)
	switch c := req.Call.(type) {
	case *pb.SessionRequest_PutStart:
		method, in = pb.Master_BatchPutStart_FullMethodName, c.PutStart
		h = func(ctx context.Context, r any) (any, error) {
			return s.BatchPutStart(ctx, r.(*pb.BatchPutStartRequest))
		}
	case *pb.SessionRequest_PutEnd:
		method, in = pb.Master_BatchPutEnd_FullMethodName, c.PutEnd
		h = func(ctx context.Context, r any) (any, error) { return s.BatchPutEnd(ctx, r.(*pb.KeysRequest)) }
	case *pb.SessionRequest_PutRevoke:
		method, in = pb.Master_BatchPutRevoke_FullMethodName, c.PutRevoke
		h = func(ctx context.Context, r any) (any, error) { return s.BatchPutRevoke(ctx, r.(*pb.KeysRequest)) }
	case *pb.SessionRequest_GetReplicaList:
		method, in = pb.Master_BatchGetReplicaList_FullMethodName, c.GetReplicaList
		h = func(ctx context.Context, r any) (any, error) { return s.BatchGetReplicaList(ctx, r.(*pb.KeysRequest)) }
	case *pb.SessionRequest_PutCommit:
		method, in = pb.Master_BatchPutCommit_FullMethodName, c.PutCommit
		h = func(ctx context.Context, r any) (any, error) { return s.BatchPutCommit(ctx, r.(*pb.PutCommitRequest)) }
	default:
		return &pb.SessionResponse{Id: req.Id, GrpcCode: int32(codes.InvalidArgument), GrpcMessage: "session request names no call"}
	}
	out, err := s.unary(ctx, in, &grpc.UnaryServerInfo{Server: s, FullMethod: method}, h)
	resp := &pb.SessionResponse{Id: req.Id}
	if err != nil {
		st := gstatus.Convert(err)
		resp.GrpcCode, resp.GrpcMessage = int32(st.Code()), st.Message()
		return resp
	}
	switch r := out.(type) {
	case *pb.BatchPutStartResponse:
		resp.Result = &pb.SessionResponse_PutStart{PutStart: r}
	case *pb.BatchGetReplicaListResponse:
		resp.Result = &pb.SessionResponse_GetReplicaList{GetReplicaList: r}
	case *pb.PutCommitResponse:
		resp.Result = &pb.SessionResponse_PutCommit{PutCommit: r}
	case *pb.StatusList:
		if _, end := req.Call.(*pb.SessionRequest_PutEnd); end {
			resp.Result = &pb.SessionResponse_PutEnd{PutEnd: r}
		} else {
			resp.Result = &pb.SessionResponse_PutRevoke{PutRevoke: r}
		}
	default:
		resp.GrpcCode, resp.GrpcMessage = int32(codes.Internal), "session: unexpected result type"
	}
	return resp
}
