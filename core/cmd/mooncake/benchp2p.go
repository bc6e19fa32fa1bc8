package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/p2p"
)

// p2pBenchRow is one measurement of bench p2p.
type p2pBenchRow struct {
	Getters   int     `json:"getters"`
	Mode      string  `json:"mode"` // "p2p" or "naive" (every getter reads from the seed)
	Seconds   float64 `json:"seconds"`
	SeedBytes uint64  `json:"seed_bytes"`
	// SeedX is SeedBytes over the object size.
	SeedX float64 `json:"seed_x"`
}

// links emulates each node's outbound link at rate bytes/s: a read of n
// bytes from a node waits for that node's link to be free, then holds it
// for n/rate (the wait ends when the emulated send would end; the real
// transfer follows).
type links struct {
	rate float64
	mu   sync.Mutex
	next map[string]time.Time // guarded by mu: when each node's link is free
}

func (l *links) wait(ctx context.Context, holder string, n uint64) error {
	d := time.Duration(float64(n) / l.rate * float64(time.Second))
	l.mu.Lock()
	start := time.Now()
	if t := l.next[holder]; t.After(start) {
		start = t
	}
	end := start.Add(d)
	l.next[holder] = end
	l.mu.Unlock()
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func benchP2PCmd() *cobra.Command {
	var f p2pFlags
	var size, shardSize, getters, linkRate string
	var concurrency int
	var jsonOut bool
	c := &cobra.Command{
		Use:   "p2p --etcd ADDR",
		Short: "P2P Store: one seed distributes an object to N getters over tcp (this process, 127.0.0.1), vs every getter reading from the seed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := positiveSize("bench p2p", "--size", size, "1GiB")
			if err != nil {
				return err
			}
			ss, err := positiveSize("bench p2p", "--shard-size", shardSize, "64MiB")
			if err != nil {
				return err
			}
			var ns []int
			maxN := 0
			for _, s := range strings.Split(getters, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n <= 0 {
					return usageOf("bench p2p", "--getters %q: want a list of positive counts such as 1,2,4,8", getters)
				}
				ns = append(ns, n)
				maxN = max(maxN, n)
			}
			if concurrency <= 0 {
				return usageOf("bench p2p", "--concurrency %d: want > 0", concurrency)
			}
			lr, err := geometry.ParseSize(linkRate)
			if err != nil || lr < 0 {
				return usageOf("bench p2p", "--link-rate %q: want a size per second such as 1GiB, or 0 for none", linkRate)
			}
			need := sz * int64(maxN+1)
			if avail := availableMemory(); avail > 0 && need > avail*3/4 {
				return usageOf("bench p2p", "--size x (max getters + 1) = %s exceeds three quarters of the available memory (%s)", geometry.FormatSize(need), geometry.FormatSize(avail))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fail := func(err error) error { return &exitError{1, "mooncake bench p2p: " + err.Error()} }

			var regions []*memory.Region
			defer func() {
				for _, r := range regions {
					r.Close()
				}
			}()
			mapBuf := func() ([]byte, error) {
				r, err := memory.Map(int(sz))
				if err != nil {
					return nil, err
				}
				regions = append(regions, r)
				return r.Bytes(), nil
			}
			src, err := mapBuf()
			if err != nil {
				return fail(err)
			}
			for i := range src { // cheap, non-constant pattern
				src[i] = byte(i*131 + i>>13)
			}
			dsts := make([][]byte, maxN)
			for i := range dsts {
				if dsts[i], err = mapBuf(); err != nil {
					return fail(err)
				}
			}
			var stores []*p2p.Store
			defer func() {
				for _, s := range stores {
					s.Close()
				}
			}()
			open := func(mod func(*p2p.Config)) (*p2p.Store, error) {
				s, err := f.open(ctx, "bench p2p", mod)
				if err == nil {
					stores = append(stores, s)
				}
				return s, err
			}
			seed, err := open(nil)
			if err != nil {
				return err
			}
			getterSets := map[string][]*p2p.Store{}
			var before func(context.Context, string, uint64) error
			if lr > 0 {
				before = (&links{rate: float64(lr), next: map[string]time.Time{}}).wait
			}
			for _, mode := range []string{"p2p", "naive"} {
				for range maxN {
					g, err := open(func(c *p2p.Config) {
						c.Concurrency, c.OriginOnly, c.BeforeRead = concurrency, mode == "naive", before
					})
					if err != nil {
						return err
					}
					getterSets[mode] = append(getterSets[mode], g)
				}
			}
			var rows []p2pBenchRow
			for _, n := range ns {
				for _, mode := range []string{"naive", "p2p"} {
					name := fmt.Sprintf("bench/%s/%d/%d", mode, n, time.Now().UnixNano())
					if err := seed.Register(ctx, name, [][]byte{src}, uint64(ss), "cpu:0"); err != nil {
						return fail(err)
					}
					gs := getterSets[mode][:n]
					before := make([]uint64, n)
					for i, g := range gs {
						before[i] = g.Stats().BytesFromOrigin
						clear(dsts[i])
					}
					errs := make([]error, n)
					var wg sync.WaitGroup
					start := time.Now()
					for i, g := range gs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							errs[i] = g.GetReplica(ctx, name, [][]byte{dsts[i]})
						}()
					}
					wg.Wait()
					el := time.Since(start)
					var seedBytes uint64
					for i, g := range gs {
						if errs[i] != nil {
							return fail(fmt.Errorf("%s, %d getters: getter %d: %w", mode, n, i, errs[i]))
						}
						if string(dsts[i]) != string(src) {
							return fail(fmt.Errorf("%s, %d getters: getter %d: bytes differ", mode, n, i))
						}
						seedBytes += g.Stats().BytesFromOrigin - before[i]
					}
					row := p2pBenchRow{Getters: n, Mode: mode, Seconds: el.Seconds(), SeedBytes: seedBytes, SeedX: float64(seedBytes) / float64(sz)}
					rows = append(rows, row)
					if !jsonOut {
						fmt.Fprintf(os.Stderr, "N=%d %-5s %.3f s, seed sent %.2fx the object\n", n, mode, row.Seconds, row.SeedX)
					}
					for _, g := range gs {
						if err := g.DeleteReplica(ctx, name); err != nil {
							return fail(err)
						}
					}
					if err := seed.Unregister(ctx, name); err != nil {
						return fail(err)
					}
				}
			}
			if jsonOut {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"size": sz, "shard_size": ss, "concurrency": concurrency, "link_rate": lr, "rows": rows})
			}
			link := "no link emulation"
			if lr > 0 {
				link = "each node's outbound link emulated at " + geometry.FormatSize(lr) + "/s"
			}
			fmt.Printf("object %s, shards %s, %d shards at once per getter, tcp on %s, %s\n", geometry.FormatSize(sz), geometry.FormatSize(ss), concurrency, f.bind, link)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "N\tnaive s\tp2p s\tp2p/naive time\tnaive seed bytes\tp2p seed bytes\tp2p seed x object")
			for i := 0; i+1 < len(rows); i += 2 {
				nv, pp := rows[i], rows[i+1]
				fmt.Fprintf(w, "%d\t%.3f\t%.3f\t%.2f\t%s\t%s\t%.2f\n", nv.Getters, nv.Seconds, pp.Seconds, pp.Seconds/nv.Seconds,
					geometry.FormatSize(int64(nv.SeedBytes)), geometry.FormatSize(int64(pp.SeedBytes)), pp.SeedX)
			}
			return w.Flush()
		},
	}
	f.add(c)
	c.Flags().StringVar(&size, "size", "1GiB", "object size")
	c.Flags().StringVar(&shardSize, "shard-size", "64MiB", "shard size")
	c.Flags().StringVar(&getters, "getters", "1,2,4,8", "getter counts to run")
	c.Flags().IntVar(&concurrency, "concurrency", p2p.DefaultConcurrency, "shards fetched at once per getter")
	c.Flags().StringVar(&linkRate, "link-rate", "0", "emulate each node's outbound link at this many bytes per second (e.g. 1GiB; 0: none, loopback speed)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print one JSON object")
	return c
}
