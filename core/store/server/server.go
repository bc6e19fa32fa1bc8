// Package server serves a master.Master over gRPC (the storepb.Master
// service), runs its periodic Tick, and exposes Prometheus metrics and
// /health over HTTP, mirroring upstream mooncake_master's RPC port (50051)
// and metrics port (9003).
//
// Concurrency: one mutex (Server.mu) serialises every call into the master;
// no I/O happens under it. Close stops the tick loop, then the gRPC server.
package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// Server is the gRPC front of one master.
type Server struct {
	pb.UnimplementedMasterServer

	mu struct {
		sync.Mutex
		m *master.Master
	}
	grpc    *grpc.Server
	metrics *metrics
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Options configures a Server.
type Options struct {
	// TickInterval is the period of the master's Tick (eviction by
	// watermark, client expiry); default 10 ms (upstream's eviction loop).
	TickInterval time.Duration
	// Registry receives the Prometheus metrics; nil = a fresh registry
	// (see Server.Registry).
	Registry *prometheus.Registry
	// Interceptors run inside the metrics interceptor, in order, around
	// every unary call (HA: the standby gate and replication sync).
	Interceptors []grpc.UnaryServerInterceptor
}

// New wraps m. The caller must not use m afterwards except through the
// server. Start the tick loop and serving with Serve.
func New(m *master.Master, opts Options) *Server {
	if opts.TickInterval <= 0 {
		opts.TickInterval = 10 * time.Millisecond
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	s := &Server{stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.m = m
	s.metrics = newMetrics(opts.Registry, s)
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{s.metrics.interceptor}, opts.Interceptors...)...))
	pb.RegisterMasterServer(s.grpc, s)
	go s.tickLoop(opts.TickInterval)
	return s
}

// Registry returns the Prometheus registry holding the master's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// Serve serves gRPC on ln until Close. Errors: grpc.Server.Serve's.
func (s *Server) Serve(ln net.Listener) error { return s.grpc.Serve(ln) }

// Close stops the tick loop and the gRPC server (in-flight RPCs finish).
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.grpc.Stop()
	})
}

// Do runs f with exclusive access to the master (for embedding and tests).
func (s *Server) Do(f func(m *master.Master)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.mu.m)
}

func (s *Server) tickLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Do(func(m *master.Master) { m.Tick() })
		}
	}
}

func status(err error) *pb.Status {
	if err == nil {
		return &pb.Status{}
	}
	// The code travels in its own field: send only the message naming the
	// object, so the client does not print "OBJECT_NOT_FOUND" twice.
	var se *store.Error
	if errors.As(err, &se) {
		return &pb.Status{Code: int32(se.Code), Message: se.Msg}
	}
	return &pb.Status{Code: int32(store.CodeOf(err)), Message: err.Error()}
}

func replicas(rs []master.Replica) []*pb.Replica {
	out := make([]*pb.Replica, len(rs))
	for i, r := range rs {
		out[i] = &pb.Replica{Segment: r.Segment, SegmentId: r.SegmentID, Addr: r.Addr, Size: r.Size, Status: int32(r.Status), Slices: slicesPB(r.Slices)}
	}
	return out
}

// BatchPutStart implements storepb.MasterServer: PutStart per key, results
// in input order. A sizes list of another length fails every key with
// INVALID_PARAMS.
func (s *Server) BatchPutStart(ctx context.Context, req *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	out := &pb.BatchPutStartResponse{Results: make([]*pb.PutStartResult, len(req.Keys))}
	cfg := replicaConfig(req.Config)
	if len(req.Sizes) != len(req.Keys) {
		for i, k := range req.Keys {
			out.Results[i] = &pb.PutStartResult{Status: status(store.Errorf(store.InvalidParams, "key %q: %d sizes for %d keys", k, len(req.Sizes), len(req.Keys)))}
		}
		return out, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range req.Keys {
		rs, err := s.mu.m.PutStart(req.ClientId, k, req.Sizes[i], cfg)
		out.Results[i] = &pb.PutStartResult{Status: status(err), Replicas: replicas(rs)}
	}
	return out, nil
}

func (s *Server) eachKey(req *pb.KeysRequest, f func(m *master.Master, key string) error) *pb.StatusList {
	out := &pb.StatusList{Results: make([]*pb.Status, len(req.Keys))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range req.Keys {
		out.Results[i] = status(f(s.mu.m, k))
	}
	return out
}

// BatchPutEnd implements storepb.MasterServer.
func (s *Server) BatchPutEnd(ctx context.Context, req *pb.KeysRequest) (*pb.StatusList, error) {
	return s.eachKey(req, func(m *master.Master, k string) error { return m.PutEnd(req.ClientId, k) }), nil
}

// BatchPutRevoke implements storepb.MasterServer.
func (s *Server) BatchPutRevoke(ctx context.Context, req *pb.KeysRequest) (*pb.StatusList, error) {
	return s.eachKey(req, func(m *master.Master, k string) error { return m.PutRevoke(req.ClientId, k) }), nil
}

// BatchRemove implements storepb.MasterServer (Remove per key, with force).
func (s *Server) BatchRemove(ctx context.Context, req *pb.KeysRequest) (*pb.StatusList, error) {
	return s.eachKey(req, func(m *master.Master, k string) error { return m.Remove(k, req.Force) }), nil
}

// BatchGetReplicaList implements storepb.MasterServer; each found key gets
// a lease.
func (s *Server) BatchGetReplicaList(ctx context.Context, req *pb.KeysRequest) (*pb.BatchGetReplicaListResponse, error) {
	out := &pb.BatchGetReplicaListResponse{Results: make([]*pb.GetReplicaListResult, len(req.Keys))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range req.Keys {
		rs, ttl, err := s.mu.m.GetReplicaList(k)
		out.Results[i] = &pb.GetReplicaListResult{Status: status(err), Replicas: replicas(rs), LeaseTtlMs: uint64(ttl.Milliseconds())}
	}
	s.metrics.lookups(out.Results)
	return out, nil
}

// BatchExistKey implements storepb.MasterServer; each existing key gets a
// lease.
func (s *Server) BatchExistKey(ctx context.Context, req *pb.KeysRequest) (*pb.BatchExistKeyResponse, error) {
	out := &pb.BatchExistKeyResponse{Results: make([]*pb.ExistResult, len(req.Keys))}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range req.Keys {
		ok, err := s.mu.m.ExistKey(k)
		out.Results[i] = &pb.ExistResult{Status: status(err), Exists: ok}
	}
	return out, nil
}

// MountSegment implements storepb.MasterServer.
func (s *Server) MountSegment(ctx context.Context, req *pb.MountSegmentRequest) (*pb.Status, error) {
	if req.Segment == nil {
		return status(store.Errorf(store.InvalidParams, "mount without a segment")), nil
	}
	g := req.Segment
	s.mu.Lock()
	defer s.mu.Unlock()
	return status(s.mu.m.MountSegment(segment(g), req.ClientId)), nil
}

// UnmountSegment implements storepb.MasterServer.
func (s *Server) UnmountSegment(ctx context.Context, req *pb.UnmountSegmentRequest) (*pb.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return status(s.mu.m.UnmountSegment(req.SegmentId, req.ClientId)), nil
}

// Ping implements storepb.MasterServer.
func (s *Server) Ping(ctx context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	need, err := s.mu.m.Ping(req.ClientId)
	return &pb.PingResponse{Status: status(err), NeedRemount: need}, nil
}

// GetStats implements storepb.MasterServer (operator listing).
func (s *Server) GetStats(ctx context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	s.mu.Lock()
	st := s.mu.m.Stats()
	s.mu.Unlock()
	out := &pb.StatsResponse{Capacity: st.Capacity, Used: st.Used, Objects: int64(st.Objects), Segments: int64(st.Segments), EvictedObjects: st.EvictedObjects, EvictedBytes: st.EvictedBytes}
	moreStats(out, st)
	for _, g := range st.SegmentsDetail {
		out.SegmentStats = append(out.SegmentStats, &pb.SegmentStats{Id: g.ID, Name: g.Name, Capacity: g.Capacity, Used: g.Used, Objects: int64(g.Objects)})
	}
	return out, nil
}
