package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta"
	"github.com/mooncake-go/mooncake/core/p2p"
)

// p2pFlags are the flags every p2p subcommand shares.
type p2pFlags struct {
	etcd, prefix, bind, segment string
	dialTimeout                 time.Duration
}

func (f *p2pFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.etcd, "etcd", "", "etcd endpoints, host:port[,host:port...] (required)")
	c.Flags().StringVar(&f.prefix, "prefix", p2p.DefaultPrefix, "etcd key prefix of the P2P store")
	c.Flags().StringVar(&f.bind, "bind", "127.0.0.1", "host the data plane listens on and publishes to peers")
	c.Flags().StringVar(&f.segment, "segment", "", "this node's segment name (default p2p-<hostname>-<random>)")
	c.Flags().DurationVar(&f.dialTimeout, "etcd-timeout", etcdmeta.DefaultDialTimeout, "how long to wait for etcd to answer at start")
}

// open connects to the store; cmd names the command in errors.
func (f *p2pFlags) open(ctx context.Context, cmd string, mod func(*p2p.Config)) (*p2p.Store, error) {
	if f.etcd == "" {
		return nil, usageOf(cmd, "--etcd is required (host:port of an etcd server)")
	}
	var eps []string
	for _, e := range strings.Split(f.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if f.dialTimeout <= 0 {
		return nil, usageOf(cmd, "--etcd-timeout %v: want > 0", f.dialTimeout)
	}
	cfg := p2p.Config{Etcd: eps, Prefix: f.prefix, BindHost: f.bind, Name: f.segment, DialTimeout: f.dialTimeout}
	if mod != nil {
		mod(&cfg)
	}
	s, err := p2p.New(ctx, cfg)
	if err != nil {
		if errors.Is(err, etcdmeta.ErrUnreachable) {
			return nil, &exitError{1, fmt.Sprintf("mooncake %s: cannot reach etcd at %s", cmd, f.etcd)}
		}
		return nil, &exitError{1, "mooncake " + cmd + ": " + err.Error()}
	}
	return s, nil
}

func p2pCmd() *cobra.Command {
	c := &cobra.Command{Use: "p2p", Short: "P2P Store: share large objects (checkpoints) peer to peer; metadata in etcd, no master"}
	c.AddCommand(p2pSeedCmd(), p2pGetCmd(), p2pListCmd())
	return c
}

// mapFile maps path read-only (size > 0).
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
}

func p2pSeedCmd() *cobra.Command {
	var f p2pFlags
	var name, shardSize string
	c := &cobra.Command{
		Use:   "seed --name NAME --etcd ADDR FILE...",
		Short: "Publish FILEs (mapped, not copied) as object NAME and serve them until interrupted",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if name == "" {
				return usageOf("p2p seed", "--name is required")
			}
			ss, err := positiveSize("p2p seed", "--shard-size", shardSize, "64MiB")
			if err != nil {
				return err
			}
			var bufs [][]byte
			defer func() {
				for _, b := range bufs {
					_ = syscall.Munmap(b)
				}
			}()
			labels := make([]string, 0, len(files))
			var total int64
			for _, p := range files {
				b, err := mapFile(p)
				if err != nil {
					return usageOf("p2p seed", "%v", err)
				}
				bufs = append(bufs, b)
				labels = append(labels, filepath.Base(p))
				total += int64(len(b))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := f.open(ctx, "p2p seed", nil)
			if err != nil {
				return err
			}
			defer s.Close()
			start := time.Now()
			if err := s.Register(ctx, name, bufs, uint64(ss), "cpu:0", p2p.WithLabels(labels...)); err != nil {
				return &exitError{1, "mooncake p2p seed: " + err.Error()}
			}
			took := time.Since(start).Round(time.Millisecond)
			shards := "?" // the count as registered; unknown if etcd does not answer now
			if info, err := s.Info(ctx, name); err == nil {
				shards = strconv.Itoa(info.Shards)
			}
			fmt.Fprintf(os.Stderr, "seeding %q: %d file(s), %s in %s shard(s) as segment %s (checksummed in %v); Ctrl-C to stop\n",
				name, len(files), geometry.FormatSize(total), shards, s.Name(), took)
			<-ctx.Done()
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Unregister(uctx, name); err != nil {
				return &exitError{1, "mooncake p2p seed: unregister: " + err.Error()}
			}
			fmt.Fprintf(os.Stderr, "stopped seeding %q\n", name)
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&name, "name", "", "object name (required)")
	c.Flags().StringVar(&shardSize, "shard-size", "64MiB", "maximum shard size")
	return c
}

// outFile is one output file of p2p get, mapped writable.
type outFile struct {
	path string
	f    *os.File
	buf  []byte
}

// createOut creates path with size bytes reserved on disk (so a full disk
// fails here, not as a fault later) and maps it writable.
func createOut(path string, size int64) (*outFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		os.Remove(path)
		if errors.Is(err, syscall.ENOSPC) {
			return nil, fmt.Errorf("disk full: no space for %s (%s)", path, geometry.FormatSize(size))
		}
		return nil, fmt.Errorf("reserve %s for %s: %w", geometry.FormatSize(size), path, err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &outFile{path: path, f: f, buf: b}, nil
}

// outName is the file name of buffer i of info in the output folder.
func outName(info p2p.PayloadInfo, i int) string {
	if i < len(info.Labels) {
		if b := filepath.Base(info.Labels[i]); b != "." && b != ".." && b != "/" && b != "" {
			return b
		}
	}
	return fmt.Sprintf("part-%04d", i)
}

func p2pGetCmd() *cobra.Command {
	var f p2pFlags
	var name, out string
	var serve, quiet bool
	var concurrency int
	var holderWait time.Duration
	c := &cobra.Command{
		Use:   "get --name NAME --etcd ADDR --out DIR",
		Short: "Fetch object NAME from its holders into DIR (one file per buffer); with --serve, serve it to peers until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			switch {
			case name == "":
				return usageOf("p2p get", "--name is required")
			case out == "":
				return usageOf("p2p get", "--out is required")
			case concurrency <= 0:
				return usageOf("p2p get", "--concurrency %d: want > 0", concurrency)
			case holderWait <= 0:
				return usageOf("p2p get", "--holder-wait %v: want > 0", holderWait)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := f.open(ctx, "p2p get", func(c *p2p.Config) { c.Concurrency, c.HolderWait = concurrency, holderWait })
			if err != nil {
				return err
			}
			defer s.Close()
			fail := func(err error) error { return &exitError{1, "mooncake p2p get: " + err.Error()} }
			info, err := s.Info(ctx, name)
			if err != nil {
				if errors.Is(err, p2p.ErrNotFound) {
					return &exitError{1, fmt.Sprintf("mooncake p2p get: unknown object %q (see mooncake p2p list)", name)}
				}
				return fail(err)
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fail(err)
			}
			var files []*outFile
			defer func() {
				for _, o := range files {
					_ = syscall.Munmap(o.buf)
					if cerr := o.f.Sync(); cerr != nil && err == nil {
						err = fail(fmt.Errorf("sync %s: %w", o.path, cerr))
					}
					o.f.Close()
					if err != nil {
						os.Remove(o.path)
					}
				}
			}()
			bufs := make([][]byte, 0, len(info.SizeList))
			for i, n := range info.SizeList {
				o, err := createOut(filepath.Join(out, outName(info, i)), int64(n))
				if err != nil {
					return fail(err)
				}
				files = append(files, o)
				bufs = append(bufs, o.buf)
			}
			var mu sync.Mutex
			lastPct := -1
			progress := func(done, total uint64) {
				if quiet {
					return
				}
				pct := int(done * 100 / total)
				mu.Lock()
				defer mu.Unlock()
				if pct/10 == lastPct/10 && done != total {
					return
				}
				lastPct = pct
				bar := strings.Repeat("#", pct/5) + strings.Repeat(".", 20-pct/5)
				fmt.Fprintf(os.Stderr, "get %s [%s] %3d%% %s / %s\n", name, bar, pct, geometry.FormatSize(int64(done)), geometry.FormatSize(int64(total)))
			}
			start := time.Now()
			if err := s.GetReplica(ctx, name, bufs, p2p.WithProgress(progress)); err != nil {
				return fail(err)
			}
			el := time.Since(start)
			st := s.Stats()
			fmt.Printf("got %q: %d file(s) in %s, %s in %v (%.1f MiB/s), %s from the origin, %d retries\n", name, len(files), out,
				geometry.FormatSize(int64(info.TotalSize)), el.Round(time.Millisecond), float64(info.TotalSize)/(1<<20)/el.Seconds(),
				geometry.FormatSize(int64(st.BytesFromOrigin)), st.Retries)
			if serve {
				fmt.Fprintf(os.Stderr, "serving %q as segment %s; Ctrl-C to stop\n", name, s.Name())
				<-ctx.Done()
			}
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.DeleteReplica(dctx, name); err != nil {
				return fail(fmt.Errorf("stop serving: %w", err))
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&name, "name", "", "object name (required)")
	c.Flags().StringVar(&out, "out", "", "output folder, created if missing (required)")
	c.Flags().BoolVar(&serve, "serve", false, "after fetching, serve the object to peers until interrupted")
	c.Flags().BoolVar(&quiet, "quiet", false, "no progress output")
	c.Flags().IntVar(&concurrency, "concurrency", p2p.DefaultConcurrency, "shards fetched at once")
	c.Flags().DurationVar(&holderWait, "holder-wait", p2p.DefaultHolderWait, "how long to wait for a holder of a shard that has none that answers")
	return c
}

func p2pListCmd() *cobra.Command {
	var f p2pFlags
	c := &cobra.Command{
		Use:   "list [PREFIX] --etcd ADDR",
		Short: "List the objects whose name starts with PREFIX",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := f.open(ctx, "p2p list", nil)
			if err != nil {
				return err
			}
			defer s.Close()
			l, err := s.List(ctx, prefix)
			if err != nil {
				return &exitError{1, "mooncake p2p list: " + err.Error()}
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tBUFFERS\tSHARDS\tSHARD SIZE\tHOLDERS\tORIGIN")
			for _, p := range l {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%d\t%s\n", p.Name, geometry.FormatSize(int64(p.TotalSize)), len(p.SizeList), p.Shards,
					geometry.FormatSize(int64(p.MaxShardSize)), p.Holders, p.Origin)
			}
			return w.Flush()
		},
	}
	f.add(c)
	return c
}
