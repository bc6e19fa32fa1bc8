package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/storebench"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// maxBenchNodes is the most storage nodes bench store starts in its own
// process (each holds a listener, a metadata entry and a segment's file).
const maxBenchNodes = 64

// openCPUProfile creates path for a Go CPU profile and returns start (begins
// profiling into it; its error is pprof's) and stop (ends profiling if it
// began and closes the file, removing it unless keep; later calls do
// nothing). The file is created before any pool starts, so a bad path is a
// usage error; profiling begins only when start is called (after the
// warmup) and stop is called as soon as the measured phases end: the
// profile holds those phases only. A run that fails leaves no file.
func openCPUProfile(path string) (start func() error, stop func(keep bool), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	started, stopped := false, false
	start = func() error {
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		started = true
		return nil
	}
	stop = func(keep bool) {
		if stopped {
			return
		}
		stopped = true
		if started {
			pprof.StopCPUProfile()
		}
		f.Close()
		if !keep {
			os.Remove(path)
		}
	}
	return start, stop, nil
}

func benchStoreCmd() *cobra.Command {
	var valueSize, segSize, protocol, masterAddr, metaURL, bind string
	var clients, nodes, ops int
	var duration, warmup time.Duration
	var fill, jsonOut, stages, serialCommit, grpcSession bool
	var cpuProfile string
	c := &cobra.Command{
		Use:   "store",
		Short: "Pool put/get throughput and latency with N concurrent clients (redis-benchmark style); by default on a pool started in this process",
		Long: `Measure the KV-cache pool: --clients workers, each with its own client,
put values of --value-size under distinct keys (zero-copy PutFrom from a
registered memfd buffer) for --duration (or --ops in all), then get them back
(GetInto, each worker checking what it reads). Prints ops/s, GB/s (1e9
bytes) and p50/p99 latency per phase.

Without --master the pool runs in this process: a master and --nodes storage
nodes of --segment-size each on 127.0.0.1. --protocol shm (the default)
lets the engine pick shared memory for same-host peers, as it does by default
on one host, with tcp for the rest; --protocol tcp uses tcp only. The warmup
fills the pool once (--warmup-fill) so the measured puts run in steady state,
evicting as a full cache does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			vs, err := positiveSize("bench store", "--value-size", valueSize, "1MiB")
			if err != nil {
				return err
			}
			seg, err := positiveSize("bench store", "--segment-size", segSize, "512MiB")
			if err != nil {
				return err
			}
			if protocol != "tcp" && protocol != "shm" {
				return usageOf("bench store", "--protocol %q: want shm (shm for same-host peers, else tcp) or tcp", protocol)
			}
			switch {
			case clients <= 0:
				return usageOf("bench store", "--clients %d: want at least 1", clients)
			case nodes <= 0 && masterAddr == "":
				return usageOf("bench store", "--nodes %d: want at least 1", nodes)
			case ops < 0:
				return usageOf("bench store", "--ops %d: want 0 (run for --duration) or more", ops)
			case ops == 0 && duration <= 0:
				return usageOf("bench store", "--duration %v: want a positive duration when --ops is 0", duration)
			case warmup < 0:
				return usageOf("bench store", "--warmup %v: want 0 (none) or a positive duration", warmup)
			}
			if vs < storebench.MinValueSize {
				return usageOf("bench store", "--value-size %s: want at least %d bytes (each value starts with a %d-byte header)", valueSize, storebench.MinValueSize, storebench.MinValueSize)
			}
			avail := availableMemory() // 0: unknown, not checked
			// Each client maps a source and a destination buffer of the value
			// size: refused beyond half the available memory (by division,
			// so that no product overflows).
			if avail > 0 && int64(clients) > avail/2/(2*vs) {
				return usageOf("bench store", "--clients %d x 2 buffers of --value-size %s exceed half the available memory (%s)", clients, valueSize, geometry.FormatSize(avail))
			}
			if masterAddr == "" {
				// The nodes' segments are mapped and faulted in at start.
				if nodes > maxBenchNodes {
					return usageOf("bench store", "--nodes %d: want at most %d in-process storage nodes", nodes, maxBenchNodes)
				}
				if avail > 0 && int64(nodes) > avail/2/seg {
					return usageOf("bench store", "--nodes %d x --segment-size %s exceed half the available memory (%s)", nodes, segSize, geometry.FormatSize(avail))
				}
				// A value lies in one segment, starting AllocAlign-aligned,
				// and each client's put in flight holds room for one value
				// (a put does not wait for another's space).
				slot := (vs + master.AllocAlign - 1) / master.AllocAlign * master.AllocAlign
				perSeg := seg / slot
				if perSeg == 0 {
					return usageOf("bench store", "--value-size %s exceeds one storage node's segment (--segment-size %s): a value lies in one segment", valueSize, segSize)
				}
				if room := perSeg * int64(nodes); room < int64(clients) { // no overflow: perSeg <= MaxInt64/64, nodes <= 64
					return usageOf("bench store", "--clients %d with --value-size %s: the in-process pool has room for %d value(s) of that size at once (--nodes %d x --segment-size %s; values start %d-byte aligned), fewer than the puts in flight", clients, valueSize, room, nodes, segSize, master.AllocAlign)
				}
			}
			if ops > 0 && ops < clients {
				return usageOf("bench store", "--ops %d with --clients %d: want at least one op per client", ops, clients)
			}
			// A remote pool's addresses are checked before the profile file
			// is created: a usage error leaves no file behind.
			var meta *httpmeta.Client
			if masterAddr != "" {
				if metaURL == "" {
					host, _, err := net.SplitHostPort(masterAddr)
					if err != nil {
						return usageOf("bench store", "--master %q: %v", masterAddr, err)
					}
					metaURL = "http://" + net.JoinHostPort(host, "8080") + "/metadata"
				}
				m, err := httpmeta.NewClient(metaURL)
				if err != nil {
					return usageOf("bench store", "--metadata_server: %v", err)
				}
				meta = m
			}
			var startProfile func() error
			stopProfile := func(bool) {}
			if cpuProfile != "" {
				start, stop, err := openCPUProfile(cpuProfile)
				if err != nil {
					return usageOf("bench store", "--cpuprofile: %v", err)
				}
				defer stop(false) // a run that fails before the measured phases end
				startProfile, stopProfile = start, stop
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fail := func(err error) error {
				if masterAddr == "" {
					return &exitError{1, "mooncake bench store: " + oneLineErr(err)}
				}
				return masterExit("bench store", masterAddr, err)
			}
			useShm := protocol == "shm"

			var newClient func(ctx context.Context, cfg client.Config) (*client.Client, error)
			if masterAddr == "" {
				lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: nodes, SegmentSize: uint64(seg), Shm: useShm, Prefault: true})
				if err != nil {
					return fail(err)
				}
				defer lc.Close()
				newClient = lc.NewClient
			} else {
				newClient = func(ctx context.Context, cfg client.Config) (*client.Client, error) {
					cfg.MasterAddr, cfg.Metadata = masterAddr, meta
					cfg.Transport = tcp.New(tcp.Config{BindAddr: bind})
					if useShm {
						cfg.Local = shm.New(shm.Config{})
					}
					return client.New(ctx, cfg)
				}
			}
			cls := make([]*client.Client, 0, clients)
			defer func() {
				for _, cl := range cls {
					cl.Close()
				}
			}()
			for range clients {
				cl, err := newClient(ctx, client.Config{SerialCommit: serialCommit, NoFramedSession: grpcSession})
				if err != nil {
					return fail(err)
				}
				cls = append(cls, cl)
			}
			res, err := storebench.Run(ctx, cls, storebench.Config{
				ValueSize: int(vs), Ops: ops, Duration: duration, Warmup: warmup, WarmupFill: fill, Stages: stages,
				Measure: startProfile,
			})
			stopProfile(err == nil) // the profile ends with the measured phases, before clients and pool close
			res.Protocol = protocol
			if err != nil {
				return fail(err)
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			line := func(op string, p storebench.Phase) {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s value %s clients %d: %9.1f ops/s %7.3f GB/s  p50 %.3f ms p99 %.3f ms  %.3f CPU-s/GB  (%d ops in %.1f s)\n",
					protocol, op, geometry.FormatSize(vs), res.Concurrency, p.OpsPerSec, p.GBps, p.P50Ms, p.P99Ms, p.CPUSPerGB, p.Ops, p.ElapsedS)
				for _, name := range []string{"put_start", "write", "put_end", "replica_list", "read", "other"} {
					if st, ok := p.Stages[name]; ok {
						fmt.Fprintf(cmd.OutOrStdout(), "  %-12s mean %7.3f ms  p50 %7.3f ms  p99 %7.3f ms\n", name, st.MeanMs, st.P50Ms, st.P99Ms)
					}
				}
			}
			line("put", res.Put)
			line("get", res.Get)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&valueSize, "value-size", "1MiB", "bytes per value")
	f.IntVar(&clients, "clients", 4, "concurrent clients, one worker each")
	f.DurationVar(&duration, "duration", 5*time.Second, "measured time of each phase (put, then get)")
	f.IntVar(&ops, "ops", 0, "operations per phase over all clients instead of --duration (0 = use --duration)")
	f.DurationVar(&warmup, "warmup", 500*time.Millisecond, "unmeasured puts before the put phase (0 = none, and no --warmup-fill either)")
	f.BoolVar(&fill, "warmup-fill", true, "keep warming up until the pool was written once (steady state: puts evict)")
	f.StringVar(&protocol, "protocol", "shm", "shm (shared memory to same-host peers, tcp otherwise) | tcp (tcp only)")
	f.StringVar(&masterAddr, "master", "", "master gRPC address of an existing pool (default: start one in this process)")
	f.StringVar(&metaURL, "metadata_server", "", "transfer metadata URL with --master (default http://<master host>:8080/metadata)")
	f.StringVar(&bind, "bind", "0.0.0.0:0", "data-plane listen address of the clients with --master")
	f.IntVar(&nodes, "nodes", 2, "storage nodes of the in-process pool")
	f.StringVar(&segSize, "segment-size", "512MiB", "DRAM per storage node of the in-process pool")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object")
	f.BoolVar(&stages, "stages", false, "also time each step of every operation (master RPCs, transfer) and print mean/p50/p99 per step")
	f.BoolVar(&serialCommit, "serial-commit", false, "commit each reserved put after its write instead of during it (client.Config.SerialCommit: the order before precommits, for comparison)")
	f.BoolVar(&grpcSession, "grpc-session", false, "keep the put and get master calls on the gRPC Session stream where the master serves framed sessions (client.Config.NoFramedSession, for comparison)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the measured phases to this file (go tool pprof)")
	return c
}
