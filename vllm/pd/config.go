package pd

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// Sentinel errors of this package; match with errors.Is. Errors that a
// producer reports to a consumer cross the side channel as a code and a
// message and are rebuilt around the same sentinel on the consumer.
var (
	// ErrInvalidArgument: a bad Config, block id list or request (block id
	// 0, out of range, duplicated; empty transfer id; bad rank).
	ErrInvalidArgument = errors.New("pd: invalid argument")
	// ErrUnsupported: a feature this package does not provide (unequal TP
	// sizes between producer and consumer, a protocol other than tcp). Its
	// message starts with "unsupported:". It is transfer.ErrUnsupported.
	ErrUnsupported = transfer.ErrUnsupported
	// ErrShapeMismatch: producer and consumer regions differ in count or
	// block size, or the producer holds fewer blocks than the consumer
	// asked for.
	ErrShapeMismatch = errors.New("pd: kv region shape mismatch")
	// ErrDropped: the producer dropped the transfer (request aborted or
	// finished without a length cap), or it already finished (sent, failed
	// or expired) when the consumer asked.
	ErrDropped = errors.New("pd: transfer dropped by producer")
	// ErrTimeout: the consumer's RecvTimeout, or the producer's
	// AbortTimeout / the consumer's budget, passed.
	ErrTimeout = errors.New("pd: timed out")
	// ErrBootstrap: the bootstrap server could not be reached, refused a
	// registration (duplicate slot: HTTP 400, as upstream) or does not know
	// the engine.
	ErrBootstrap = errors.New("pd: bootstrap")
	// ErrUnreachable: the producer's side channel could not be reached or
	// broke before replying.
	ErrUnreachable = errors.New("pd: producer unreachable")
	// ErrTransfer: the transfer engine failed to write the blocks.
	ErrTransfer = errors.New("pd: transfer failed")
	// ErrClosed: the Producer or Consumer was closed.
	ErrClosed = errors.New("pd: closed")
)

// Defaults of Config.
const (
	// DefaultHost is the address peers use to reach a worker.
	DefaultHost = "127.0.0.1"
	// DefaultBootstrapPort is upstream's VLLM_MOONCAKE_BOOTSTRAP_PORT
	// default.
	DefaultBootstrapPort = 8998
	// DefaultAbortTimeout is upstream's VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT
	// default (480 s).
	DefaultAbortTimeout = 480 * time.Second
	// DefaultRecvTimeout bounds one receive on the consumer.
	DefaultRecvTimeout = 60 * time.Second
	// DefaultBootstrapTimeout bounds registering with / querying the
	// bootstrap server, retries included (upstream
	// VLLM_MOONCAKE_CONNECTOR_TIMEOUT, 30 s).
	DefaultBootstrapTimeout = 30 * time.Second
	// ReplyGrace is how long a consumer waits for the producer's reply
	// past its RecvTimeout: the producer stops starting writes when the
	// consumer's budget (sent with the request, minus a margin) ends and
	// then replies, so a reply within the grace means no more bytes will
	// land. See Consumer.
	ReplyGrace = 2 * time.Second
)

// Region is one KV cache region of a worker: NumBlocks blocks of BlockBytes
// bytes each, block b at byte offset b*BlockBytes. Every worker of a P/D
// pair registers its regions in the same order and with the same block
// size (vLLM: one region per layer, or per layer and K/V for K/V-first
// layouts, as upstream's register_kv_caches); the producer writes its
// region i into the consumer's region i.
//
// Host memory is given as Mem, a []byte view of the region that must stay
// valid and at the same address until Close (foreign memory such as a
// torch CPU tensor, or off-heap memory from package memory; never a Go
// heap slice, which may move). Only its first BlockBytes*NumBlocks bytes
// are registered. GPU memory is given as DeviceAddr and Device with Mem
// nil; it needs Config.CUDA and is registered with the transfer engine's
// RegisterDeviceMemory (the engine stages it through host bounce buffers
// on tcp).
type Region struct {
	// Mem is the region's host memory (nil for device memory).
	Mem []byte
	// DeviceAddr is the device virtual address of the region's first byte
	// when Mem is nil.
	DeviceAddr uint64
	// Device is the CUDA device ordinal of DeviceAddr.
	Device int
	// BlockBytes is the size of one block in bytes (> 0).
	BlockBytes uint64
	// NumBlocks is the number of blocks (> 0). Block 0 is vLLM's null
	// block: it is never read or written.
	NumBlocks uint64
}

// base is the address the transfer engine knows the region by.
func (r Region) base() uint64 {
	if r.Mem != nil {
		return addrOf(r.Mem)
	}
	return r.DeviceAddr
}

// size is the registered length in bytes (validated not to overflow).
func (r Region) size() uint64 { return r.BlockBytes * r.NumBlocks }

// Config configures a Producer or a Consumer (one per vLLM worker, i.e.
// per TP rank). Zero values take the documented defaults; Validate reports
// the rest.
type Config struct {
	// EngineID is this vLLM instance's engine_id (vLLM
	// KVTransferConfig.engine_id). Required. A consumer names the
	// producer's engine id in Recv; a producer rejects requests naming
	// another engine.
	EngineID string
	// DPRank is this instance's data-parallel rank (>= 0), the key of the
	// bootstrap server's table.
	DPRank int
	// TPRank is this worker's tensor-parallel rank, 0 <= TPRank < TPSize.
	TPRank int
	// TPSize is the tensor-parallel size; default 1. Producer and consumer
	// must have equal TP sizes (upstream before PR #36869); unequal sizes
	// fail with ErrUnsupported.
	TPSize int
	// Host is the address peers use to reach this worker (its transfer
	// engine, handshake and side-channel listeners bind to it); default
	// DefaultHost.
	Host string
	// Regions are the worker's KV cache regions, registered once at start
	// (remote-writable on a consumer). Required.
	Regions []Region
	// Protocol is the transfer engine transport; "" or "tcp" (the only
	// one wired here; others fail with ErrUnsupported). Upstream's
	// mooncake_protocol.
	Protocol string
	// BootstrapAddr (producer) is the "host:port" (or "http://host:port")
	// of the bootstrap HTTP server; default Host:DefaultBootstrapPort.
	// Unless ExternalBootstrap, the producer with DPRank 0 and TPRank 0
	// serves it there (upstream: the producer's global rank 0); port 0
	// picks a free port (see Producer.BootstrapAddr). Every producer rank
	// registers its side-channel address there.
	BootstrapAddr string
	// ExternalBootstrap (producer) means the bootstrap server at
	// BootstrapAddr is run by someone else (upstream
	// kv_connector_extra_config.bootstrap_server_address); no rank serves.
	ExternalBootstrap bool
	// AbortTimeout (producer) frees a transfer that was Ready but never
	// asked for, and bounds how long a consumer's request waits for Ready;
	// default DefaultAbortTimeout (upstream
	// VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT).
	AbortTimeout time.Duration
	// RecvTimeout (consumer) bounds one Recv from call to landed bytes;
	// default DefaultRecvTimeout. See Consumer for what happens at expiry.
	RecvTimeout time.Duration
	// BootstrapTimeout bounds registering (producer) and querying
	// (consumer; also bounded by RecvTimeout) the bootstrap server, retries
	// included; default DefaultBootstrapTimeout.
	BootstrapTimeout time.Duration
	// CUDA reaches device memory for regions given by DeviceAddr
	// (typically a *cuda.Runtime); nil: host regions only.
	CUDA transfer.DeviceRuntime
	// Logger receives failures and expiries (Warn) and lifecycle (Debug);
	// nil discards.
	Logger *slog.Logger
}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.TPSize == 0 {
		c.TPSize = 1
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Protocol == "" {
		c.Protocol = "tcp"
	}
	if c.BootstrapAddr == "" {
		c.BootstrapAddr = net.JoinHostPort(c.Host, strconv.Itoa(DefaultBootstrapPort))
	}
	if c.AbortTimeout <= 0 {
		c.AbortTimeout = DefaultAbortTimeout
	}
	if c.RecvTimeout <= 0 {
		c.RecvTimeout = DefaultRecvTimeout
	}
	if c.BootstrapTimeout <= 0 {
		c.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first invalid field (after defaults are applied by
// NewProducer / NewConsumer; Validate itself treats zero TPSize, Host and
// Protocol as their defaults). Errors wrap ErrInvalidArgument, or
// ErrUnsupported for a protocol other than tcp.
func (c *Config) Validate() error {
	d := c.withDefaults()
	switch {
	case d.EngineID == "":
		return fmt.Errorf("%w: config: EngineID is empty", ErrInvalidArgument)
	case d.DPRank < 0:
		return fmt.Errorf("%w: config: DPRank %d < 0", ErrInvalidArgument, d.DPRank)
	case d.TPSize < 1:
		return fmt.Errorf("%w: config: TPSize %d < 1", ErrInvalidArgument, d.TPSize)
	case d.TPRank < 0 || d.TPRank >= d.TPSize:
		return fmt.Errorf("%w: config: TPRank %d outside [0, %d)", ErrInvalidArgument, d.TPRank, d.TPSize)
	case d.Protocol != "tcp":
		return fmt.Errorf("%w: pd: protocol %q (only tcp is wired)", ErrUnsupported, d.Protocol)
	case len(d.Regions) == 0:
		return fmt.Errorf("%w: config: no KV regions", ErrInvalidArgument)
	}
	if ip := net.ParseIP(d.Host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: config: Host %q is not an address peers can reach (give this machine's IP)", ErrInvalidArgument, d.Host)
	}
	for i, r := range d.Regions {
		switch {
		case r.BlockBytes == 0 || r.NumBlocks == 0:
			return fmt.Errorf("%w: config: region %d has %d blocks of %d bytes", ErrInvalidArgument, i, r.NumBlocks, r.BlockBytes)
		case r.NumBlocks > math.MaxInt32 || r.BlockBytes > math.MaxUint64/r.NumBlocks || r.BlockBytes*r.NumBlocks > math.MaxInt64:
			return fmt.Errorf("%w: config: region %d: %d blocks of %d bytes overflows", ErrInvalidArgument, i, r.NumBlocks, r.BlockBytes)
		case r.Mem != nil && uint64(len(r.Mem)) < r.size():
			return fmt.Errorf("%w: config: region %d: Mem holds %d bytes, %d blocks of %d need %d", ErrInvalidArgument, i, len(r.Mem), r.NumBlocks, r.BlockBytes, r.size())
		case r.Mem == nil && r.DeviceAddr == 0:
			return fmt.Errorf("%w: config: region %d has neither Mem nor DeviceAddr", ErrInvalidArgument, i)
		case r.Mem == nil && d.CUDA == nil:
			return fmt.Errorf("%w: config: region %d is device memory (cuda:%d) but Config.CUDA is nil", ErrInvalidArgument, i, r.Device)
		}
	}
	return nil
}

// checkBlocks validates a block id list against regions: every id in
// [1, NumBlocks) of the smallest region, no duplicates. who names the side
// in the error.
func checkBlocks(who string, ids []int, numBlocks uint64) error {
	seen := make(map[int]struct{}, len(ids))
	for i, b := range ids {
		switch {
		case b == 0:
			return fmt.Errorf("%w: %s block id 0 at index %d: block 0 is vLLM's null block and is never transferred", ErrInvalidArgument, who, i)
		case b < 0 || uint64(b) >= numBlocks:
			return fmt.Errorf("%w: %s block id %d at index %d outside [1, %d)", ErrInvalidArgument, who, b, i, numBlocks)
		}
		if _, dup := seen[b]; dup {
			return fmt.Errorf("%w: %s block id %d appears twice", ErrInvalidArgument, who, b)
		}
		seen[b] = struct{}{}
	}
	return nil
}

// minBlocks is the smallest NumBlocks over regions.
func minBlocks(rs []Region) uint64 {
	m := uint64(math.MaxUint64)
	for _, r := range rs {
		m = min(m, r.NumBlocks)
	}
	return m
}
