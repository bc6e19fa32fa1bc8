package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// TestMain fails the package when its tests leave server, gRPC or HTTP
// goroutines behind. Shutdown of connections is asynchronous, so the check
// polls for a bounded time before reporting.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// syncClock is a hand-advanced clock safe to read from the server's tick
// goroutine while the test advances it.
type syncClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *syncClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *syncClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type harness struct {
	srv    *Server
	client pb.MasterClient
	conn   *grpc.ClientConn
	clk    *syncClock
	reg    *prometheus.Registry
}

// newHarness serves a fresh master over an in-memory listener. The tick
// loop is set to an hour so that it never runs during a test.
func newHarness(t testing.TB, mod ...func(*master.Config)) *harness {
	t.Helper()
	clk := &syncClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := master.Config{
		Now:             clk.Now,
		Rand:            rand.New(rand.NewPCG(3, 4)),
		ClientTTL:       time.Hour,
		DefaultLeaseTTL: 10 * time.Second,
	}
	for _, f := range mod {
		f(&cfg)
	}
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := New(m, Options{TickInterval: time.Hour, Registry: reg})
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &harness{srv: srv, client: pb.NewMasterClient(conn), conn: conn, clk: clk, reg: reg}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantCodes checks per-key statuses against want, in order; a non-OK status
// must carry a message.
func wantCodes(t *testing.T, what string, got []*pb.Status, want ...store.ErrorCode) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i, s := range got {
		if c := store.ErrorCode(s.GetCode()); c != want[i] {
			t.Errorf("%s[%d]: %v (%q), want %v", what, i, c, s.GetMessage(), want[i])
		}
		if s.GetCode() != 0 && s.GetMessage() == "" {
			t.Errorf("%s[%d]: error %d without a message", what, i, s.GetCode())
		}
	}
}

func pbSeg(id string, base, size uint64) *pb.Segment {
	return &pb.Segment{Id: id, Name: "node-" + id, Base: base, Size: size, Protocol: "tcp"}
}

func (h *harness) mount(t *testing.T, client string, segs ...*pb.Segment) {
	t.Helper()
	for _, s := range segs {
		st, err := h.client.MountSegment(ctx(t), &pb.MountSegmentRequest{ClientId: client, Segment: s})
		if err != nil || st.GetCode() != 0 {
			t.Fatalf("MountSegment(%s): %v %v", s.Id, st, err)
		}
	}
}

func putStartStatuses(r *pb.BatchPutStartResponse) []*pb.Status {
	out := make([]*pb.Status, len(r.GetResults()))
	for i, x := range r.GetResults() {
		out[i] = x.GetStatus()
	}
	return out
}

func TestPing(t *testing.T) {
	h := newHarness(t)
	r, err := h.client.Ping(ctx(t), &pb.PingRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "Ping(empty)", []*pb.Status{r.GetStatus()}, store.InvalidParams)
	// need_remount until the client remounts (here with no segments).
	for i, want := range []bool{true, true, false, false} {
		if i == 2 {
			st, err := h.client.ReMountSegment(ctx(t), &pb.ReMountSegmentRequest{ClientId: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			wantCodes(t, "ReMountSegment(none)", []*pb.Status{st}, store.OK)
		}
		r, err := h.client.Ping(ctx(t), &pb.PingRequest{ClientId: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "Ping", []*pb.Status{r.GetStatus()}, store.OK)
		if r.GetNeedRemount() != want {
			t.Fatalf("ping %d: need_remount %v, want %v", i, r.GetNeedRemount(), want)
		}
	}
}

func TestMountUnmount(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		req  *pb.MountSegmentRequest
		want store.ErrorCode
	}{
		{"nil segment", &pb.MountSegmentRequest{ClientId: "c1"}, store.InvalidParams},
		{"ok", &pb.MountSegmentRequest{ClientId: "c1", Segment: pbSeg("a", 1<<32, 4096)}, store.OK},
		{"duplicate id", &pb.MountSegmentRequest{ClientId: "c2", Segment: pbSeg("a", 2<<32, 4096)}, store.SegmentAlreadyExists},
		{"size 0", &pb.MountSegmentRequest{ClientId: "c1", Segment: pbSeg("b", 2<<32, 0)}, store.InvalidParams},
		{"base 0", &pb.MountSegmentRequest{ClientId: "c1", Segment: pbSeg("b", 0, 4096)}, store.InvalidParams},
		{"empty id", &pb.MountSegmentRequest{ClientId: "c1", Segment: pbSeg("", 2<<32, 4096)}, store.InvalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := h.client.MountSegment(ctx(t), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			wantCodes(t, "MountSegment", []*pb.Status{st}, tc.want)
		})
	}
	for _, tc := range []struct {
		id   string
		want store.ErrorCode
	}{{"zz", store.SegmentNotFound}, {"a", store.OK}, {"a", store.SegmentNotFound}} {
		st, err := h.client.UnmountSegment(ctx(t), &pb.UnmountSegmentRequest{ClientId: "c1", SegmentId: tc.id})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "UnmountSegment("+tc.id+")", []*pb.Status{st}, tc.want)
	}
}

func TestBatchPutStart(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096), pbSeg("b", 2<<32, 4096), pbSeg("c", 3<<32, 4096))

	t.Run("per-key results in order", func(t *testing.T) {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{
			ClientId: "c1",
			Keys:     pb.Keys([]string{"k1", "k2", "k1", "", "huge", "zero", strings.Repeat("x", master.MaxKeyLen+1)}),
			Sizes:    []uint64{100, 200, 100, 10, 1 << 20, 0, 10},
			Config:   &pb.ReplicaConfig{ReplicaNum: 2},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "BatchPutStart", putStartStatuses(r),
			store.OK, store.OK, store.ObjectAlreadyExists, store.InvalidParams, store.NoAvailableHandle, store.InvalidParams, store.InvalidKey)
		res := r.GetResults()
		for i, size := range []uint64{100, 200} {
			rs := res[i].GetReplicas()
			if len(rs) != 2 || rs[0].GetSegmentId() == rs[1].GetSegmentId() {
				t.Fatalf("key %d: replicas %v", i, rs)
			}
			for _, x := range rs {
				base := map[string]uint64{"a": 1 << 32, "b": 2 << 32, "c": 3 << 32}[x.GetSegmentId()]
				if x.GetSize() != size || x.GetStatus() != int32(master.ReplicaProcessing) || x.GetSegment() != "node-"+x.GetSegmentId() ||
					x.GetAddr() < base || x.GetAddr()+size > base+4096 {
					t.Fatalf("key %d: bad replica %v", i, x)
				}
			}
		}
		for i := 2; i < len(res); i++ {
			if len(res[i].GetReplicas()) != 0 {
				t.Fatalf("failed key %d has replicas %v", i, res[i].GetReplicas())
			}
		}
	})
	t.Run("mismatched sizes", func(t *testing.T) {
		for _, sizes := range [][]uint64{{64, 64}, nil, {64, 64, 64, 64}} {
			r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"m1", "m2", "m3"}), Sizes: sizes})
			if err != nil {
				t.Fatal(err)
			}
			wantCodes(t, fmt.Sprintf("BatchPutStart(%d sizes)", len(sizes)), putStartStatuses(r), store.InvalidParams, store.InvalidParams, store.InvalidParams)
		}
		// Nothing was created.
		e, err := h.client.BatchExistKey(ctx(t), &pb.KeysRequest{Keys: pb.Keys([]string{"m1"})})
		if err != nil {
			t.Fatal(err)
		}
		var gotObjects int64
		h.srv.Do(func(m *master.Master) { gotObjects = int64(m.Stats().Objects) })
		if e.GetResults()[0].GetExists() || gotObjects != 2 {
			t.Fatalf("mismatched batch created objects: %d", gotObjects)
		}
	})
	t.Run("nil config is one replica", func(t *testing.T) {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"one"}), Sizes: []uint64{64}})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "BatchPutStart", putStartStatuses(r), store.OK)
		if n := len(r.GetResults()[0].GetReplicas()); n != 1 {
			t.Fatalf("%d replicas, want 1", n)
		}
	})
	t.Run("replica_num 0", func(t *testing.T) {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"z1", "z2"}), Sizes: []uint64{64, 64},
			Config: &pb.ReplicaConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "BatchPutStart", putStartStatuses(r), store.InvalidParams, store.InvalidParams)
	})
	t.Run("preferred segment", func(t *testing.T) {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"p1", "p2"}), Sizes: []uint64{64, 64},
			Config: &pb.ReplicaConfig{ReplicaNum: 1, PreferredSegment: "node-c"}})
		if err != nil {
			t.Fatal(err)
		}
		wantCodes(t, "BatchPutStart", putStartStatuses(r), store.OK, store.OK)
		for _, x := range r.GetResults() {
			if x.GetReplicas()[0].GetSegmentId() != "c" {
				t.Fatalf("preferred segment ignored: %v", x.GetReplicas())
			}
		}
	})
	t.Run("empty batch", func(t *testing.T) {
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1"})
		if err != nil || len(r.GetResults()) != 0 {
			t.Fatalf("empty batch: %v, %v", r, err)
		}
	})
}

// TestLifecycle walks keys through every batch RPC and checks each key's
// status code.
func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096), pbSeg("b", 2<<32, 4096))
	start := func(client string, keys ...string) {
		t.Helper()
		sizes := make([]uint64, len(keys))
		for i := range sizes {
			sizes[i] = 100
		}
		r, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: client, Keys: pb.Keys(keys), Sizes: sizes, Config: &pb.ReplicaConfig{ReplicaNum: 2}})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]store.ErrorCode, len(keys))
		wantCodes(t, "BatchPutStart", putStartStatuses(r), want...)
	}
	keys := func(client string, force bool, ks ...string) *pb.KeysRequest {
		return &pb.KeysRequest{ClientId: client, Keys: pb.Keys(ks), Force: force}
	}
	start("c1", "done", "rev", "lease")
	start("c2", "other")

	r, err := h.client.BatchPutEnd(ctx(t), keys("c1", false, "done", "nope", "other", "lease", "done"))
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "BatchPutEnd", r.GetResults(), store.OK, store.ObjectNotFound, store.IllegalClient, store.OK, store.OK)

	r, err = h.client.BatchPutRevoke(ctx(t), keys("c1", false, "rev", "done", "nope", "other", "rev"))
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "BatchPutRevoke", r.GetResults(), store.OK, store.InvalidWrite, store.ObjectNotFound, store.IllegalClient, store.ObjectNotFound)

	g, err := h.client.BatchGetReplicaList(ctx(t), keys("", false, "done", "other", "rev", "", strings.Repeat("x", master.MaxKeyLen+1)))
	if err != nil {
		t.Fatal(err)
	}
	var gs []*pb.Status
	for _, x := range g.GetResults() {
		gs = append(gs, x.GetStatus())
	}
	wantCodes(t, "BatchGetReplicaList", gs, store.OK, store.ReplicaIsNotReady, store.ObjectNotFound, store.InvalidParams, store.InvalidKey)
	if d := g.GetResults()[0]; len(d.GetReplicas()) != 2 || d.GetLeaseTtlMs() != 10_000 ||
		d.GetReplicas()[0].GetStatus() != int32(master.ReplicaComplete) || d.GetReplicas()[0].GetSize() != 100 {
		t.Fatalf("GetReplicaList(done) = %v", d)
	}
	if d := g.GetResults()[1]; len(d.GetReplicas()) != 0 || d.GetLeaseTtlMs() != 0 {
		t.Fatalf("GetReplicaList(other) = %v", d)
	}

	e, err := h.client.BatchExistKey(ctx(t), keys("", false, "lease", "other", "nope", ""))
	if err != nil {
		t.Fatal(err)
	}
	var es []*pb.Status
	var ex []bool
	for _, x := range e.GetResults() {
		es = append(es, x.GetStatus())
		ex = append(ex, x.GetExists())
	}
	wantCodes(t, "BatchExistKey", es, store.OK, store.OK, store.OK, store.InvalidParams)
	if fmt.Sprint(ex) != "[true false false false]" {
		t.Fatalf("BatchExistKey exists = %v", ex)
	}

	// "done" and "lease" are leased (by Get and Exist), "other" is being
	// written.
	r, err = h.client.BatchRemove(ctx(t), keys("", false, "done", "lease", "other", "nope"))
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "BatchRemove", r.GetResults(), store.ObjectHasLease, store.ObjectHasLease, store.ReplicaIsNotReady, store.ObjectNotFound)
	r, err = h.client.BatchRemove(ctx(t), keys("", true, "done"))
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "BatchRemove(force)", r.GetResults(), store.OK)
	h.clk.Advance(10 * time.Second)
	r, err = h.client.BatchRemove(ctx(t), keys("", false, "lease", "done"))
	if err != nil {
		t.Fatal(err)
	}
	wantCodes(t, "BatchRemove after lease", r.GetResults(), store.OK, store.ObjectNotFound)

	st, err := h.client.GetStats(ctx(t), &pb.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetCapacity() != 8192 || st.GetUsed() != 200 || st.GetObjects() != 1 || st.GetSegments() != 2 || len(st.GetSegmentStats()) != 2 {
		t.Fatalf("GetStats = %v", st)
	}
	for _, sd := range st.GetSegmentStats() {
		if sd.GetCapacity() != 4096 || sd.GetUsed() != 100 || sd.GetObjects() != 1 || sd.GetName() != "node-"+sd.GetId() {
			t.Fatalf("segment stats %v", sd)
		}
	}
}

func TestHTTPHandler(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c1", pbSeg("a", 1<<32, 4096))
	if _, err := h.client.BatchPutStart(ctx(t), &pb.BatchPutStartRequest{ClientId: "c1", Keys: pb.Keys([]string{"x", "y", "z"}), Sizes: []uint64{64, 64, 64}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.BatchPutEnd(ctx(t), &pb.KeysRequest{ClientId: "c1", Keys: pb.Keys([]string{"x"})}); err != nil {
		t.Fatal(err)
	}
	// One hit (x), two misses (y not ready, nope absent).
	if _, err := h.client.BatchGetReplicaList(ctx(t), &pb.KeysRequest{Keys: pb.Keys([]string{"x", "y", "nope"})}); err != nil {
		t.Fatal(err)
	}
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	t.Run("health", func(t *testing.T) {
		rec := get("/health")
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("/health: %d %q", rec.Code, rec.Header().Get("Content-Type"))
		}
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("/health is not JSON: %v: %q", err, rec.Body.String())
		}
		if body["status"] != "ok" {
			t.Fatalf("/health = %v", body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		rec := get("/metrics")
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics: %d", rec.Code)
		}
		text := rec.Body.String()
		for _, want := range []string{
			"master_key_count 3",
			"master_segment_count 1",
			"master_total_capacity_bytes 4096",
			"master_allocated_bytes 192",
			"master_active_clients 1",
			"master_evicted_key_count 0",
			"master_mem_cache_hit_nums 1",
			"master_mem_cache_miss_nums 2",
			`master_rpc_requests_total{method="BatchPutStart"} 1`,
			`master_rpc_requests_total{method="MountSegment"} 1`,
			`master_rpc_latency_seconds_count{method="BatchGetReplicaList"} 1`,
		} {
			if !strings.Contains(text, want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
	t.Run("unknown path", func(t *testing.T) {
		if rec := get("/nope"); rec.Code != http.StatusNotFound {
			t.Fatalf("/nope: %d", rec.Code)
		}
	})
	if h.srv.Registry() != h.reg {
		t.Fatal("Registry() is not the registry passed in Options")
	}
}

// TestConcurrentClients runs batches from several goroutines at once; the
// server's lock keeps the master consistent (run with -race).
func TestConcurrentClients(t *testing.T) {
	h := newHarness(t)
	h.mount(t, "c0", pbSeg("a", 1<<32, 1<<20), pbSeg("b", 2<<32, 1<<20))
	const workers, perWorker = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("c%d", w)
			for i := range perWorker {
				k := fmt.Sprintf("w%d-%d", w, i)
				r, err := h.client.BatchPutStart(context.Background(), &pb.BatchPutStartRequest{ClientId: client, Keys: pb.Keys([]string{k}), Sizes: []uint64{128},
					Config: &pb.ReplicaConfig{ReplicaNum: 2}})
				if err != nil || r.GetResults()[0].GetStatus().GetCode() != 0 {
					errs <- fmt.Errorf("put %s: %v %v", k, r, err)
					return
				}
				e, err := h.client.BatchPutEnd(context.Background(), &pb.KeysRequest{ClientId: client, Keys: pb.Keys([]string{k})})
				if err != nil || e.GetResults()[0].GetCode() != 0 {
					errs <- fmt.Errorf("end %s: %v %v", k, e, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := h.client.GetStats(ctx(t), &pb.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetObjects() != workers*perWorker || st.GetUsed() != workers*perWorker*2*128 {
		t.Fatalf("stats after concurrent puts: %v", st)
	}
}

func TestCloseIdempotent(t *testing.T) {
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(m, Options{})
	s.Close()
	s.Close()
	lis := bufconn.Listen(1024)
	defer lis.Close()
	if err := s.Serve(lis); !errors.Is(err, grpc.ErrServerStopped) {
		t.Fatalf("Serve after Close: %v", err)
	}
}

func TestProcess(t *testing.T) {
	t.Run("bad config", func(t *testing.T) {
		_, err := Start(ProcessConfig{Master: master.Config{EvictionRatio: 2}, RPCAddr: "127.0.0.1:0"})
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("Start with a bad config: %v", err)
		}
	})
	t.Run("bad address", func(t *testing.T) {
		if _, err := Start(ProcessConfig{RPCAddr: "256.0.0.1:0"}); err == nil {
			t.Fatal("Start on a bad RPC address succeeded")
		}
		if _, err := Start(ProcessConfig{RPCAddr: "127.0.0.1:0", MetricsAddr: "256.0.0.1:0"}); err == nil {
			t.Fatal("Start on a bad metrics address succeeded")
		}
	})
	t.Run("failed start releases the rpc port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Skipf("cannot listen on loopback: %v", err)
		}
		addr := ln.Addr().String()
		ln.Close()
		for _, cfg := range []ProcessConfig{
			{RPCAddr: addr, MetricsAddr: "256.0.0.1:0"},
			{RPCAddr: addr, MetadataAddr: "256.0.0.1:0"},
		} {
			if _, err := Start(cfg); err == nil {
				t.Fatalf("Start(%+v) succeeded", cfg)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("rpc port %s still bound after a failed Start: %v", addr, err)
			}
			ln.Close()
		}
	})
	t.Run("serves", func(t *testing.T) {
		p, err := Start(ProcessConfig{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0"})
		if err != nil {
			t.Skipf("cannot listen on loopback: %v", err)
		}
		defer p.Close()
		if !strings.HasPrefix(p.MetadataURL, "http://127.0.0.1:") || !strings.HasSuffix(p.MetadataURL, "/metadata") {
			t.Fatalf("MetadataURL %q", p.MetadataURL)
		}
		resp, err := http.Get("http://" + p.MetricsAddr + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
			t.Fatalf("/health: %d %q", resp.StatusCode, body)
		}
		conn, err := grpc.NewClient(p.RPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r, err := pb.NewMasterClient(conn).Ping(ctx(t), &pb.PingRequest{ClientId: "c1"})
		if err != nil || !r.GetNeedRemount() {
			t.Fatalf("Ping over TCP: %v, %v", r, err)
		}
		p.Close()
		if err := p.Wait(ctx(t)); err != nil {
			t.Fatalf("Wait after Close: %v", err)
		}
	})
}
