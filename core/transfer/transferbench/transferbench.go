// Package transferbench measures the transfer engine the way upstream's
// transfer_engine_bench does: T threads each loop "allocate a batch of B
// requests of S bytes at offsets S*(i*T+t), submit, wait, free" for a fixed
// duration; throughput = bytes moved / elapsed. It also measures a
// single-thread memcpy baseline for ratios.
//
// Concurrency: Run starts its own goroutines and returns when they end.
package transferbench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Config is one benchmark run (flag names follow upstream's bench).
type Config struct {
	Op        transfer.Opcode
	BlockSize int           // bytes per request (--block_size, upstream default 65536)
	BatchSize int           // requests per batch (--batch_size, 128)
	Threads   int           // concurrent submitters (--threads)
	Duration  time.Duration // measured time (--duration)
	Warmup    time.Duration // unmeasured time before; default 500 ms
	// TargetSpan, when larger than BufferSize, is the bytes of the target
	// buffer the batches move over: each batch of a thread targets the
	// next BufferSize bytes, wrapping at TargetSpan, so the target is not
	// the same few cache-hot blocks every time (a store's puts spread over
	// its pool). 0 = the same offsets every batch, as upstream. Ours.
	TargetSpan int
}

// Result is a run's outcome. GBps uses 1e9 bytes.
type Result struct {
	Protocol  string  `json:"protocol"`
	Operation string  `json:"operation"`
	BlockSize int     `json:"block_size"`
	BatchSize int     `json:"batch_size"`
	Threads   int     `json:"threads"`
	Bytes     int64   `json:"bytes"`
	Batches   int64   `json:"batches"`
	ElapsedS  float64 `json:"elapsed_s"`
	GBps      float64 `json:"gbps"`
	BatchP50  float64 `json:"batch_p50_ms"`
	BatchP99  float64 `json:"batch_p99_ms"`
	// CPUSPerGB is this process's CPU time (user + system, all threads)
	// in seconds per 1e9 bytes moved in the measured window: both ends
	// when they run in this process (loopback), the initiator's only
	// otherwise. It does not depend on the CPU being free, so it compares
	// runs on a busy machine better than GB/s does. Ours.
	CPUSPerGB float64 `json:"cpu_s_per_gb"`
}

// ProcessCPU is this process's user and system CPU time so far (all
// threads; getrusage RUSAGE_SELF), 0 where that call fails.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUPerGB is cpu seconds per 1e9 of bytes (0 without bytes).
func CPUPerGB(cpu time.Duration, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return cpu.Seconds() / (float64(bytes) / 1e9)
}

// BufferSize is the bytes each side registers for cfg (block x batch x
// threads); check first with CheckSize, which refuses a product that
// overflows.
func BufferSize(cfg Config) int { return cfg.BlockSize * cfg.BatchSize * cfg.Threads }

// maxBuffer bounds BufferSize and TargetSpan, in bytes (1 PiB: far above
// any memory here, far below overflow).
const maxBuffer = 1 << 50

// CheckSize refuses a config whose sizes are not all positive, or whose
// block x batch x threads or target span exceeds 1 PiB (or overflows).
func CheckSize(cfg Config) error {
	if cfg.BlockSize <= 0 || cfg.BatchSize <= 0 || cfg.Threads <= 0 || cfg.Duration <= 0 || cfg.TargetSpan < 0 {
		return fmt.Errorf("transferbench: block size, batch size, threads and duration must be > 0 (got %d, %d, %d, %v), the target span >= 0 (got %d)", cfg.BlockSize, cfg.BatchSize, cfg.Threads, cfg.Duration, cfg.TargetSpan)
	}
	if cfg.BlockSize > maxBuffer/cfg.BatchSize || cfg.BlockSize*cfg.BatchSize > maxBuffer/cfg.Threads || cfg.TargetSpan > maxBuffer {
		return fmt.Errorf("transferbench: block size %d x batch size %d x threads %d (or target span %d) exceeds %d bytes", cfg.BlockSize, cfg.BatchSize, cfg.Threads, cfg.TargetSpan, maxBuffer)
	}
	return nil
}

// Run drives the initiator engine e against segment target whose buffer
// starts at remoteBase; local is e's registered buffer (BufferSize bytes).
// Errors: a bad config; the first failed request (as upstream, any failure
// aborts the run).
func Run(ctx context.Context, e *transfer.Engine, target transfer.SegmentID, local *memory.Region, remoteBase uint64, cfg Config) (Result, error) {
	if err := CheckSize(cfg); err != nil {
		return Result{}, err
	}
	if local.Len() < BufferSize(cfg) {
		return Result{}, fmt.Errorf("transferbench: local buffer %d bytes < %d needed", local.Len(), BufferSize(cfg))
	}
	return drive(ctx, cfg, func(t int) (func(window int) error, func(), error) {
		reqs := make([]transfer.Request, cfg.BatchSize)
		offs := make([]uint64, cfg.BatchSize) // each request's offset in the first window
		for i := range reqs {
			offs[i] = uint64(cfg.BlockSize) * uint64(i*cfg.Threads+t)
			reqs[i] = transfer.Request{Op: cfg.Op, Source: local.Addr() + offs[i], Target: target, TargetOffset: remoteBase + offs[i], Length: uint64(cfg.BlockSize)}
		}
		return func(window int) error {
			for i := range reqs {
				reqs[i].TargetOffset = remoteBase + uint64(window*BufferSize(cfg)) + offs[i]
			}
			return e.TransferSync(ctx, reqs)
		}, func() {}, nil
	})
}

// drive runs cfg.Threads threads for cfg.Warmup + cfg.Duration; thread t
// gets its batch function (and what to release after) from start(t) and
// calls it with the window index of each batch (0, 1, ... wrapping at
// TargetSpan / BufferSize windows; always 0 without a span). Batches that
// began after the warm-up count. Errors: the first thread's start or batch
// error (the run stops there), wrapped as "transferbench: ..."; no batch
// began in the measured window; ctx's.
func drive(ctx context.Context, cfg Config, start func(t int) (func(window int) error, func(), error)) (Result, error) {
	if cfg.Warmup == 0 {
		cfg.Warmup = 500 * time.Millisecond
	}
	type tstat struct {
		batches int64
		lat     []time.Duration
		err     error
	}
	stats := make([]tstat, cfg.Threads)
	var wg sync.WaitGroup
	measureFrom := time.Now().Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)
	// The CPU time at the start of the measured window, read by the first
	// batch that begins after the warm-up (the window's CPU then includes
	// the tails of batches begun in the warm-up, and not those of its own
	// last batches); unread when no batch began after it.
	var (
		cpuOnce sync.Once
		cpu0    time.Duration
		cpuRead bool
	)
	windows := max(cfg.TargetSpan/BufferSize(cfg), 1)
	for t := range cfg.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[t]
			batch, done, err := start(t)
			if err != nil {
				st.err = err
				return
			}
			defer done()
			for window := 0; ctx.Err() == nil; window = (window + 1) % windows {
				t0 := time.Now()
				if t0.After(end) {
					return
				}
				if t0.After(measureFrom) {
					cpuOnce.Do(func() { cpu0, cpuRead = ProcessCPU(), true })
				}
				if err := batch(window); err != nil {
					st.err = err
					return
				}
				if t0.After(measureFrom) {
					st.batches++
					st.lat = append(st.lat, time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	cpu1 := ProcessCPU()
	r := Result{Operation: cfg.Op.String(), BlockSize: cfg.BlockSize, BatchSize: cfg.BatchSize, Threads: cfg.Threads, ElapsedS: elapsed.Seconds()}
	var lat []time.Duration
	for _, s := range stats {
		if s.err != nil && ctx.Err() == nil {
			return r, fmt.Errorf("transferbench: %w", s.err)
		}
		r.Batches += s.batches
		lat = append(lat, s.lat...)
	}
	r.Bytes = r.Batches * int64(cfg.BatchSize) * int64(cfg.BlockSize)
	r.GBps = float64(r.Bytes) / elapsed.Seconds() / 1e9
	if cpuRead { // wg.Wait orders the read before this one
		r.CPUSPerGB = CPUPerGB(cpu1-cpu0, r.Bytes)
	}
	r.BatchP50, r.BatchP99 = pct(lat, 0.5), pct(lat, 0.99)
	if r.Batches == 0 && ctx.Err() == nil {
		return r, fmt.Errorf("transferbench: no batch began in the measured %v after the %v warm-up (the run took %.1f s): nothing measured; raise the duration or lower the batch size", cfg.Duration, cfg.Warmup, elapsed.Seconds()+cfg.Warmup.Seconds())
	}
	return r, ctx.Err()
}

func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := min(max(int(math.Ceil(p*float64(len(ds))))-1, 0), len(ds)-1)
	return float64(ds[i]) / float64(time.Millisecond)
}

// Memcpy measures single-thread copy throughput of blockSize-byte blocks
// between two off-heap buffers of total bytes for d, in GB/s (1e9).
func Memcpy(blockSize, total int, d time.Duration) (float64, error) {
	if blockSize <= 0 || total < blockSize || d <= 0 {
		return 0, fmt.Errorf("transferbench: memcpy block %d, total %d, duration %v", blockSize, total, d)
	}
	src, err := memory.Map(total)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := memory.Map(total)
	if err != nil {
		return 0, err
	}
	defer dst.Close()
	s, t := src.Bytes(), dst.Bytes()
	for i := range s { // fault the pages in before timing
		s[i] = byte(i)
	}
	copy(t, s)
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		for off := 0; off+blockSize <= total; off += blockSize {
			copy(t[off:off+blockSize], s[off:off+blockSize])
			n += int64(blockSize)
		}
	}
	return float64(n) / time.Since(start).Seconds() / 1e9, nil
}

// Socket measures the ceiling the kernel's loopback TCP gives the pattern
// Run drives, with no transfer engine: each of cfg.Threads threads owns one
// TCP connection to a server in this process and loops "send BatchSize
// requests (an 8-byte little-endian target offset, then BlockSize bytes, in
// one vectored write) while reading their BatchSize 8-byte
// acknowledgements"; the
// server reads each payload straight into its target buffer (BufferSize or
// TargetSpan bytes, off the Go heap, faulted in before the run) at that
// offset, then acknowledges.
// Offsets follow Run's (windows of TargetSpan as there). Only cfg.Op Write
// is measured. The result's Protocol is "socket". Errors: a bad config,
// Write not asked for, a socket error. Ours: a baseline for `mooncake bench
// transfer` over tcp, so that its figure reads as a share of what the
// sockets themselves can do on this host.
func Socket(ctx context.Context, cfg Config) (Result, error) {
	if err := CheckSize(cfg); err != nil {
		return Result{}, err
	}
	if cfg.Op != transfer.Write {
		return Result{}, fmt.Errorf("unsupported: socket baseline of %s (it measures write only)", cfg.Op)
	}
	size := BufferSize(cfg)
	span := max(cfg.TargetSpan, size)
	target, err := memory.Map(span)
	if err != nil {
		return Result{}, err
	}
	defer target.Close()
	src, err := memory.Map(size)
	if err != nil {
		return Result{}, err
	}
	defer src.Close()
	for _, r := range []*memory.Region{target, src} { // as the engine bench's buffers are
		if err := r.Prefault(); err != nil && !errors.Is(err, memory.ErrPrefaultUnsupported) {
			return Result{}, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	// The accept loop adds each connection's server to served; served is
	// waited for only once the loop returned (after the listener closed),
	// so no Add races the Wait.
	var served sync.WaitGroup
	accepting := make(chan struct{})
	defer func() { ln.Close(); <-accepting; served.Wait() }()
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			shrink(c)
			go func() {
				defer served.Done()
				defer c.Close()
				serveSocket(c, target.Bytes(), cfg.BlockSize)
			}()
		}
	}()

	r, err := drive(ctx, cfg, func(t int) (func(window int) error, func(), error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		shrink(c)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		hdrs := make([]byte, 8*cfg.BatchSize)
		offs := make([]uint64, cfg.BatchSize)
		bufs := make(net.Buffers, 0, 2*cfg.BatchSize)
		for i := range offs {
			offs[i] = uint64(cfg.BlockSize) * uint64(i*cfg.Threads+t)
		}
		// The connection's ack reader reads each batch's acknowledgements
		// while the batch is written: a large batch's acks would otherwise
		// fill both sockets' buffers while the server waits to send them.
		want, acked, ended := make(chan struct{}), make(chan error), make(chan struct{})
		go func() {
			defer close(ended)
			acks := make([]byte, 8*cfg.BatchSize)
			for range want {
				_, err := io.ReadFull(c, acks)
				acked <- err
				if err != nil {
					return
				}
			}
		}()
		batch := func(window int) error {
			bufs = bufs[:0]
			for i, off := range offs {
				binary.LittleEndian.PutUint64(hdrs[8*i:], uint64(window*size)+off)
				bufs = append(bufs, hdrs[8*i:8*i+8], src.Bytes()[off:off+uint64(cfg.BlockSize)])
			}
			want <- struct{}{}
			_, werr := bufs.WriteTo(c)
			if werr != nil {
				c.Close() // ends the ack reader's read too
			}
			if err := cmp.Or(werr, <-acked); err != nil {
				return fmt.Errorf("socket baseline: %w", err)
			}
			return nil
		}
		done := func() {
			close(want) // no batch runs now: the reader waits for the next
			stop()
			c.Close()
			<-ended
		}
		return batch, done, nil
	})
	r.Protocol = "socket"
	return r, err
}

// testSockBuf, when > 0, is the kernel buffer size (bytes, each
// direction) Socket's connections ask for: tests make it small so that a
// batch's acknowledgements exceed what the sockets hold.
var testSockBuf int

func shrink(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok && testSockBuf > 0 {
		_ = tc.SetReadBuffer(testSockBuf)
		_ = tc.SetWriteBuffer(testSockBuf)
	}
}

// serveSocket answers Socket's requests on c until it fails or closes: an
// 8-byte offset, then blockSize bytes read into target there, then an
// 8-byte acknowledgement. An offset whose block does not fit target ends
// the connection.
func serveSocket(c net.Conn, target []byte, blockSize int) {
	var hdr, ack [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		off := binary.LittleEndian.Uint64(hdr[:])
		if off > uint64(len(target)) || uint64(len(target))-off < uint64(blockSize) {
			return
		}
		if _, err := io.ReadFull(c, target[off:off+uint64(blockSize)]); err != nil {
			return
		}
		if _, err := c.Write(ack[:]); err != nil {
			return
		}
	}
}
