// Package client is a KV-cache pool client: it talks to the master over gRPC
// and moves value bytes with the transfer engine, mirroring upstream
// Mooncake's store client (MooncakeDistributedStore: put/get, batch forms,
// is_exist, remove, and the zero-copy put_from/get_into on registered
// buffers). A client may also contribute memory to the pool: with
// GlobalSegmentSize > 0 it maps that much DRAM, registers it with its engine
// and mounts it at the master (a storage node is a client that only does
// this, and says so with SegmentKind: store.SegmentStandalone).
//
// A heartbeat pings the master every PingInterval. When the master asks
// for a remount (it restarted with an empty table, or this client's TTL
// passed), the client publishes its transfer descriptors again (the
// master's embedded metadata server may have lost them) and remounts its
// segment and disk tier; values it held are lost with the old table.
//
// Batch calls are sent to the master in chunks that each fit one gRPC
// message (batch.go), so a batch of any size works. A failed master call
// keeps its gRPC status as the cause: Unreachable and MasterError tell an
// operator "cannot reach master ADDR: connection refused" instead of
// gRPC's text. With Config.Logf the heartbeat logs losing the master and
// remounting at it.
//
// With Config.TLS the client speaks mutual TLS to the master (and
// EtcdTLS to etcd when it follows the leader); the caller opens Metadata
// with the same identity (core/metadata/metaopen WithTLS). Value bytes move
// over the transfer engine in the clear either way.
//
// Reads honour leases: a read that finishes after the lease the master
// granted fails with LEASE_EXPIRED, because the bytes may have been evicted
// and overwritten under it.
//
// Concurrency: all methods are safe for concurrent use. Close unmounts the
// segment, stops the heartbeat, closes the engine and then unmaps memory.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/alloc"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/disk"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Config configures a Client. Names follow upstream's setup() arguments.
type Config struct {
	// LocalHostname is this client's transfer segment name, unique in the
	// cluster (upstream local_hostname); default "<hostname>-<random>".
	LocalHostname string
	// MasterAddr is the master's gRPC address host:port (upstream
	// master_server_addr), or "etcd://h1:2379,h2:2379" (also ';'-separated)
	// to follow the leader of highly available masters (leader.go);
	// required.
	MasterAddr string
	// TLS, when set, dials the master with mutual TLS
	// (tlsconfig.Config.Client: TLS 1.3, the master's certificate verified
	// against the CA bundle, this client's certificate presented); nil =
	// plaintext, as upstream. Metadata is opened by the caller, with the
	// same identity (metaopen.WithTLS) when the master's metadata server
	// uses TLS. Ours: upstream has no transport security.
	TLS *tlsconfig.Config
	// EtcdTLS, when set, is the TLS identity of the etcd client that
	// follows the leader of an etcd:// MasterAddr
	// (tlsconfig.LoadClient); nil = plaintext.
	EtcdTLS *tlsconfig.Config
	// ClusterID is the HA cluster an etcd:// MasterAddr follows (upstream
	// MC_STORE_CLUSTER_ID); default "mooncake_cluster".
	ClusterID string
	// Metadata is the transfer engine's descriptor store (upstream
	// metadata_server); required.
	Metadata metadata.Store
	// Transport is the transfer transport (upstream protocol); required.
	Transport transfer.Transport
	// Local is an optional same-host transport (shm), handed to the engine
	// as transfer.Config.Local: peers on this host that offer it are reached
	// through it, others through Transport. The global segment is always a
	// sealed memory file (memory.MapShared), so same-host peers whose engine
	// has a Local transport can map it.
	Local transfer.Transport
	// GlobalSegmentSize is the DRAM in bytes contributed to the pool; 0 =
	// pure client (upstream global_segment_size).
	GlobalSegmentSize uint64
	// PrefaultSegment allocates and maps every page of the global segment
	// at start, in the background (memory.Region.Prefault), as upstream's
	// registration with RDMA NICs pins it: puts into the segment then
	// write at copy speed instead of paying a page fault per 4 KiB (first
	// touch of a memory-file page ran at 1-2 GB/s on the development
	// machine), at the price of holding all GlobalSegmentSize bytes of RAM
	// from the start. Default false (pages are allocated on first use, as
	// upstream's tcp path does): engine-embedded clients keep their memory
	// lazy; `mooncake node` sets it (its --prefault flag, default true).
	PrefaultSegment bool
	// SegmentKind tells the master whether the global segment outlives
	// this client's process: store.SegmentEmbedded (the default: a client
	// embedded in an application, such as an inference engine's
	// connector, whose segment vanishes when it exits) or
	// store.SegmentStandalone (a storage process that only contributes
	// memory: `mooncake node`). The master places replicas on standalone
	// segments first. Ignored without a global segment; an undefined kind
	// is INVALID_PARAMS. Ours: upstream has no such setting.
	SegmentKind store.SegmentKind
	// LocalBufferSize is the registered scratch buffer in bytes used by the
	// copying Put/Get; 0 = only zero-copy calls (upstream local_buffer_size).
	LocalBufferSize uint64
	// ReplicaNum is the default number of replicas per put; default 1.
	ReplicaNum int
	// PutReservations is how many reservations (space reserved at the
	// master ahead of a put, see reserve.go) the client keeps per value
	// size, so that a put of up to 64 MiB is one write and one master
	// round trip; default 2, negative = none (every put is PutStart,
	// write, PutEnd, as upstream). Ours.
	PutReservations int
	// SerialCommit sends a reserved put's commit after its write instead
	// of during it. By default the commit is a precommit that overlaps
	// the write, so a put costs about the longer of the two rather than
	// their sum, and a reader waits at the master for the put's PutEnd
	// (see storepb.PutCommitRequest.precommit); this restores the serial
	// order (for comparison: mooncake bench store --serial-commit). Ours.
	SerialCommit bool
	// NoFramedSession keeps the put and get calls on the gRPC Session
	// stream even where the master serves framed sessions (see
	// session.go; for comparison: mooncake bench store --grpc-session).
	// Ours.
	NoFramedSession bool
	// PingInterval is the heartbeat period; default 1 s (upstream).
	PingInterval time.Duration
	// RPCTimeout bounds each master RPC; default 30 s (upstream MC_RPC_TIMEOUT_MS).
	RPCTimeout time.Duration
	// StorageRootDir is a directory on a local SSD for the disk tier
	// (upstream storage_root_dir): objects the master moves out of this
	// client's segment are kept there as checksummed files and staged
	// back into the segment when read (tier.go). "" = no disk tier.
	// Needs GlobalSegmentSize > 0 and a master with enable_offload; the
	// directory's object files are deleted at start and at Close.
	StorageRootDir string
	// StorageQuota is the disk tier's size limit in bytes, file headers
	// included (upstream quota_bytes); least recently used files are
	// evicted beyond it. 0 = 90% of the free space of StorageRootDir's
	// filesystem.
	StorageQuota uint64
	// Logf, if set, receives one line (no trailing newline) whenever the
	// heartbeat's view of the master changes: the master is lost
	// ("lost the master: cannot reach master ADDR: connection refused",
	// MasterError's wording), reachable again, asked for a remount and got
	// it, or a remount failed (once per outage). nil = silent. Called from
	// the heartbeat goroutine; it must not block for long. Ours: upstream
	// logs these through glog.
	Logf func(format string, args ...any)
}

// Client is a pool client. Create with New.
type Client struct {
	cfg     Config
	id      string
	conn    *grpc.ClientConn
	rpc     pb.MasterClient
	sess    *session // put/get calls multiplexed on one stream (session.go)
	engine  *transfer.Engine
	segment *memory.Region // contributed DRAM, or nil
	segID   string
	local   *memory.Region // scratch buffer, or nil
	stop    chan struct{}
	done    chan struct{}

	disk       *disk.Store        // disk tier, or nil
	tierCancel context.CancelFunc // stops tierLoop
	tierDone   chan struct{}      // closed when tierLoop returns

	resv  resvPool       // reservations held (reserve.go)
	seals sealQueue      // precommitted writes' PutEnds to send (reserve.go)
	bg    sync.WaitGroup // reservation requests running in the background
	// staged counts the scratch ranges of the local buffer in use (Put,
	// Get and the copying batch calls hold one while they run): Close
	// waits for them before it closes the engine and unmaps the buffer.
	staged sync.WaitGroup

	mu struct {
		sync.Mutex
		scratch *alloc.Allocator // over local
		closed  bool
	}
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// New connects to the master, starts a transfer engine, maps and mounts the
// global segment, maps the local buffer and opens the disk tier. Errors:
// INVALID_PARAMS for a bad config (a storage_root_dir without a segment, or
// one that cannot be opened or is in use); UNABLE_OFFLOAD for a disk tier
// when the master runs without enable_offload; RPC_FAIL when the master
// cannot be reached (the first heartbeat is sent synchronously); the
// engine's or the master's error otherwise; nothing is left running on
// error, and a segment already mounted is unmounted again.
func New(ctx context.Context, cfg Config) (c *Client, err error) {
	switch {
	case cfg.MasterAddr == "":
		return nil, store.Errorf(store.InvalidParams, "no master address")
	case cfg.Metadata == nil:
		return nil, store.Errorf(store.InvalidParams, "no metadata store")
	case cfg.Transport == nil:
		return nil, store.Errorf(store.InvalidParams, "no transport")
	case !cfg.SegmentKind.Valid():
		return nil, store.Errorf(store.InvalidParams, "undefined segment kind %d", cfg.SegmentKind)
	}
	if cfg.LocalHostname == "" {
		h, _ := os.Hostname()
		cfg.LocalHostname = h + "-" + randomID()
	}
	if cfg.PutReservations == 0 {
		cfg.PutReservations = 2
	}
	if cfg.ReplicaNum <= 0 {
		cfg.ReplicaNum = 1
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = time.Second
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 30 * time.Second
	}
	c = &Client{cfg: cfg, id: cfg.LocalHostname + "/" + randomID(), stop: make(chan struct{}), done: make(chan struct{})}
	started := c // c is nil by the time an error return runs the defer
	mounting := false
	defer func() {
		if err != nil {
			if mounting {
				// A client that fails to start must not leave its
				// segment listed: the master would place replicas on
				// memory that is about to be unmapped.
				started.unmountQuietly()
			}
			started.teardown()
		}
	}()
	if c.conn, err = c.dialMaster(); err != nil {
		return nil, err
	}
	c.rpc = pb.NewMasterClient(c.conn)
	_, viaEtcd := etcdEndpoints(cfg.MasterAddr)
	framedAddr := cfg.MasterAddr
	if cfg.NoFramedSession {
		framedAddr = ""
	}
	c.sess = newSession(c.conn, c.rpc, viaEtcd, framedAddr, cfg.TLS, cfg.Logf)
	if _, err := c.ping(ctx); err != nil {
		return nil, err
	}
	c.engine, err = transfer.New(ctx, transfer.Config{Name: cfg.LocalHostname, Metadata: cfg.Metadata, Transport: cfg.Transport, Local: cfg.Local})
	if err != nil {
		return nil, err
	}
	if cfg.LocalBufferSize > 0 {
		if c.local, err = memory.Map(int(cfg.LocalBufferSize)); err != nil {
			return nil, err
		}
		if err = c.engine.RegisterLocalMemory(ctx, c.local.Bytes(), "cpu:0", false); err != nil {
			return nil, err
		}
		if c.mu.scratch, err = alloc.New(cfg.LocalBufferSize); err != nil {
			return nil, err
		}
	}
	if cfg.GlobalSegmentSize > 0 {
		if c.segment, err = memory.MapShared(int(cfg.GlobalSegmentSize), "mooncake-segment"); err != nil {
			return nil, err
		}
		if err = c.engine.RegisterRegion(ctx, c.segment, "cpu:0", true); err != nil {
			return nil, err
		}
		// Allocate and map every page of the segment now, in the
		// background, rather than on the first write into each 4 KiB:
		// first touch of a memory file page runs at 1-2 GB/s (allocation
		// and zeroing), so a large put into a fresh segment ran at a tenth
		// of copy speed. Best effort (a failure is logged through
		// Config.Logf: the segment then faults in on first use); it stops
		// when the segment is closed.
		if cfg.PrefaultSegment {
			seg, size := c.segment, cfg.GlobalSegmentSize
			go func() {
				if err := seg.Prefault(); err != nil {
					c.logf("prefault of the %d-byte segment stopped, the rest is allocated on first write: %v", size, err)
				}
			}()
		}
		c.segID = cfg.LocalHostname + "/" + randomID()
	}
	// Mount the segment, or, for a pure client, register with no
	// segments: the master asks a client to remount until it has.
	mounting = c.segment != nil // the mount may land even if its answer is lost
	if err = c.remount(ctx); err != nil {
		return nil, err
	}
	if cfg.StorageRootDir != "" {
		if err = c.openTier(ctx); err != nil {
			return nil, err
		}
		var tctx context.Context
		tctx, c.tierCancel = context.WithCancel(context.Background())
		c.tierDone = make(chan struct{})
		go c.tierLoop(tctx)
	}
	go c.heartbeat()
	return c, nil
}

// ID is the client id sent with every mutating call.
func (c *Client) ID() string { return c.id }

// Engine is the client's transfer engine (to register buffers or move bytes
// outside the pool).
func (c *Client) Engine() *transfer.Engine { return c.engine }

func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RPCTimeout)
}

// rpcErr is a failed master call as a pool error: RPC_TIMEOUT or
// RPC_FAIL, naming what was called and keeping err (the gRPC status) as
// the cause, for Unreachable.
func rpcErr(what string, err error) error {
	code := store.RPCFail
	if errors.Is(err, context.DeadlineExceeded) {
		code = store.RPCTimeout
	}
	return &store.Error{Code: code, Msg: what + ": " + err.Error(), Cause: err}
}

func statusErr(s *pb.Status) error {
	if s.GetCode() == 0 {
		return nil
	}
	return &store.Error{Code: store.ErrorCode(s.Code), Msg: s.Message}
}

// remount mounts all of the client's segments (none for a pure client) at
// the master, idempotently (upstream ReMountSegment): a segment the master
// already has is left as it is. Once it succeeds the master stops asking
// this client to remount.
func (c *Client) remount(ctx context.Context) error {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	req := &pb.ReMountSegmentRequest{ClientId: c.id}
	if c.segment != nil {
		req.Segments = []*pb.Segment{{
			Id: c.segID, Name: c.cfg.LocalHostname, Base: c.segment.Addr(), Size: uint64(c.segment.Len()), Protocol: c.cfg.Transport.Protocol(),
			Kind: pb.SegmentKind(c.cfg.SegmentKind)}}
	}
	st, err := c.rpc.ReMountSegment(ctx, req)
	if err != nil {
		return rpcErr("mount segment", err)
	}
	return statusErr(st)
}

func (c *Client) ping(ctx context.Context) (bool, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.Ping(ctx, &pb.PingRequest{ClientId: c.id})
	if err != nil {
		return false, rpcErr("ping master "+c.cfg.MasterAddr, err)
	}
	return r.NeedRemount, statusErr(r.Status)
}

// heartbeat pings every PingInterval and remounts when the master asks
// (upstream NEED_REMOUNT after a master restart or a missed TTL). A
// remount that fails is tried again at the next ping: the master keeps
// asking until one succeeds.
func (c *Client) heartbeat() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	tierLost := false      // the segment was remounted, its disk tier not yet
	lost := false          // the last ping failed (logged once per outage)
	remountFailed := false // a remount failed since the last one that worked (logged once)
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			need, err := c.ping(context.Background())
			if err != nil {
				if !lost {
					c.logf("lost the master: %s (retrying every %v)", MasterError(c.cfg.MasterAddr, err), c.cfg.PingInterval)
				}
				lost = true
				continue
			}
			if lost && !need {
				c.logf("master %s is reachable again; it still has this client's segments", c.cfg.MasterAddr)
			}
			lost = false
			if need {
				// The master restarted (or dropped us): the embedded HTTP
				// metadata server may have lost our descriptor too, so
				// publish it again before remounting (upstream #2246),
				// and remount only once it is published, so that no
				// writer is sent to a segment it cannot reach.
				rctx, cancel := c.rpcCtx(context.Background())
				err := c.engine.Republish(rctx)
				cancel()
				if err == nil {
					err = c.remount(context.Background())
				}
				if err != nil {
					if !remountFailed {
						c.logf("master %s asked for a remount, which failed (retrying every %v): %s", c.cfg.MasterAddr, c.cfg.PingInterval, MasterError(c.cfg.MasterAddr, err))
					}
					remountFailed = true
					continue
				}
				remountFailed = false
				c.logf("remounted at master %s (it restarted or dropped this client): %s", c.cfg.MasterAddr, c.mountedText())
				if c.disk != nil {
					// The master forgot our disk replicas with the
					// segment: the files are orphans.
					_ = c.disk.Clear()
					tierLost = true
				}
			}
			if tierLost && c.mountTier(context.Background(), c.disk.Capacity()) == nil {
				tierLost = false
				c.logf("disk tier remounted at master %s (%d bytes; its old files were dropped)", c.cfg.MasterAddr, c.disk.Capacity())
			}
		}
	}
}

// logf calls Config.Logf, if set.
func (c *Client) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// mountedText describes what a remount mounted, for the log.
func (c *Client) mountedText() string {
	if c.segment == nil {
		return "no segment (a pure client)"
	}
	return fmt.Sprintf("segment %s, %d bytes", c.segID, c.segment.Len())
}

// Close unmounts the contributed segment (its objects vanish from the
// pool), stops the heartbeat and releases everything. Calls that copy
// through the local buffer (Put, Get, the copying batch calls) still
// running finish first (within their RPC and transfer timeouts); such
// calls made after Close began fail with ILLEGAL_CLIENT. Errors: the
// unmount RPC's error (teardown still completes); transfer.ErrClosed for a
// second Close.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return transfer.ErrClosed
	}
	c.mu.closed = true
	c.mu.Unlock()
	c.staged.Wait() // calls staging through the local buffer finish first
	c.flushSeals()
	c.bg.Wait()
	c.releaseReservations()
	close(c.stop)
	<-c.done
	if c.tierCancel != nil {
		c.tierCancel()
		<-c.tierDone
	}
	var err error
	if c.segment != nil && c.rpc != nil {
		ctx, cancel := c.rpcCtx(context.Background())
		st, rerr := c.rpc.UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: c.segID})
		cancel()
		if rerr != nil {
			err = rpcErr("unmount segment", rerr)
		} else {
			err = statusErr(st)
		}
	}
	c.teardown()
	return err
}

// cleanupTimeout bounds the unmount a failed New sends: a master that
// does not answer drops the segment with the client's TTL anyway.
const cleanupTimeout = 5 * time.Second

// unmountQuietly unmounts the global segment, ignoring the answer (the
// segment may not be mounted at all): for a New that failed after it tried
// to mount.
func (c *Client) unmountQuietly() {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.RPCTimeout, cleanupTimeout))
	defer cancel()
	_, _ = c.rpc.UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: c.segID})
}

func (c *Client) teardown() {
	if c.tierCancel != nil {
		c.tierCancel()
		<-c.tierDone
	}
	if c.engine != nil {
		c.engine.Close()
	}
	if c.disk != nil {
		c.disk.Close()
	}
	if c.segment != nil {
		c.segment.Close()
	}
	if c.local != nil {
		c.local.Close()
	}
	if c.sess != nil {
		c.sess.close()
	}
	if c.conn != nil {
		c.conn.Close()
	}
}

// RegisterBuffer registers caller memory for zero-copy PutFrom/GetInto. buf
// must be off the Go heap (package memory, or foreign memory) and stay valid
// until UnregisterBuffer. Errors: the engine's (ErrAddressOverlapped, ...).
// Mirrors upstream register_buffer.
func (c *Client) RegisterBuffer(ctx context.Context, buf []byte) error {
	return c.engine.RegisterLocalMemory(ctx, buf, "cpu:0", false)
}

// UnregisterBuffer undoes RegisterBuffer for the buffer starting at buf[0].
func (c *Client) UnregisterBuffer(ctx context.Context, buf []byte) error {
	return c.engine.UnregisterLocalMemory(ctx, memory.AddrOf(buf))
}
