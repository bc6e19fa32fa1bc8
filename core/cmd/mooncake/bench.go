package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
	"github.com/mooncake-go/mooncake/core/transfer/transferbench"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks: transfer engine, memcpy baseline, store"}
	c.AddCommand(benchTransferCmd(), benchMemcpyCmd(), benchStoreCmd(), benchP2PCmd())
	return c
}

// newTransport builds the transport named by --protocol.
func newTransport(protocol, bind string) (transfer.Transport, error) {
	switch protocol {
	case "tcp":
		return tcp.New(tcp.Config{BindAddr: bind}), nil
	case "shm":
		return shm.New(shm.Config{}), nil
	}
	return nil, fmt.Errorf("unsupported: protocol %q (built: tcp, shm)", protocol)
}

func benchTransferCmd() *cobra.Command {
	var mode, protocol, op, blockSize, metaURL, name, segment, bind, span string
	var batch, threads int
	var duration time.Duration
	var jsonOut bool
	c := &cobra.Command{
		Use:   "transfer",
		Short: "Transfer engine throughput (upstream transfer_engine_bench flags); --mode loopback runs target and initiator engines in this process over real sockets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := positiveSize("bench transfer", "--block_size", blockSize, "64KiB")
			if err != nil {
				return err
			}
			var opcode transfer.Opcode
			switch op {
			case "read":
				opcode = transfer.Read
			case "write":
				opcode = transfer.Write
			default:
				return usageOf("bench transfer", "--operation %q: want read or write", op)
			}
			cfg := transferbench.Config{Op: opcode, BlockSize: int(bs), BatchSize: batch, Threads: threads, Duration: duration}
			if batch <= 0 || threads <= 0 || duration <= 0 {
				return usageOf("bench transfer", "--batch_size, --threads and --duration must be > 0")
			}
			if span != "" {
				sp, err := geometry.ParseSize(span)
				if err != nil || sp < 0 {
					return usageOf("bench transfer", "--target_span %q: want a size such as 1GiB", span)
				}
				cfg.TargetSpan = int(sp)
			}
			if err := transferbench.CheckSize(cfg); err != nil {
				return usageOf("bench transfer", "%v", err)
			}
			size := transferbench.BufferSize(cfg)
			if cfg.TargetSpan > 0 && cfg.TargetSpan < size {
				return usageOf("bench transfer", "--target_span %s is smaller than block_size x batch_size x threads (%d bytes): want at least that, or 0 for the same offsets every batch", span, size)
			}
			targetSize := max(size, cfg.TargetSpan)
			if avail := availableMemory(); avail > 0 && int64(targetSize) > avail/4 {
				what := fmt.Sprintf("block_size x batch_size x threads = %s per engine", geometry.FormatSize(int64(size)))
				if cfg.TargetSpan > size {
					what = fmt.Sprintf("--target_span %s", geometry.FormatSize(int64(cfg.TargetSpan)))
				}
				return usageOf("bench transfer", "%s exceeds a quarter of the available memory (%s)", what, geometry.FormatSize(avail))
			}
			switch protocol {
			case "tcp", "shm", "socket":
			default:
				return usageOf("bench transfer", "--protocol %q: want tcp, shm or socket", protocol)
			}
			switch mode {
			case "initiator", "target", "loopback":
			default:
				return usageOf("bench transfer", "--mode %q: want initiator, target or loopback", mode)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if protocol == "socket" {
				if mode != "loopback" {
					return usageOf("bench transfer", "--protocol socket runs in --mode loopback only (got --mode %s)", mode)
				}
				if opcode != transfer.Write {
					return usageOf("bench transfer", "--protocol socket measures --operation write only")
				}
				res, err := transferbench.Socket(ctx, cfg)
				if err != nil {
					return &exitError{1, "mooncake bench transfer: " + err.Error()}
				}
				return printTransfer(cmd, res, jsonOut)
			}

			var meta metadata.Store
			switch {
			case mode == "loopback":
				meta = memmeta.New()
			case metaURL == "":
				return usageOf("bench transfer", "--mode %s needs --metadata_server http://host:port/metadata", mode)
			default:
				if meta, err = httpmeta.NewClient(metaURL); err != nil {
					return usageOf("bench transfer", "--metadata_server: %v", err)
				}
			}
			// mkEngine starts an engine named name with an n-byte registered buffer.
			mkEngine := func(name string, n int) (*transfer.Engine, *memory.Region, error) {
				tr, err := newTransport(protocol, bind)
				if err != nil {
					return nil, nil, err
				}
				e, err := transfer.New(ctx, transfer.Config{Name: name, Metadata: meta, Transport: tr})
				if err != nil {
					return nil, nil, err
				}
				r, err := memory.MapShared(n, name)
				if err != nil {
					e.Close()
					return nil, nil, err
				}
				// Faulted in before the run, as the store's pool segments
				// are (a --target_span run would otherwise time first-touch
				// page faults for its first pass over the span).
				if err := r.Prefault(); err != nil && !errors.Is(err, memory.ErrPrefaultUnsupported) {
					e.Close()
					r.Close()
					return nil, nil, err
				}
				if err := e.RegisterRegion(ctx, r, "cpu:0", true); err != nil {
					e.Close()
					r.Close()
					return nil, nil, err
				}
				return e, r, nil
			}
			fail := func(err error) error { return &exitError{1, "mooncake bench transfer: " + err.Error()} }
			if mode == "target" { // mode was checked above
				e, r, err := mkEngine(name, targetSize)
				if err != nil {
					return fail(err)
				}
				defer r.Close()
				defer e.Close()
				fmt.Fprintf(os.Stderr, "bench target %q: %s registered at %#x; waiting (Ctrl-C to stop)\n", name, geometry.FormatSize(int64(targetSize)), r.Addr())
				<-ctx.Done()
				return nil
			}
			if mode == "loopback" {
				te, tr, err := mkEngine("bench-target", targetSize)
				if err != nil {
					return fail(err)
				}
				defer tr.Close()
				defer te.Close()
				segment = "bench-target"
			} else if segment == "" {
				return usageOf("bench transfer", "--mode initiator needs --segment_id (the target's name)")
			}
			e, r, err := mkEngine(name, size)
			if err != nil {
				return fail(err)
			}
			defer r.Close()
			defer e.Close()
			desc, err := metadata.GetSegment(ctx, meta, "", segment)
			if err != nil {
				return fail(err)
			}
			if len(desc.Buffers) == 0 || desc.Buffers[0].Length < uint64(targetSize) {
				return fail(fmt.Errorf("segment %q has no registered buffer of %d bytes", segment, targetSize))
			}
			id, err := e.OpenSegment(ctx, segment)
			if err != nil {
				return fail(err)
			}
			res, err := transferbench.Run(ctx, e, id, r, desc.Buffers[0].Addr, cfg)
			res.Protocol = protocol
			if err != nil {
				return fail(err)
			}
			return printTransfer(cmd, res, jsonOut)
		},
	}
	f := c.Flags()
	f.StringVar(&mode, "mode", "loopback", "initiator | target | loopback (both in this process)")
	f.StringVar(&protocol, "protocol", "tcp", "transport: tcp | shm (same host) | socket (no engine: one plain loopback TCP connection per thread, the kernel's ceiling for tcp writes; loopback mode, write only)")
	f.StringVar(&op, "operation", "write", "read | write")
	f.StringVar(&blockSize, "block_size", "64KiB", "bytes per request")
	f.IntVar(&batch, "batch_size", 128, "requests per batch")
	f.IntVar(&threads, "threads", 2, "concurrent submitting threads")
	f.DurationVar(&duration, "duration", 5*time.Second, "measured duration")
	f.StringVar(&metaURL, "metadata_server", "", "HTTP metadata URL (initiator/target modes)")
	f.StringVar(&name, "local_server_name", "bench-initiator", "this engine's segment name")
	f.StringVar(&segment, "segment_id", "", "target segment name (initiator mode)")
	f.StringVar(&bind, "bind", "127.0.0.1:0", "data-plane listen address")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object")
	f.StringVar(&span, "target_span", "", "bytes of the target buffer the requests move over: each batch goes to the next offsets, wrapping (default: the same offsets every batch, as upstream; give a pool's size to measure targets that are not in the CPU cache, as a store's puts are)")
	return c
}

// printTransfer prints a transfer benchmark's result: one JSON object, or
// one line of GB/s and batch latencies (ms).
func printTransfer(cmd *cobra.Command, res transferbench.Result, jsonOut bool) error {
	if jsonOut {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s block %s batch %d threads %d: %.3f GB/s, batch latency p50 %.3f ms p99 %.3f ms, %.3f CPU-s/GB (%d batches in %.1f s)\n",
		res.Protocol, res.Operation, geometry.FormatSize(int64(res.BlockSize)), res.BatchSize, res.Threads, res.GBps, res.BatchP50, res.BatchP99, res.CPUSPerGB, res.Batches, res.ElapsedS)
	return nil
}

func benchMemcpyCmd() *cobra.Command {
	var blockSize, total string
	var duration time.Duration
	var jsonOut bool
	c := &cobra.Command{
		Use:   "memcpy",
		Short: "Single-thread memcpy baseline between off-heap buffers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err1 := geometry.ParseSize(blockSize)
			tot, err2 := geometry.ParseSize(total)
			if err1 != nil || err2 != nil {
				return usageOf("bench memcpy", "bad --block_size %q or --total %q", blockSize, total)
			}
			gbps, err := transferbench.Memcpy(int(bs), int(tot), duration)
			if err != nil {
				return &exitError{1, "mooncake bench memcpy: " + err.Error()}
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"block_size": bs, "gbps": gbps})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "memcpy block %s: %.3f GB/s (single thread)\n", geometry.FormatSize(bs), gbps)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&blockSize, "block_size", "1MiB", "bytes per copy")
	f.StringVar(&total, "total", "256MiB", "bytes of each buffer (larger than the caches)")
	f.DurationVar(&duration, "duration", 3*time.Second, "measured duration")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object")
	return c
}

func usageOf(cmd, format string, args ...any) error {
	return &exitError{2, "mooncake " + cmd + ": " + fmt.Sprintf(format, args...)}
}

// positiveSize parses value, the size flag flag of cmd (geometry.ParseSize:
// a number with an optional binary unit), and returns its bytes, or a
// usage error (exit 2) naming the flag, an example such as 1MiB, and the
// parser's reason when it has one.
func positiveSize(cmd, flag, value, example string) (int64, error) {
	n, err := geometry.ParseSize(value)
	switch {
	case err != nil:
		return 0, usageOf(cmd, "%s %q: want a positive size such as %s: %v", flag, value, example, err)
	case n <= 0:
		return 0, usageOf(cmd, "%s %q: want a positive size such as %s", flag, value, example)
	}
	return n, nil
}
