// Package server serves a master.Master over gRPC (the storepb.Master
// service), runs its periodic Tick, and exposes Prometheus metrics and
// /health over HTTP, mirroring upstream mooncake_master's RPC port (50051)
// and metrics port (9003). With Options.TLS (ProcessConfig.TLS) every
// listener requires mutual TLS (core/tlsconfig); upstream has none.
//
// Concurrency: one mutex (Server.mu) serialises every call into the master;
// no I/O happens under it. Close stops the tick loop, then the gRPC server.
package server

import (
	"context"
	"errors"
	"net"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Server is the gRPC front of one master.
type Server struct {
	pb.UnimplementedMasterServer

	mu struct {
		sync.Mutex
		m *master.Master
		// tierSeen is the master's TierSeq at the last unlock; tierCh is
		// closed (and replaced) by the unlock that sees it change, waking
		// owners waiting for tasks and readers waiting for loads.
		tierSeen uint64
		tierCh   chan struct{}
		// spaceSeen and spaceCh do the same for the master's SpaceSeq
		// (DRAM freed), waking reads and puts waiting for room.
		spaceSeen uint64
		spaceCh   chan struct{}
		// sealSeen and sealCh do the same for the master's SealSeq (a
		// precommitted write ended), waking the readers waiting for one.
		sealSeen uint64
		sealCh   chan struct{}
		// peak is the most objects the tick loop saw since it last
		// returned memory to the OS (Options.FreeOSMemoryAfter).
		peak int
	}
	grpc    *grpc.Server
	metrics *metrics
	// unary runs a Session call inside the unary interceptors (metrics,
	// Options.Interceptors), as gRPC runs a unary call.
	unary func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error)
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// loadWait bounds how long a read waits for a disk-only object to be
	// staged (Options.LoadWait).
	loadWait time.Duration
	// putWait bounds how long a put waits for offloads to free DRAM
	// (Options.PutWait).
	putWait time.Duration
	// freeAfter and freeOS: Options.FreeOSMemoryAfter and its action.
	freeAfter    int
	freeOS       func()
	durableSeals bool // Options.DurableSeals
	// inline: a session's calls that cannot wait run in its read loop
	// (quick); false with Options.Interceptors, which may wait (an HA
	// leader waits for each change to be replicated).
	inline bool
	// sealWaiting, when set (tests), is called each time a reader starts
	// waiting for precommitted writes (awaitSeals).
	sealWaiting func()
	// tls and logf: Options.TLS and Options.Logf (the framed session
	// listener's handshakes).
	tls    *tlsconfig.Config
	logf   func(format string, args ...any)
	framed framedState // ServeFramedSessions
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
	// LoadWait bounds how long GetReplicaList waits for a disk-only object
	// to be staged back into DRAM by its owner before answering
	// REPLICA_IS_NOT_READY; default 10 s. It includes waiting for DRAM to
	// stage the object in (leases to end, offloads to finish).
	LoadWait time.Duration
	// PutWait bounds how long PutStart waits, when no DRAM is free but
	// objects evicted to a disk tier are still being copied there or a
	// reader's lease ends within it, for that DRAM, before answering
	// NO_AVAILABLE_HANDLE; default 1 s, never past half the call's
	// deadline. Negative: no wait (upstream's behaviour).
	PutWait time.Duration
	// TLS, when set, makes the gRPC service require mutual TLS
	// (tlsconfig.Config.Server: TLS 1.3, a client certificate issued by
	// its CA bundle); nil = plaintext, as upstream. Ours: upstream has no
	// transport security.
	TLS *tlsconfig.Config
	// Logf receives one line per connection refused by TLS (peer and
	// reason); nil = none.
	Logf func(format string, args ...any)
	// FreeOSMemoryAfter makes the tick loop hand freed heap back to the
	// OS (runtime/debug.FreeOSMemory, outside the master's lock) once the
	// object count has fallen by at least this many objects and to at most
	// half its peak since the last time: the master's metadata of removed
	// objects is garbage, and an idle process would otherwise keep it
	// until the runtime's next forced GC (up to 2 minutes) and its
	// scavenger (later still). Default 100,000 objects (about 20 MB of
	// metadata); negative: never. Ours: upstream's C++ master frees as it
	// goes.
	FreeOSMemoryAfter int

	// DurableSeals makes BatchPutCommit ask clients to wait for the
	// answer of a precommitted key's PutEnd before their put returns
	// (storepb.PutCommitResponse.await_seal): set for an HA master, whose
	// answers wait until the change is durable in etcd, so that a put
	// that returned survives a failover. Without it a put returns once
	// its PutEnd is sent.
	DurableSeals bool

	// freeOS replaces debug.FreeOSMemory (tests).
	freeOS func()
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
	s := &Server{stop: make(chan struct{}), done: make(chan struct{}), loadWait: opts.LoadWait, putWait: opts.PutWait,
		freeAfter: opts.FreeOSMemoryAfter, freeOS: opts.freeOS, durableSeals: opts.DurableSeals}
	if s.freeAfter == 0 {
		s.freeAfter = 100_000
	}
	if s.freeOS == nil {
		s.freeOS = debug.FreeOSMemory
	}
	if s.loadWait <= 0 {
		s.loadWait = 10 * time.Second
	}
	if s.putWait == 0 {
		s.putWait = time.Second
	}
	s.mu.m = m
	s.mu.tierCh = make(chan struct{})
	s.mu.spaceCh = make(chan struct{})
	s.mu.sealCh = make(chan struct{})
	s.metrics = newMetrics(opts.Registry, s)
	// Per-call cost: each unary call is one short stream, so streams run on
	// GOMAXPROCS long-lived workers (no goroutine start and stack growth per
	// call; busy workers fall back to a new goroutine), and the flow-control
	// windows are fixed at gRPC's BDP ceiling (16 MiB), which turns off its
	// BDP ping probes. Together about 15% less CPU per call on loopback
	// (client + master, measured with BatchExistKey).
	ics := append([]grpc.UnaryServerInterceptor{s.metrics.interceptor}, opts.Interceptors...)
	s.inline = len(opts.Interceptors) == 0
	s.unary = chainUnary(ics)
	gopts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(ics...),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(store.GRPCWindow), grpc.InitialConnWindowSize(store.GRPCWindow),
		grpc.MaxRecvMsgSize(store.MaxRequestBytes)}
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(tlsconfig.ServerCredentials(opts.TLS, opts.Logf)))
	}
	s.grpc = grpc.NewServer(gopts...)
	pb.RegisterMasterServer(s.grpc, s)
	s.grpc.RegisterService(&framedSessionDesc, s)
	s.tls, s.logf = opts.TLS, opts.Logf
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
		s.closeFramed()
		s.grpc.Stop()
	})
}

// Do runs f with exclusive access to the master (for embedding and tests).
func (s *Server) Do(f func(m *master.Master)) {
	s.mu.Lock()
	defer s.unlock()
	f(s.mu.m)
}

// unlock releases s.mu, first waking the tier waiters if the master's disk
// tier tasks changed under it, and the space waiters if DRAM was freed.
func (s *Server) unlock() {
	s.mu.m.EndBatch() // one locked section is one batch for prefix tie-breaking
	if v := s.mu.m.TierSeq(); v != s.mu.tierSeen {
		s.mu.tierSeen = v
		close(s.mu.tierCh)
		s.mu.tierCh = make(chan struct{})
	}
	if v := s.mu.m.SpaceSeq(); v != s.mu.spaceSeen {
		s.mu.spaceSeen = v
		close(s.mu.spaceCh)
		s.mu.spaceCh = make(chan struct{})
	}
	if v := s.mu.m.SealSeq(); v != s.mu.sealSeen {
		s.mu.sealSeen = v
		close(s.mu.sealCh)
		s.mu.sealCh = make(chan struct{})
	}
	s.mu.Unlock()
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
			var free bool
			s.Do(func(m *master.Master) {
				m.Tick()
				free = s.massRemovalLocked(m.ObjectCount())
			})
			if free {
				s.freeOS()
			}
		}
	}
}

// massRemovalLocked reports whether the tick loop should return freed heap
// to the OS now that the master holds objects objects (see
// Options.FreeOSMemoryAfter), and then starts a new peak.
func (s *Server) massRemovalLocked(objects int) bool {
	s.mu.peak = max(s.mu.peak, objects)
	if s.freeAfter < 0 || s.mu.peak-objects < s.freeAfter || objects > s.mu.peak/2 {
		return false
	}
	s.mu.peak = objects
	return true
}

func status(err error) *pb.Status {
	if err == nil {
		return &pb.Status{}
	}
	// The code travels in its own field: send only the message naming the
	// object, so the client does not print "OBJECT_NOT_FOUND" twice.
	// Status.message is a proto string and must be UTF-8: a key in it is
	// quoted (%q) by the master, and any other bytes that are not UTF-8
	// are escaped here rather than failing the whole response.
	var se *store.Error
	if errors.As(err, &se) {
		return &pb.Status{Code: int32(se.Code), Message: store.ValidText(se.Msg)}
	}
	return &pb.Status{Code: int32(store.CodeOf(err)), Message: store.ValidText(err.Error())}
}

// replicaList is one key's GetReplicaList answer: its status, replicas and
// lease (ttl, whole milliseconds).
func replicaList(rs []master.Replica, ttl time.Duration, err error) *pb.GetReplicaListResult {
	return &pb.GetReplicaListResult{Status: status(err), Replicas: replicas(rs), LeaseTtlMs: uint64(ttl.Milliseconds())}
}

func replicas(rs []master.Replica) []*pb.Replica {
	out := make([]*pb.Replica, len(rs))
	for i, r := range rs {
		out[i] = &pb.Replica{Segment: r.Segment, SegmentId: r.SegmentID, Addr: r.Addr, Size: r.Size, Status: int32(r.Status), Slices: slicesPB(r.Slices), Type: int32(r.Type)}
	}
	return out
}

// BatchPutStart implements storepb.MasterServer: PutStart per key, results
// in input order. A sizes list of another length fails every key with
// INVALID_PARAMS. A key that finds no DRAM while objects evicted to a disk
// tier are still being copied there, or while readers' leases hold it,
// waits for the copies or the first lease to end, up to Options.PutWait
// and half the call's remaining deadline (master.TryPutStart), instead of
// being refused at once.
func (s *Server) BatchPutStart(ctx context.Context, req *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	out := &pb.BatchPutStartResponse{Results: make([]*pb.PutStartResult, len(req.Keys))}
	cfg := replicaConfig(req.Config)
	if len(req.Sizes) != len(req.Keys) {
		for i, k := range req.Keys {
			out.Results[i] = &pb.PutStartResult{Status: status(store.Errorf(store.InvalidParams, "key %q: %d sizes for %d keys", string(k), len(req.Sizes), len(req.Keys)))}
		}
		return out, nil
	}
	idx := make([]int, len(req.Keys))
	for i := range idx {
		idx[i] = i
	}
	limit := s.putWait
	if dl, ok := ctx.Deadline(); ok {
		// Leave the caller time to hear the answer.
		limit = min(limit, time.Until(dl)/2)
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for len(idx) > 0 {
		left := limit - time.Since(start)
		var waiting []int
		var retryAt, now time.Time
		s.mu.Lock()
		now = s.mu.m.Config().Now() // the master's clock sets the leases
		var until time.Time
		if left > 0 {
			until = now.Add(left)
		}
		for _, i := range idx {
			rs, at, wait, err := s.mu.m.TryPutStart(req.ClientId, string(req.Keys[i]), req.Sizes[i], cfg, until)
			if wait {
				waiting = append(waiting, i)
				if !at.IsZero() && (retryAt.IsZero() || at.Before(retryAt)) {
					retryAt = at
				}
				continue
			}
			out.Results[i] = &pb.PutStartResult{Status: status(err), Replicas: replicas(rs)}
		}
		tierCh, spaceCh := s.mu.tierCh, s.mu.spaceCh
		s.unlock()
		idx = waiting
		if len(idx) == 0 {
			break
		}
		// Wake at the first lease end (a millisecond past it: the
		// master's check is strict) or when the time is up, whichever
		// comes first; the last round tries once more without waiting.
		d := left
		if !retryAt.IsZero() {
			d = min(d, retryAt.Sub(now)+time.Millisecond)
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-tierCh:
		case <-spaceCh:
		case <-timer.C:
		case <-ctx.Done():
			limit = 0
		case <-s.stop:
			limit = 0
		}
		timer.Stop()
	}
	return out, nil
}

func (s *Server) eachKey(req *pb.KeysRequest, f func(m *master.Master, key string) error) *pb.StatusList {
	out := &pb.StatusList{Results: make([]*pb.Status, len(req.Keys))}
	s.mu.Lock()
	defer s.unlock()
	for i, k := range req.Keys {
		out.Results[i] = status(f(s.mu.m, string(k)))
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

// BatchRemove implements storepb.MasterServer (Remove per key, with
// force). A precommitted key is removed once its write ends (awaitSeals),
// as a put that returned is complete.
func (s *Server) BatchRemove(ctx context.Context, req *pb.KeysRequest) (*pb.StatusList, error) {
	s.awaitSeals(ctx, req.Keys)
	return s.eachKey(req, func(m *master.Master, k string) error { return m.Remove(k, req.Force) }), nil
}

// BatchGetReplicaList implements storepb.MasterServer; each found key gets
// a lease. A key whose only replica is on a disk tier is staged back into
// DRAM by its owner first (master.GetOrLoad): the call waits for that, up
// to Options.LoadWait (and ctx), then answers with the staged replica,
// OBJECT_NOT_FOUND when the file was corrupt or missing, or
// REPLICA_IS_NOT_READY when the owner did not finish in time. When the
// tier's segment has no DRAM to stage the object in, the same budget is
// spent waiting for room (leases ending, offloads finishing, space freed:
// master.StagingRetry) and staging is retried; NO_AVAILABLE_HANDLE only
// when the budget runs out or waiting cannot help. The lease TTL reported
// for a key that waited includes the wait: its lease was granted at the
// end of the wait, and the client measures the lease from before its
// request. A precommitted key (storepb.PutCommitRequest.precommit) is
// answered once its write ends, up to SealWait (awaitSeals).
func (s *Server) BatchGetReplicaList(ctx context.Context, req *pb.KeysRequest) (*pb.BatchGetReplicaListResponse, error) {
	s.awaitSeals(ctx, req.Keys)
	out := &pb.BatchGetReplicaListResponse{Results: make([]*pb.GetReplicaListResult, len(req.Keys))}
	idx := make([]int, len(req.Keys))
	for i := range idx {
		idx[i] = i
	}
	loaded := make(map[int]bool) // keys whose load was queued (a later miss is a dropped disk copy)
	var deadline <-chan time.Time
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	start := time.Now()
	for first := true; len(idx) > 0; first = false {
		var waited time.Duration
		if !first {
			waited = time.Since(start).Truncate(time.Millisecond)
		}
		var pending []int
		var retryAt time.Time // earliest lease end that may make room
		var now time.Time
		s.mu.Lock()
		for _, i := range idx {
			k := string(req.Keys[i])
			rs, ttl, loading, err := s.mu.m.GetOrLoad(k)
			switch {
			case loading:
				loaded[i] = true
				pending = append(pending, i)
				err = store.Errorf(store.ReplicaIsNotReady, "key %q is still being loaded from disk after %v", k, s.loadWait)
			case store.CodeOf(err) == store.NoAvailableHandle:
				if at, wait := s.mu.m.StagingRetry(k); wait {
					pending = append(pending, i)
					if !at.IsZero() && (retryAt.IsZero() || at.Before(retryAt)) {
						retryAt = at
					}
				}
			case loaded[i] && store.CodeOf(err) == store.ObjectNotFound:
				err = store.Errorf(store.ObjectNotFound, "key %q: its disk copy could not be read back (corrupt or missing file, or its node left) and was dropped", k)
			}
			if ttl > 0 {
				ttl += waited
			}
			out.Results[i] = replicaList(rs, ttl, err)
		}
		if !retryAt.IsZero() {
			now = s.mu.m.Config().Now() // the master's clock sets the leases
		}
		tierCh, spaceCh := s.mu.tierCh, s.mu.spaceCh
		s.unlock()
		idx = pending
		if len(idx) == 0 {
			break
		}
		if deadline == nil {
			t := time.NewTimer(s.loadWait)
			defer t.Stop()
			deadline = t.C
		}
		var leaseEnd <-chan time.Time
		if !retryAt.IsZero() {
			// Past the lease's end by a millisecond: the master's check
			// is strict.
			d := retryAt.Sub(now) + time.Millisecond
			if retry == nil {
				retry = time.NewTimer(d)
			} else {
				retry.Reset(d)
			}
			leaseEnd = retry.C
		}
		select {
		case <-tierCh:
		case <-spaceCh:
		case <-leaseEnd:
		case <-deadline:
			idx = nil
		case <-ctx.Done():
			idx = nil
		case <-s.stop:
			idx = nil
		}
		if retry != nil && !retry.Stop() {
			select { // drain a fired timer before Reset (pre-Go 1.23 semantics)
			case <-retry.C:
			default:
			}
		}
	}
	s.metrics.lookups(out.Results)
	return out, nil
}

// SealWait bounds how long a GetReplicaList, ExistKey, GetSize or Remove
// waits for a precommitted write of one of its keys to end (PutEnd or
// PutRevoke; see master.PrecommitReserved) before it answers as for any
// write in progress (REPLICA_IS_NOT_READY, not existing, not ready to
// remove). A writer sends its
// PutEnd as soon as its write is done and before its put returns, so a
// reader that started after the put returned waits about one message;
// only a reader racing the put, or a writer that died between its
// precommit and its PutEnd, waits longer.
const SealWait = time.Second

// awaitSeals returns once none of keys is a precommitted write, or after
// SealWait, ctx's end or the server's stop, whichever comes first.
func (s *Server) awaitSeals(ctx context.Context, keys [][]byte) {
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		s.mu.Lock()
		open := false
		if s.mu.m.Precommits() > 0 {
			for _, k := range keys {
				if s.mu.m.Precommitted(string(k)) {
					open = true
					break
				}
			}
		}
		sealCh := s.mu.sealCh
		s.mu.Unlock() // nothing changed: no need for unlock's wake-ups
		if !open {
			return
		}
		if deadline == nil {
			deadline = time.NewTimer(SealWait)
		}
		if s.sealWaiting != nil {
			s.sealWaiting()
		}
		select {
		case <-sealCh:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		}
	}
}

// BatchExistKey implements storepb.MasterServer; each existing key gets a
// lease. A precommitted key is answered once its write ends (awaitSeals).
func (s *Server) BatchExistKey(ctx context.Context, req *pb.KeysRequest) (*pb.BatchExistKeyResponse, error) {
	s.awaitSeals(ctx, req.Keys)
	out := &pb.BatchExistKeyResponse{Results: make([]*pb.ExistResult, len(req.Keys))}
	s.mu.Lock()
	defer s.unlock()
	for i, k := range req.Keys {
		ok, err := s.mu.m.ExistKey(string(k))
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
	defer s.unlock()
	return status(s.mu.m.MountSegment(segment(g), req.ClientId)), nil
}

// UnmountSegment implements storepb.MasterServer.
func (s *Server) UnmountSegment(ctx context.Context, req *pb.UnmountSegmentRequest) (*pb.Status, error) {
	s.mu.Lock()
	defer s.unlock()
	return status(s.mu.m.UnmountSegment(req.SegmentId, req.ClientId)), nil
}

// Ping implements storepb.MasterServer.
func (s *Server) Ping(ctx context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	s.mu.Lock()
	defer s.unlock()
	need, err := s.mu.m.Ping(req.ClientId)
	return &pb.PingResponse{Status: status(err), NeedRemount: need}, nil
}

// GetStats implements storepb.MasterServer (operator listing).
func (s *Server) GetStats(ctx context.Context, req *pb.StatsRequest) (*pb.StatsResponse, error) {
	s.mu.Lock()
	st := s.mu.m.Stats()
	s.unlock()
	out := &pb.StatsResponse{Capacity: st.Capacity, Used: st.Used, Objects: int64(st.Objects), Segments: int64(st.Segments), EvictedObjects: st.EvictedObjects, EvictedBytes: st.EvictedBytes}
	moreStats(out, st)
	for _, g := range st.SegmentsDetail {
		out.SegmentStats = append(out.SegmentStats, &pb.SegmentStats{Id: g.ID, Name: g.Name, Capacity: g.Capacity, Used: g.Used, Objects: int64(g.Objects),
			DiskCapacity: g.DiskCapacity, DiskUsed: g.DiskUsed, DiskObjects: int64(g.DiskObjects),
			Reserved: g.Reserved, Reservations: int64(g.Reservations)})
	}
	return out, nil
}

// MaxReserveBytes is the largest value size BatchPutCommit reserves space
// for: larger values take PutStart + PutEnd, whose space is held only
// while they are written.
const MaxReserveBytes = 64 << 20

// maxReservePerCall bounds reserve_sizes of one BatchPutCommit.
const maxReservePerCall = 64

// BatchPutCommit implements storepb.MasterServer (ours: see
// storepb.PutCommitRequest): ends the writes of seal_keys (master.PutEnd,
// results in seal_results), commits reservations[i] under keys[i]
// (master.CommitReserved, pins from config), then releases the
// reservations named in release (master.ReleaseReserved; unknown ones
// are ignored), then reserves one value of each reserve_sizes entry
// (master.Reserve, placed by config). Results per key in input order;
// lists of unequal lengths fail every key with INVALID_PARAMS; a reserve
// size above MaxReserveBytes, or more than 64 of them, is refused in
// that entry's status (INVALID_PARAMS).
func (s *Server) BatchPutCommit(ctx context.Context, req *pb.PutCommitRequest) (*pb.PutCommitResponse, error) {
	out := &pb.PutCommitResponse{Results: make([]*pb.Status, len(req.Keys)), Reserved: make([]*pb.Reservation, len(req.ReserveSizes)),
		AwaitSeal: req.Precommit && s.durableSeals}
	cfg := replicaConfig(req.Config)
	bad := len(req.Reservations) != len(req.Keys) || len(req.Sizes) != len(req.Keys)
	s.mu.Lock()
	defer s.unlock()
	if len(req.SealKeys) > 0 {
		out.SealResults = make([]*pb.Status, len(req.SealKeys))
		for i, k := range req.SealKeys {
			out.SealResults[i] = status(s.mu.m.PutEnd(req.ClientId, string(k)))
		}
	}
	for i, k := range req.Keys {
		if bad {
			out.Results[i] = status(store.Errorf(store.InvalidParams, "key %q: %d reservations and %d sizes for %d keys", string(k), len(req.Reservations), len(req.Sizes), len(req.Keys)))
			continue
		}
		commit := s.mu.m.CommitReserved
		if req.Precommit {
			commit = s.mu.m.PrecommitReserved
		}
		out.Results[i] = status(commit(req.ClientId, req.Reservations[i], string(k), req.Sizes[i], cfg))
	}
	for _, id := range req.Release {
		_ = s.mu.m.ReleaseReserved(req.ClientId, id)
	}
	for i, size := range req.ReserveSizes {
		var (
			r   master.Reservation
			err error
		)
		switch {
		case i >= maxReservePerCall:
			err = store.Errorf(store.InvalidParams, "reserve: more than %d reservations in one call", maxReservePerCall)
		case size > MaxReserveBytes:
			err = store.Errorf(store.InvalidParams, "reserve: %d bytes exceed the reservation limit of %d bytes", size, MaxReserveBytes)
		default:
			r, err = s.mu.m.Reserve(req.ClientId, size, cfg)
		}
		out.Reserved[i] = &pb.Reservation{Id: r.ID, Status: status(err), Size: r.Size, Replicas: replicas(r.Replicas)}
	}
	return out, nil
}
