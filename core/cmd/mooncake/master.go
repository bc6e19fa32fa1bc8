package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
)

func masterCmd() *cobra.Command {
	var (
		rpcPort, metricsPort, metaPort            int
		sessionPort                               int
		rpcAddr, metricsHost, metaHost            string
		enableMeta                                bool
		leaseTTL                                  int64
		evictRatio, watermark                     float64
		clientTTL, discardTimeout, releaseTimeout int64
		etcdEndpoints, clusterID, advertise       string
		enableHA                                  bool
		snapshotSeconds                           int64
		strategy, evictPolicy                     string
		softPinTTL                                int64
		evictSoftPinned                           bool
		enableOffload, offloadOnEvict             bool
		tf                                        tlsFlags
		metricsPlaintext                          bool
	)
	c := &cobra.Command{
		Use:   "master",
		Short: "Run the pool's master (gRPC on --rpc_port, /metrics and /health on --metrics_port, HTTP metadata on --http_metadata_server_port)",
		Long: `Run the KV-cache pool's master. Flags and defaults follow upstream
mooncake_master; the embedded HTTP metadata server is on by default here so
one command runs a whole single-machine pool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			poolTLS, etcdTLS, err := tf.load("master")
			if err != nil {
				return err
			}
			for _, p := range []struct {
				flag string
				v    int
			}{{"--rpc_port", rpcPort}, {"--metrics_port", metricsPort}, {"--http_metadata_server_port", metaPort}} {
				if p.v < 0 || p.v > 65535 {
					return &exitError{2, fmt.Sprintf("mooncake master: %s=%d is not a port (0-65535)", p.flag, p.v)}
				}
			}
			if sessionPort < -1 || sessionPort > 65535 {
				return &exitError{2, fmt.Sprintf("mooncake master: --session_port=%d is not a port (0-65535, or -1 for none)", sessionPort)}
			}
			if metricsPlaintext && poolTLS == nil {
				return &exitError{2, "mooncake master: --metrics_plaintext needs --tls-ca, --tls-cert and --tls-key (without them /metrics is plain HTTP anyway)"}
			}
			logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "mooncake master: "+format+"\n", args...) }
			cfg := server.ProcessConfig{
				TLS: poolTLS, MetricsPlaintext: metricsPlaintext,
				Master: master.Config{
					DefaultLeaseTTL:        time.Duration(leaseTTL) * time.Millisecond,
					EvictionRatio:          evictRatio,
					EvictionHighWatermark:  watermark,
					EvictionPolicy:         evictPolicy,
					ClientTTL:              time.Duration(clientTTL) * time.Second,
					PutStartDiscardTimeout: time.Duration(discardTimeout) * time.Second,
					PutStartReleaseTimeout: time.Duration(releaseTimeout) * time.Second,
					AllocationStrategy:     strategy,
					DefaultSoftPinTTL:      time.Duration(softPinTTL) * time.Millisecond,
					NoEvictSoftPinned:      !evictSoftPinned,
					EnableOffload:          enableOffload,
					OffloadOnEvict:         offloadOnEvict,
					// The library's default seed is fixed (deterministic
					// tests); a running master draws a fresh one, so that
					// "random" placement is not the same sequence after
					// every start.
					Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
				},
				RPCAddr:     net.JoinHostPort(rpcAddr, strconv.Itoa(rpcPort)),
				SessionAddr: net.JoinHostPort(rpcAddr, strconv.Itoa(sessionPort)),
			}
			if sessionPort < 0 {
				cfg.SessionAddr = "off"
			}
			if poolTLS != nil {
				cfg.Logf = logf
			}
			if metricsPort > 0 {
				cfg.MetricsAddr = net.JoinHostPort(metricsHost, strconv.Itoa(metricsPort))
			}
			if enableMeta {
				cfg.MetadataAddr = net.JoinHostPort(metaHost, strconv.Itoa(metaPort))
			}
			if eps := server.ParseEtcdEndpoints(etcdEndpoints); len(eps) > 0 || enableHA {
				if len(eps) == 0 {
					return &exitError{2, "mooncake master: --enable_ha needs --etcd-endpoints"}
				}
				cfg.HA = &server.HAConfig{
					Endpoints: eps, ClusterID: clusterID, AdvertiseAddr: advertise,
					SnapshotInterval: time.Duration(snapshotSeconds) * time.Second,
					Logf:             func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
					EtcdTLS:          etcdTLS,
				}
			}
			p, err := server.Start(cfg)
			if err != nil {
				if errors.Is(err, store.ErrInvalidParams) {
					// A flag the master's config refuses (a bad
					// --allocation_strategy, --eviction_ratio, --cluster_id).
					return &exitError{2, "mooncake master: " + oneLineErr(err)}
				}
				return &exitError{1, "mooncake master: " + oneLineErr(err)}
			}
			defer p.Close()
			fmt.Fprintf(os.Stderr, "mooncake master: rpc %s", p.RPCAddr)
			if p.MetricsAddr != "" {
				scheme := "https"
				if poolTLS == nil || metricsPlaintext {
					scheme = "http"
				}
				fmt.Fprintf(os.Stderr, ", metrics %s://%s/metrics", scheme, p.MetricsAddr)
			}
			if p.MetadataURL != "" {
				fmt.Fprintf(os.Stderr, ", metadata %s", p.MetadataURL)
			}
			if cfg.HA != nil {
				fmt.Fprintf(os.Stderr, ", HA cluster %s on etcd %v (%s; etcd %s)", cfg.HA.ClusterID, cfg.HA.Endpoints, p.Role(), etcdTLS)
			}
			if poolTLS != nil {
				fmt.Fprintf(os.Stderr, "; %s", poolTLS)
				if metricsPlaintext {
					fmt.Fprint(os.Stderr, " except /metrics and /health")
				}
			}
			fmt.Fprintln(os.Stderr)
			// A line of its own: scripts match the line above up to its
			// end ("rpc ADDR, metadata URL").
			if p.SessionAddr != "" {
				fmt.Fprintf(os.Stderr, "mooncake master: framed sessions on %s (clients' put and get calls)\n", p.SessionAddr)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := p.Wait(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&rpcPort, "rpc_port", 50051, "gRPC port")
	f.IntVar(&sessionPort, "session_port", 0, "port of the framed session listener (ours: clients' put/get calls over plain TCP, less CPU and fewer goroutine hand-offs per call than gRPC's stream; they fall back to gRPC where they cannot reach it): 0 = any free port, told to clients by the master; -1 = none")
	f.StringVar(&rpcAddr, "rpc_address", "0.0.0.0", "gRPC bind address")
	f.IntVar(&metricsPort, "metrics_port", 9003, "port of /metrics and /health (0 = off)")
	f.StringVar(&metricsHost, "metrics_host", "0.0.0.0", "bind address of /metrics and /health")
	f.BoolVar(&enableMeta, "enable_http_metadata_server", true, "serve the transfer-engine HTTP metadata protocol at /metadata")
	f.IntVar(&metaPort, "http_metadata_server_port", 8080, "HTTP metadata server port")
	f.StringVar(&metaHost, "http_metadata_server_host", "0.0.0.0", "HTTP metadata server bind address")
	f.Int64Var(&leaseTTL, "default_kv_lease_ttl", 10000, "lease granted by each read, ms")
	f.Float64Var(&evictRatio, "eviction_ratio", 0.05, "fraction of capacity freed per eviction pass, in (0,1]")
	f.Float64Var(&watermark, "eviction_high_watermark_ratio", 0.90, "usage above which eviction runs (1.0 = only when an allocation fails)")
	f.StringVar(&evictPolicy, "eviction_policy", master.PolicyLRU, "eviction order: "+strings.Join(master.EvictionPolicies(), "|")+" (lru: upstream's; s3fifo: S3-FIFO, SOSP'23, with prefix-aware tie-breaking within a batch)")
	f.Int64Var(&clientTTL, "client_ttl", 10, "seconds a client stays alive without a heartbeat")
	f.Int64Var(&discardTimeout, "put_start_discard_timeout_sec", 30, "age after which an unfinished put may be taken over, s")
	f.Int64Var(&releaseTimeout, "put_start_release_timeout_sec", 600, "delay before a taken-over put's space is freed, s")
	f.StringVar(&strategy, "allocation_strategy", "random", "replica placement: random | free_ratio_first | local_first")
	f.Int64Var(&softPinTTL, "default_kv_soft_pin_ttl", 1800000, "how long a soft pin protects an object, ms (refreshed by reads, 0.3.x semantics)")
	f.BoolVar(&evictSoftPinned, "allow_evict_soft_pinned_objects", true, "evict soft-pinned objects when nothing else can be freed")
	f.BoolVar(&enableOffload, "enable_offload", false, "SSD tier: nodes started with --storage_root_dir keep objects on disk (every put is copied there unless --offload_on_evict)")
	f.BoolVar(&offloadOnEvict, "offload_on_evict", false, "SSD tier: copy an object to disk only when eviction picks it, then free its DRAM (needs --enable_offload)")
	f.StringVar(&etcdEndpoints, "etcd-endpoints", "", "etcd endpoints host:port[,host:port...] (also ';'-separated): run for leadership with a replicated object table (high availability)")
	f.StringVar(&etcdEndpoints, "etcd_endpoints", "", "alias of --etcd-endpoints (upstream spelling)")
	f.BoolVar(&enableHA, "enable_ha", false, "high availability (implied by --etcd-endpoints, which it requires)")
	f.StringVar(&clusterID, "cluster_id", "mooncake_cluster", "HA cluster id: scopes the election and the replicated table in etcd")
	f.StringVar(&advertise, "rpc_advertise_address", "", "RPC address clients are sent to while this master leads (default the bound address, 0.0.0.0 replaced by a local address)")
	f.Int64Var(&snapshotSeconds, "snapshot_interval_seconds", 60, "HA: seconds between snapshots of the replicated table (also every 10000 changes)")
	tf.register(f, "gRPC, HTTP metadata server, /metrics", false, true)
	f.BoolVar(&metricsPlaintext, "metrics_plaintext", false, "with --tls-*: keep /metrics and /health on plain HTTP, for probes and scrapers without a client certificate")
	return c
}
