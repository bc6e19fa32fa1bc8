package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// ctlCmd is `mooncake ctl`: an operator's view of a running master. Every
// subcommand is one or two master RPCs that grant no lease. Usage errors
// exit 2, failures 1, each with one line on stderr.
func ctlCmd() *cobra.Command {
	var (
		masterAddr, clusterID string
		timeout               time.Duration
		tf                    tlsFlags
	)
	c := &cobra.Command{
		Use:   "ctl",
		Short: "Inspect and administer a running master's pool: segments, keys, stat, remove, remove-regex, usage",
		Long: `Inspect and administer a running master's pool over its gRPC port.
Listing and stat grant no lease. Sizes are in bytes.

Keys are bytes. A key that is not printable UTF-8, or that holds '"' or
'\', is printed Go-quoted ("\xff\xfe", "a\x00b"); a KEY argument or
--prefix that starts with '"' is read back the same way, so a printed key
can be pasted as it is.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &exitError{2, fmt.Sprintf("mooncake ctl: unknown command %q (want segments, keys, stat, remove, remove-regex or usage)", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return &exitError{2, "mooncake ctl: missing command (segments, keys, stat, remove, remove-regex or usage)"}
		},
	}
	pf := c.PersistentFlags()
	pf.StringVar(&masterAddr, "master", "127.0.0.1:50051", "master gRPC address host:port, or etcd://h1:2379,h2:2379 to follow the leader of highly available masters")
	pf.StringVar(&clusterID, "cluster_id", "mooncake_cluster", "HA cluster an etcd:// --master follows (the masters' --cluster_id)")
	pf.DurationVar(&timeout, "timeout", 10*time.Second, "bound on each master call")
	tf.register(pf, "to the master", true, true)

	// run wraps a subcommand: it checks the argument count (a usage error)
	// and dials the master; f's errors become one-line failures.
	run := func(name string, nargs int, f func(ctx context.Context, a *client.Admin, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if len(args) != nargs {
				return &exitError{2, fmt.Sprintf("mooncake ctl %s: want %d argument(s), got %d (usage: %s)", name, nargs, len(args), cmd.UseLine())}
			}
			if timeout <= 0 {
				return &exitError{2, fmt.Sprintf("mooncake ctl %s: --timeout %v: must be positive", name, timeout)}
			}
			poolTLS, etcdTLS, err := tf.load("ctl " + name)
			if err != nil {
				return err
			}
			a, err := client.DialAdmin(masterAddr, timeout, client.WithClusterID(clusterID), client.WithTLS(poolTLS), client.WithEtcdTLS(etcdTLS))
			if err != nil {
				return &exitError{2, fmt.Sprintf("mooncake ctl %s: --master %q: %v", name, masterAddr, oneLineErr(err))}
			}
			defer a.Close()
			if err := f(cmd.Context(), a, cmd.OutOrStdout(), args); err != nil {
				if _, ok := err.(*exitError); ok {
					return err
				}
				return masterExit("ctl "+name, masterAddr, err)
			}
			return nil
		}
	}
	noArgs := cobra.ArbitraryArgs // counted by run, to exit 2 with our message

	segments := &cobra.Command{
		Use:   "segments",
		Short: "List mounted segments: id, name, capacity, used, objects, client, kind (standalone or embedded)",
		Args:  noArgs,
		RunE: run("segments", 0, func(ctx context.Context, a *client.Admin, out io.Writer, _ []string) error {
			segs, err := a.ListSegments(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			// KIND is last so that scripts reading the older columns by
			// position keep working.
			fmt.Fprintln(tw, "ID\tNAME\tCAPACITY\tUSED\tUSED%\tOBJECTS\tCLIENT\tKIND")
			for _, s := range segs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%d\t%s\t%s\n", s.ID, s.Name, s.Size, s.Used, 100*s.UsedRatio(), s.Objects, s.Client, s.Kind)
			}
			return tw.Flush()
		}),
	}

	var prefix string
	var limit int
	keys := &cobra.Command{
		Use:   "keys",
		Short: "List keys in key order: size, state, replicas, lease, pins",
		Args:  noArgs,
		RunE: run("keys", 0, func(ctx context.Context, a *client.Admin, out io.Writer, _ []string) error {
			if limit < 0 {
				return &exitError{2, fmt.Sprintf("mooncake ctl keys: --limit %d: must be >= 0 (0 = all)", limit)}
			}
			p, err := store.ParseKeyText(prefix)
			if err != nil {
				return &exitError{2, fmt.Sprintf("mooncake ctl keys: --prefix: %s", oneLineErr(err))}
			}
			ks, total, err := a.ListKeys(ctx, p, limit)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSIZE\tSTATE\tREPLICAS\tLEASE\tPIN")
			for _, k := range ks {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", store.KeyText(k.Key), k.Size, state(k), len(k.Replicas), leaseText(k.LeaseLeft), pinText(k))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(ks) < total {
				fmt.Fprintf(out, "(%d of %d keys; raise --limit)\n", len(ks), total)
			}
			return nil
		}),
	}
	keys.Flags().StringVar(&prefix, "prefix", "", `only keys starting with this (Go-quoted if it starts with '"')`)
	keys.Flags().IntVar(&limit, "limit", 1000, "at most this many keys (0 = all)")

	stat := &cobra.Command{
		Use:   "stat KEY",
		Short: "Show one readable key: size, replicas and where they are, lease, pins",
		Args:  cobra.ArbitraryArgs,
		RunE: run("stat", 1, func(ctx context.Context, a *client.Admin, out io.Writer, args []string) error {
			key, err := keyArg("stat", args[0])
			if err != nil {
				return err
			}
			k, err := a.Stat(ctx, key)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "key\t%s\n", store.KeyText(k.Key))
			fmt.Fprintf(tw, "size\t%d (%s)\n", k.Size, geometry.FormatSize(int64(k.Size)))
			fmt.Fprintf(tw, "replicas\t%d\n", len(k.Replicas))
			for i, r := range k.Replicas {
				parts := make([]string, len(r))
				for j, p := range r {
					parts[j] = fmt.Sprintf("%s@%#x+%d", p.Segment, p.Addr, p.Size)
				}
				fmt.Fprintf(tw, "replica %d\t%s\n", i, strings.Join(parts, " "))
			}
			if k.DiskSegment != "" {
				fmt.Fprintf(tw, "disk\ton the disk tier of segment %s\n", k.DiskSegment)
			}
			fmt.Fprintf(tw, "owner\t%s\n", k.Owner)
			fmt.Fprintf(tw, "lease\t%s\n", leaseText(k.LeaseLeft))
			fmt.Fprintf(tw, "pin\t%s\n", pinText(k))
			return tw.Flush()
		}),
	}

	var force bool
	remove := &cobra.Command{
		Use:   "remove KEY",
		Short: "Remove one key (--force: even if leased or hard-pinned)",
		Args:  cobra.ArbitraryArgs,
		RunE: run("remove", 1, func(ctx context.Context, a *client.Admin, out io.Writer, args []string) error {
			key, err := keyArg("remove", args[0])
			if err != nil {
				return err
			}
			if err := a.Remove(ctx, key, force); err != nil {
				return err
			}
			fmt.Fprintf(out, "removed %s\n", store.KeyText(key))
			return nil
		}),
	}
	remove.Flags().BoolVar(&force, "force", false, "remove even if leased or hard-pinned")

	var forceRe bool
	removeRe := &cobra.Command{
		Use:   "remove-regex REGEX",
		Short: "Remove every key matching REGEX (RE2, unanchored); leased and hard-pinned keys only with --force",
		Args:  cobra.ArbitraryArgs,
		RunE: run("remove-regex", 1, func(ctx context.Context, a *client.Admin, out io.Writer, args []string) error {
			if args[0] == "" {
				return &exitError{2, "mooncake ctl remove-regex: empty regex (use .* to match every key)"}
			}
			if _, err := regexp.Compile(args[0]); err != nil {
				return &exitError{2, fmt.Sprintf("mooncake ctl remove-regex: %v", err)}
			}
			r, err := a.RemoveByRegexReport(ctx, args[0], forceRe)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "removed %d keys\n", r.Removed)
			if r.Leased > 0 {
				fmt.Fprintf(out, "skipped %d leased or hard-pinned keys (--force removes them)\n", r.Leased)
			}
			if r.Busy > 0 {
				fmt.Fprintf(out, "skipped %d keys being copied to or from a disk tier (--force removes them)\n", r.Busy)
			}
			if r.Writing > 0 {
				fmt.Fprintf(out, "skipped %d keys being written\n", r.Writing)
			}
			return nil
		}),
	}
	removeRe.Flags().BoolVar(&forceRe, "force", false, "remove leased and hard-pinned keys too")

	usage := &cobra.Command{
		Use:   "usage",
		Short: "Show pool totals: capacity, used, objects, segments, clients, pins, evictions, reservations",
		Args:  noArgs,
		RunE: run("usage", 0, func(ctx context.Context, a *client.Admin, out io.Writer, _ []string) error {
			st, err := a.Stats(ctx)
			if err != nil {
				return err
			}
			pct := 0.0
			if st.Capacity > 0 {
				pct = 100 * float64(st.Used) / float64(st.Capacity)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "capacity\t%d (%s)\n", st.Capacity, geometry.FormatSize(int64(st.Capacity)))
			fmt.Fprintf(tw, "used\t%d (%.1f%%)\n", st.Used, pct)
			fmt.Fprintf(tw, "objects\t%d\n", st.Objects)
			fmt.Fprintf(tw, "segments\t%d\n", st.Segments)
			fmt.Fprintf(tw, "clients\t%d\n", st.Clients)
			fmt.Fprintf(tw, "soft_pinned\t%d\n", st.SoftPinned)
			fmt.Fprintf(tw, "hard_pinned\t%d\n", st.HardPinned)
			fmt.Fprintf(tw, "evicted\t%d objects, %d bytes\n", st.EvictedObjects, st.EvictedBytes)
			fmt.Fprintf(tw, "partial_puts\t%d\n", st.PartialPuts)
			fmt.Fprintf(tw, "striped_puts\t%d\n", st.StripedPuts)
			fmt.Fprintf(tw, "reserved\t%d bytes in %d reservations (space clients hold for their next puts, not in used)\n", st.Reserved, st.Reservations)
			// The disk lines stay once a tier was used: its counters
			// outlive it (a node that died, a tier unmounted).
			if st.DiskCapacity > 0 || st.Offloads+st.OffloadFailures+st.DiskHits+st.DiskMisses+st.DiskEvictions > 0 {
				fmt.Fprintf(tw, "disk\t%d of %d bytes (%s), %d objects\n", st.DiskUsed, st.DiskCapacity, geometry.FormatSize(int64(st.DiskCapacity)), st.DiskObjects)
				fmt.Fprintf(tw, "offloads\t%d (%d failed), %d pending bytes\n", st.Offloads, st.OffloadFailures, st.PendingOffloadBytes)
				fmt.Fprintf(tw, "disk_reads\t%d hits, %d misses (corrupt or missing files, tiers gone), %d files evicted\n", st.DiskHits, st.DiskMisses, st.DiskEvictions)
			}
			return tw.Flush()
		}),
	}

	c.AddCommand(segments, keys, stat, remove, removeRe, usage)
	return c
}

// keyArg reads the KEY argument of subcommand name (store.ParseKeyText):
// a usage error (exit 2) when it starts with '"' but is not Go-quoted.
func keyArg(name, arg string) (string, error) {
	key, err := store.ParseKeyText(arg)
	if err != nil {
		return "", &exitError{2, fmt.Sprintf("mooncake ctl %s: %s", name, oneLineErr(err))}
	}
	return key, nil
}

func state(k client.KeyInfo) string {
	if k.Complete {
		return "complete"
	}
	return "writing"
}

func leaseText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func pinText(k client.KeyInfo) string {
	var p []string
	if k.HardPin {
		p = append(p, "hard")
	}
	if k.SoftPin {
		if k.SoftPinLeft > 0 {
			p = append(p, "soft("+k.SoftPinLeft.Round(time.Second).String()+")")
		} else {
			p = append(p, "soft(lapsed)")
		}
	}
	if len(p) == 0 {
		return "-"
	}
	return strings.Join(p, ",")
}

// oneLineErr flattens an error's message onto one line.
func oneLineErr(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
