package client_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/server"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// countingMaster is a pool's master served again on another address,
// counting the unary put starts and the Session streams it sees; with
// noSession it answers Session Unimplemented, as a master without it.
type countingMaster struct {
	*server.Server
	noSession bool
	unary     atomic.Int64 // BatchPutStart unary calls
	sessions  atomic.Int64 // Session streams opened
}

func (m *countingMaster) BatchPutStart(ctx context.Context, req *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	m.unary.Add(1)
	return m.Server.BatchPutStart(ctx, req)
}

func (m *countingMaster) Session(st pb.Master_SessionServer) error {
	if m.noSession {
		return status.Error(codes.Unimplemented, "method Session not implemented")
	}
	m.sessions.Add(1)
	return m.Server.Session(st)
}

// putGet runs puts and gets of distinct keys through a client of m.
func putGet(t *testing.T, lc *localcluster.Cluster, m *countingMaster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	pb.RegisterMasterServer(g, m)
	go g.Serve(ln)
	defer g.Stop()
	c, err := lc.NewClient(ctx, client.Config{MasterAddr: ln.Addr().String(), LocalHostname: fmt.Sprintf("session-%v", m.noSession)})
	require.NoError(t, err)
	defer c.Close()
	buf, err := memory.Map(8192)
	require.NoError(t, err)
	defer buf.Close()
	require.NoError(t, c.RegisterBuffer(ctx, buf.Bytes()))
	defer c.UnregisterBuffer(context.Background(), buf.Bytes())
	src, dst := buf.Bytes()[:4096], buf.Bytes()[4096:]
	for i := range 20 {
		key := fmt.Sprintf("session-%v/%d", m.noSession, i)
		copy(src, key)
		require.NoError(t, c.PutFrom(ctx, key, src, nil))
		n, err := c.GetInto(ctx, key, dst)
		require.NoError(t, err)
		require.Equal(t, len(src), n)
		assert.Equal(t, src, dst, key)
	}
	// A missing key is the master's per-key answer, not a call failure.
	_, err = c.GetInto(ctx, "session/missing", dst)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OBJECT_NOT_FOUND")
}

// TestSessionCarriesPutsAndGets: put and get calls go over one Session
// stream (no unary put start once it is open), and values round-trip.
func TestSessionCarriesPutsAndGets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20})
	require.NoError(t, err)
	defer lc.Close()
	m := &countingMaster{Server: lc.Master.Server}
	putGet(t, lc, m)
	assert.Equal(t, int64(1), m.sessions.Load(), "session streams")
	assert.Zero(t, m.unary.Load(), "unary put starts")
}

// TestSessionFallsBackToUnary: against a master without Session every
// call goes out as its unary RPC and works.
func TestSessionFallsBackToUnary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20})
	require.NoError(t, err)
	defer lc.Close()
	m := &countingMaster{Server: lc.Master.Server, noSession: true}
	putGet(t, lc, m)
	assert.Equal(t, int64(20), m.unary.Load(), "unary put starts")
}
