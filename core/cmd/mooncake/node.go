package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/disk"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// minQuota is the smallest --quota_bytes a node accepts.
const minQuota = 1 << 20

func nodeCmd() *cobra.Command {
	var masterAddr, clusterID, metaURL, segSize, hostname, bind, protocol, storageDir, quota string
	var offerShm, overcommit, prefault bool
	var tf tlsFlags
	c := &cobra.Command{
		Use:   "node",
		Short: "Contribute --segment-size bytes of DRAM to a master's pool",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := geometry.ParseSize(segSize)
			if err != nil {
				return &exitError{2, fmt.Sprintf("mooncake node: --segment-size: %v (a positive size such as 4GiB)", strings.TrimPrefix(err.Error(), "geometry: "))}
			}
			if size <= 0 {
				return &exitError{2, fmt.Sprintf("mooncake node: --segment-size %q: must be a positive size such as 4GiB", segSize)}
			}
			if overcommit && prefault && cmd.Flags().Changed("prefault") {
				return &exitError{2, "mooncake node: --prefault with --overcommit: allocating the whole segment at start defeats overcommitting it; pass one of them"}
			}
			// The segment is a sparse memory file: mapping more than the
			// machine has succeeds, and fails only once writers fill it.
			if err := checkMemory("--segment-size "+segSize, size, availableMemory(), 1); err != nil && !overcommit {
				return &exitError{2, "mooncake node: " + err.Error() + "; pass a smaller --segment-size, or --overcommit to map it anyway (pages are taken as they are written: the node may be killed once they run out)"}
			}
			var quotaBytes int64
			if quota != "" && quota != "0" {
				if quotaBytes, err = geometry.ParseSize(quota); err != nil || quotaBytes <= 0 {
					return &exitError{2, fmt.Sprintf("mooncake node: --quota_bytes %q: must be a size such as 100GiB (0 = 90%% of the free space)", quota)}
				}
			}
			if quotaBytes > 0 && storageDir == "" {
				return &exitError{2, "mooncake node: --quota_bytes needs --storage_root_dir"}
			}
			if quotaBytes > 0 && quotaBytes < minQuota {
				return &exitError{2, fmt.Sprintf("mooncake node: --quota_bytes %s is too small for a disk tier: objects are stored whole, one file each (at least %s; 0 = 90%% of the free space)",
					geometry.FormatSize(quotaBytes), geometry.FormatSize(minQuota))}
			}
			if storageDir != "" && quotaBytes > 0 {
				if free, err := disk.Available(storageDir); err != nil {
					return &exitError{2, "mooncake node: --storage_root_dir: " + err.Error()}
				} else if uint64(quotaBytes) > free {
					fmt.Fprintf(os.Stderr, "mooncake node: warning: --quota_bytes %s exceeds the %s free on the filesystem of %s: offloads will fail once the disk is full\n",
						geometry.FormatSize(quotaBytes), geometry.FormatSize(int64(min(free, math.MaxInt64))), storageDir)
				}
			}
			if protocol != "tcp" {
				return &exitError{2, fmt.Sprintf("mooncake node: unsupported: protocol %q (built: tcp)", protocol)}
			}
			poolTLS, etcdTLS, err := tf.load("node")
			if err != nil {
				return err
			}
			meta, err := openMetadata(context.Background(), metaURL, masterAddr, poolTLS, etcdTLS)
			if err != nil {
				return metaExit("node", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg := client.Config{
				LocalHostname: hostname, MasterAddr: masterAddr, ClusterID: clusterID, Metadata: meta,
				Transport: tcp.New(tcp.Config{BindAddr: bind}), GlobalSegmentSize: uint64(size),
				// A node outlives the engines writing to it: the master
				// places replicas here before engines' own segments.
				SegmentKind: store.SegmentStandalone,
				// Its memory is the pool's: allocate it now rather than on
				// the first put into each page (not with --overcommit,
				// whose point is taking pages only as they are written).
				PrefaultSegment: prefault && !overcommit,
				StorageRootDir:  storageDir, StorageQuota: uint64(quotaBytes),
				// Losing the master and remounting at it are the events an
				// operator watching a node needs to see.
				Logf: func(format string, args ...any) {
					fmt.Fprintf(os.Stderr, "mooncake node: "+format+"\n", args...)
				},
				TLS: poolTLS, EtcdTLS: etcdTLS,
			}
			if offerShm {
				cfg.Local = shm.New(shm.Config{})
			}
			cl, err := client.New(ctx, cfg)
			if err != nil {
				return masterExit("node", masterAddr, err)
			}
			fmt.Fprintf(os.Stderr, "mooncake node: %s contributes %s to %s", cl.ID(), geometry.FormatSize(size), masterAddr)
			if d := cl.DiskTier(); d != nil {
				fmt.Fprintf(os.Stderr, ", and a %s disk tier in %s", geometry.FormatSize(int64(d.Capacity())), d.Dir())
			}
			if poolTLS != nil {
				fmt.Fprintf(os.Stderr, "; %s", poolTLS)
			}
			fmt.Fprintln(os.Stderr)
			<-ctx.Done()
			if err := cl.Close(); err != nil {
				// The master is gone or forgot us: it drops the segment
				// with this node's TTL anyway.
				return &exitError{1, "mooncake node: unmount on exit: " + client.MasterError(masterAddr, err)}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&masterAddr, "master", "127.0.0.1:50051", "master gRPC address host:port, or etcd://h1:2379,h2:2379 to follow the leader of highly available masters (upstream master_server_address)")
	f.StringVar(&clusterID, "cluster_id", "mooncake_cluster", "HA cluster an etcd:// --master follows (the masters' --cluster_id)")
	f.StringVar(&metaURL, "metadata_server", "", "transfer metadata server URL (default http://<master host>:8080/metadata)")
	f.StringVar(&segSize, "segment-size", "4GiB", "DRAM contributed to the pool (upstream global_segment_size)")
	f.StringVar(&hostname, "local_hostname", "", "this node's segment name, unique in the cluster (default <hostname>-<random>)")
	f.StringVar(&bind, "bind", "0.0.0.0:0", "data-plane listen address (upstream MC_TCP_BIND_ADDRESS)")
	f.StringVar(&protocol, "protocol", "tcp", "transfer protocol")
	f.StringVar(&storageDir, "storage_root_dir", "", "SSD tier: directory for objects evicted from this node's DRAM (needs a master with --enable_offload)")
	f.StringVar(&quota, "quota_bytes", "0", "SSD tier size limit, e.g. 100GiB (0 = 90% of the directory's free space)")
	f.BoolVar(&offerShm, "shm", true, "also offer the segment over shared memory (memfd) to clients on this host")
	f.BoolVar(&prefault, "prefault", true, "allocate the whole segment at start, in the background, so puts write at copy speed instead of faulting in each 4 KiB page (off with --overcommit)")
	f.BoolVar(&overcommit, "overcommit", false, "start even when --segment-size exceeds this machine's available memory (the node may be killed once the pool fills it)")
	tf.register(f, "to the master and its metadata server", true, true)
	return c
}
