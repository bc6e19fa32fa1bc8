package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// TestSessionCalls: calls on a Session stream are answered by id with
// the unary calls' results (a put started, ended, then listed; a missing
// key's per-key code), count in the per-method metrics as unary calls
// do, and a request naming no call is InvalidArgument.
func TestSessionCalls(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096))
	st, err := h.client.Session(ctx(t))
	require.NoError(t, err)
	send := func(req *pb.SessionRequest) *pb.SessionResponse {
		t.Helper()
		require.NoError(t, st.Send(req))
		resp, err := st.Recv()
		require.NoError(t, err)
		require.Equal(t, req.Id, resp.Id)
		return resp
	}
	keys := &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"x"})}
	r := send(&pb.SessionRequest{Id: 7, TimeoutMs: 5000, Call: &pb.SessionRequest_PutStart{PutStart: &pb.BatchPutStartRequest{
		ClientId: "c1", Keys: pb.Keys([]string{"x"}), Sizes: []uint64{1024}, Config: &pb.ReplicaConfig{ReplicaNum: 1}}}})
	require.Len(t, r.GetPutStart().GetResults(), 1)
	assert.Zero(t, r.GetPutStart().Results[0].GetStatus().GetCode())
	require.Len(t, r.GetPutStart().Results[0].Replicas, 1)
	r = send(&pb.SessionRequest{Id: 8, Call: &pb.SessionRequest_PutEnd{PutEnd: keys}})
	require.Len(t, r.GetPutEnd().GetResults(), 1)
	assert.Zero(t, r.GetPutEnd().Results[0].GetCode())
	r = send(&pb.SessionRequest{Id: 9, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"x", "nope"})}}})
	require.Len(t, r.GetGetReplicaList().GetResults(), 2)
	assert.Zero(t, r.GetGetReplicaList().Results[0].GetStatus().GetCode())
	assert.Equal(t, uint64(1024), r.GetGetReplicaList().Results[0].Replicas[0].Size)
	assert.NotZero(t, r.GetGetReplicaList().Results[1].GetStatus().GetCode(), "missing key")
	r = send(&pb.SessionRequest{Id: 10, Call: &pb.SessionRequest_PutRevoke{PutRevoke: keys}})
	require.Len(t, r.GetPutRevoke().GetResults(), 1)
	assert.NotZero(t, r.GetPutRevoke().Results[0].GetCode(), "revoking a completed put")
	r = send(&pb.SessionRequest{Id: 11})
	assert.Equal(t, int32(codes.InvalidArgument), r.GrpcCode)
	assert.Nil(t, r.Result)
	require.NoError(t, st.CloseSend())

	rec := httptest.NewRecorder()
	h.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, m := range []string{"BatchPutStart", "BatchPutEnd", "BatchGetReplicaList", "BatchPutRevoke"} {
		assert.Contains(t, rec.Body.String(), `master_rpc_requests_total{method="`+m+`"} 1`, m)
	}
}

// TestSessionResponseCap: an answer over the limit becomes a
// ResourceExhausted answer to the same id naming its size (sent, it would
// fail the client's Recv and the stream with every call on it); one under
// it is sent as it is.
func TestSessionResponseCap(t *testing.T) {
	big := &pb.StatusList{}
	for range 1000 {
		big.Results = append(big.Results, &pb.Status{Code: 1, Message: "a key's status message of some length"})
	}
	resp := &pb.SessionResponse{Id: 42, Result: &pb.SessionResponse_PutEnd{PutEnd: big}}
	assert.Same(t, resp, capResponse(resp, 1<<20))
	got := capResponse(resp, 1000)
	assert.Equal(t, uint64(42), got.Id)
	assert.Equal(t, int32(codes.ResourceExhausted), got.GrpcCode)
	assert.Contains(t, got.GrpcMessage, "exceeds the stream's 1000-byte limit")
	assert.Nil(t, got.Result)
}

// chanStream is a sessionStream fed and drained by a test.
type chanStream struct {
	ctx context.Context
	in  chan *pb.SessionRequest
	out chan *pb.SessionResponse
}

func (c *chanStream) Context() context.Context { return c.ctx }

func (c *chanStream) Recv() (*pb.SessionRequest, error) {
	req, ok := <-c.in
	if !ok {
		return nil, io.EOF
	}
	return req, nil
}

func (c *chanStream) Send(resp *pb.SessionResponse) error {
	c.out <- resp
	return nil
}

// TestSessionCallsBehindAWaitingInterceptor: on a server with
// interceptors (an HA leader waits in one for each change to be
// replicated) a session's quick calls still run apart from its read loop:
// a PutEnd held in the interceptor does not hold the lookup sent after it.
// Without interceptors the same PutEnd is answered in the read loop.
func TestSessionCallsBehindAWaitingInterceptor(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == pb.Master_BatchPutEnd_FullMethodName {
			held <- struct{}{}
			<-release
		}
		return h(ctx, req)
	}
	m, err := master.New(master.Config{ClientTTL: time.Hour})
	require.NoError(t, err)
	srv := New(m, Options{TickInterval: time.Hour, Interceptors: []grpc.UnaryServerInterceptor{hold}})
	defer srv.Close()
	_, quick := srv.quickCall(context.Background(), &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{}}})
	require.False(t, quick, "interceptors: nothing runs in the read loop")
	st := &chanStream{ctx: context.Background(), in: make(chan *pb.SessionRequest, 2), out: make(chan *pb.SessionResponse, 2)}
	done := make(chan struct{})
	go func() { srv.serveSession(st); close(done) }()
	st.in <- &pb.SessionRequest{Id: 1, Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{ClientId: "c", Keys: pb.Keys([]string{"k"})}}}
	<-held
	st.in <- &pb.SessionRequest{Id: 2, Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "c", Keys: pb.Keys([]string{"k"})}}}
	select {
	case r := <-st.out:
		require.Equal(t, uint64(2), r.Id, "the lookup is answered while the PutEnd is held")
		assert.Equal(t, int32(store.ObjectNotFound), r.GetGetReplicaList().GetResults()[0].GetStatus().GetCode())
	case <-time.After(30 * time.Second):
		t.Fatal("the lookup waited behind the held PutEnd")
	}
	close(release)
	r := <-st.out
	assert.Equal(t, uint64(1), r.Id)
	close(st.in)
	<-done

	plain := New(m, Options{TickInterval: time.Hour})
	defer plain.Close()
	_, quick = plain.quickCall(context.Background(), &pb.SessionRequest{Call: &pb.SessionRequest_PutEnd{PutEnd: &pb.KeysRequest{}}})
	assert.True(t, quick, "no interceptors: a PutEnd runs in the read loop")
}

// TestQuickLookupNeverWaits: quickLookup answers lookups of keys in DRAM
// or absent, and declines, doing nothing, a lookup with a precommitted key
// or more than quickLookupKeys keys, without ever waiting for a seal.
func TestQuickLookupNeverWaits(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "node", pbSeg("s1", 1<<30, 1<<20))
	h.srv.sealWaiting = func() { t.Error("quickLookup waited for a seal") }
	h.precommit(t, "writer", "other", 4096)
	_, err := h.srv.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: pb.Keys([]string{"other"})})
	require.NoError(t, err)
	h.precommit(t, "writer", "k", 4096)

	out, ok := h.srv.quickLookup(&pb.KeysRequest{ClientId: "reader", Keys: pb.Keys([]string{"other", "absent"})})
	require.True(t, ok, "a key in DRAM and an absent key answer at once")
	require.Len(t, out.Results, 2)
	assert.Equal(t, int32(store.OK), out.Results[0].Status.GetCode(), out.Results[0].Status.GetMessage())
	assert.Equal(t, int32(store.ObjectNotFound), out.Results[1].Status.GetCode())
	require.Len(t, out.Results[0].Replicas, 1)
	assert.Positive(t, out.Results[0].LeaseTtlMs, "the key found gets a lease")

	_, ok = h.srv.quickLookup(&pb.KeysRequest{ClientId: "reader", Keys: pb.Keys([]string{"other", "k"})})
	assert.False(t, ok, "a precommitted key may wait for its seal: not quick")
	many := make([]string, quickLookupKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("absent-%d", i)
	}
	_, ok = h.srv.quickLookup(&pb.KeysRequest{ClientId: "reader", Keys: pb.Keys(many)})
	assert.False(t, ok, "more than quickLookupKeys keys: not quick")
	_, ok = h.srv.quickCall(ctx(t), &pb.SessionRequest{Call: &pb.SessionRequest_PutStart{PutStart: &pb.BatchPutStartRequest{}}})
	assert.False(t, ok, "a PutStart may wait for space: not quick")
}

// TestQuickLookupRacingPrecommits: lookups of a key that another stream
// precommits, seals and removes over and over never wait for its seal in
// the session's read loop (they did when the check that a key may wait and
// the lookup took the lock apart: a precommit landing between them held
// the stream's later calls for up to SealWait).
func TestQuickLookupRacingPrecommits(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "node", pbSeg("s1", 1<<30, 1<<20))
	var inLoop, waits atomic.Int64
	h.srv.sealWaiting = func() {
		waits.Add(1)
		buf := make([]byte, 64<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		if strings.Contains(stack, "(*Server).serveSession(") && !strings.Contains(stack, "serveSession.func") {
			inLoop.Add(1)
		}
	}
	st := &chanStream{ctx: context.Background(), in: make(chan *pb.SessionRequest), out: make(chan *pb.SessionResponse, 1)}
	done := make(chan struct{})
	go func() { h.srv.serveSession(st); close(done) }()

	stop := make(chan struct{})
	readerDone := make(chan int)
	go func() { // one lookup at a time, as fast as they are answered
		n := 0
		for ; ; n++ {
			select {
			case <-stop:
				readerDone <- n
				return
			case st.in <- &pb.SessionRequest{Id: uint64(n), Call: &pb.SessionRequest_GetReplicaList{GetReplicaList: &pb.KeysRequest{ClientId: "reader", Keys: pb.Keys([]string{"k"})}}}:
			}
			<-st.out
		}
	}()
	const rounds = 3000
	for i := 0; i < rounds && inLoop.Load() == 0; i++ {
		h.precommit(t, "writer", "k", 4096)
		runtime.Gosched() // let the reader look the key up while it is precommitted
		_, err := h.srv.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: pb.Keys([]string{"k"})})
		require.NoError(t, err)
		_, err = h.srv.BatchRemove(ctx(t), &pb.KeysRequest{ClientId: "writer", Keys: pb.Keys([]string{"k"}), Force: true})
		require.NoError(t, err)
	}
	close(stop)
	lookups := <-readerDone
	close(st.in)
	<-done
	t.Logf("%d lookups, %d seal waits, %d of them in the read loop", lookups, waits.Load(), inLoop.Load())
	assert.Zero(t, inLoop.Load(), "a lookup waited for a seal in the session's read loop")
	assert.Positive(t, lookups)
}
