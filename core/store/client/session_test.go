package client_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
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
	"github.com/mooncake-go/mooncake/core/tlsconfig/tlstest"
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
	roundTrips(t, c, fmt.Sprintf("session-%v", m.noSession), 20)
	dst := make([]byte, 4096)
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

// roundTrips puts and gets n distinct 4 KiB values through c.
func roundTrips(t *testing.T, c *client.Client, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf, err := memory.Map(8192)
	require.NoError(t, err)
	defer buf.Close()
	require.NoError(t, c.RegisterBuffer(ctx, buf.Bytes()))
	defer c.UnregisterBuffer(context.Background(), buf.Bytes())
	src, dst := buf.Bytes()[:4096], buf.Bytes()[4096:]
	for i := range n {
		key := fmt.Sprintf("%s/%d", prefix, i)
		copy(src, key)
		require.NoError(t, c.PutFrom(ctx, key, src, nil))
		got, err := c.GetInto(ctx, key, dst)
		require.NoError(t, err)
		require.Equal(t, len(src), got)
		require.Equal(t, src, dst, key)
	}
}

// TestFramedSessionCarriesPutsAndGets: against a master serving framed
// sessions (the default of server.Start), a client's puts and gets go
// over one framed connection and round-trip; a client with
// NoFramedSession opens none.
func TestFramedSessionCarriesPutsAndGets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20})
	require.NoError(t, err)
	defer lc.Close()
	require.NotEmpty(t, lc.Master.SessionAddr)
	grpcOnly, err := lc.NewClient(ctx, client.Config{LocalHostname: "grpc-only", NoFramedSession: true})
	require.NoError(t, err)
	defer grpcOnly.Close()
	roundTrips(t, grpcOnly, "grpc-only", 10)
	assert.Zero(t, lc.Master.Server.FramedSessions(), "framed connections of a NoFramedSession client")
	c, err := lc.NewClient(ctx, client.Config{LocalHostname: "framed"})
	require.NoError(t, err)
	roundTrips(t, c, "framed", 20)
	assert.Equal(t, 1, lc.Master.Server.FramedSessions(), "framed connections")
	c.Close()
	require.Eventually(t, func() bool { return lc.Master.Server.FramedSessions() == 0 }, 20*time.Second, time.Millisecond,
		"the framed connection outlived Close")
}

// TestFramedSessionAfterMasterRestart: a master restart breaks the framed
// connection; the client's calls work again and, within about a second,
// go over one framed connection to the new master (on its new port).
func TestFramedSessionAfterMasterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20, PingInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer lc.Close()
	c, err := lc.NewClient(ctx, client.Config{LocalHostname: "restart", PingInterval: 50 * time.Millisecond, LocalBufferSize: 1 << 20})
	require.NoError(t, err)
	defer c.Close()
	roundTrips(t, c, "before", 5)
	require.Equal(t, 1, lc.Master.Server.FramedSessions())
	require.NoError(t, lc.RestartMaster())
	// The node remounts on its heartbeat; until then puts find no space.
	var last error
	i := 0
	if !assert.Eventually(t, func() bool {
		i++
		last = c.Put(ctx, fmt.Sprintf("after/probe-%d", i), make([]byte, 4096), nil)
		return last == nil
	}, 30*time.Second, 10*time.Millisecond) {
		t.Fatalf("puts after the restart: %v", last)
	}
	roundTrips(t, c, "after", 5)
	// A port call that met the restart is retried within 1 s, on the
	// next call once the gRPC stream meanwhile in use is idle.
	require.Eventually(t, func() bool {
		i++
		require.NoError(t, c.Put(ctx, fmt.Sprintf("after/probe-%d", i), make([]byte, 4096), nil))
		return lc.Master.Server.FramedSessions() == 1
	}, 20*time.Second, 50*time.Millisecond, "no framed connection to the new master")
	roundTrips(t, c, "framed-again", 5)
	assert.Equal(t, 1, lc.Master.Server.FramedSessions(), "framed connections to the new master")
}

// TestFramedSessionTLS: with mutual TLS on the pool, the framed
// connection is TLS too and carries the puts and gets.
func TestFramedSessionTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := tlstest.NewCA(t, "framed")
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20, TLS: tlstest.Load(t, ca.Issue(t, "pool"))})
	require.NoError(t, err)
	defer lc.Close()
	c, err := lc.NewClient(ctx, client.Config{LocalHostname: "tls"})
	require.NoError(t, err)
	defer c.Close()
	roundTrips(t, c, "tls", 10)
	assert.Equal(t, 1, lc.Master.Server.FramedSessions(), "framed connections")
	// A plaintext hello on the TLS listener is refused.
	raw, err := net.Dial("tcp", lc.Master.SessionAddr)
	require.NoError(t, err)
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = raw.Write([]byte("MCSESS01"))
	require.NoError(t, err)
	_, err = raw.Read(make([]byte, 1))
	assert.Error(t, err, "plaintext connection answered")
}

// BenchmarkMasterCall: master round trips (a get of a missing key: the
// replica-list call and nothing else) from 4 clients at once, over the
// framed session and over the gRPC Session stream (NoFramedSession);
// cpu-us/op is this process's CPU time (clients and master both) per
// call. Run: go test -run XXX -bench MasterCall ./core/store/client/
func BenchmarkMasterCall(b *testing.B) {
	for _, mode := range []struct {
		name string
		grpc bool
	}{{"framed", false}, {"grpc-stream", true}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 1, SegmentSize: 4 << 20})
			require.NoError(b, err)
			defer lc.Close()
			var cls []*client.Client
			for i := range 4 {
				c, err := lc.NewClient(ctx, client.Config{LocalHostname: fmt.Sprintf("bench-%d", i), NoFramedSession: mode.grpc})
				require.NoError(b, err)
				defer c.Close()
				_, err = c.GetInto(ctx, "missing", make([]byte, 4096))
				require.ErrorContains(b, err, "OBJECT_NOT_FOUND")
				cls = append(cls, c)
			}
			var next atomic.Int64
			cpu0 := cpuTime()
			b.ResetTimer()
			b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(p *testing.PB) {
				c := cls[int(next.Add(1)-1)%len(cls)]
				buf := make([]byte, 4096)
				for p.Next() {
					c.GetInto(ctx, "missing", buf)
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
