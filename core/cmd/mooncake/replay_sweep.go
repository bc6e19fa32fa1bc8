package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

// parseCapacities reads a --capacities list: comma-separated items, each
// either tokens (a number with an optional decimal k, M or G suffix:
// 500000, 0.5M, 3M) or a size in bytes (a number with a unit ending in B:
// 512MiB, 4GiB), converted to tokens at bpt bytes per token. An item that
// is neither, or holds less than one token, is an error naming it (1-based
// position and text).
func parseCapacities(list string, bpt int64) ([]int64, error) {
	items := strings.Split(list, ",")
	out := make([]int64, 0, len(items))
	for i, raw := range items {
		it := strings.TrimSpace(raw)
		bad := func(why string) error {
			return fmt.Errorf("--capacities item %d %q: %s", i+1, raw, why)
		}
		if it == "" {
			return nil, bad("empty (want tokens such as 3M or a size such as 512MiB)")
		}
		var tokens int64
		if u := it[len(it)-1]; u == 'B' || u == 'b' {
			n, err := geometry.ParseSize(it)
			if err != nil {
				return nil, bad(err.Error())
			}
			tokens = n / bpt
		} else {
			mult := 1.0
			num := it
			switch it[len(it)-1] {
			case 'k', 'K':
				mult, num = 1e3, it[:len(it)-1]
			case 'm', 'M':
				mult, num = 1e6, it[:len(it)-1]
			case 'g', 'G':
				mult, num = 1e9, it[:len(it)-1]
			}
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strings.ContainsAny(num, "eExXpP_") {
				return nil, bad("not a token count (500000, 0.5M, 3M) or a size (512MiB, 4GiB)")
			}
			if v*mult > math.MaxInt64/2 {
				return nil, bad("too large")
			}
			tokens = int64(v * mult)
		}
		if tokens <= 0 {
			return nil, bad(fmt.Sprintf("holds less than one token at %d B/token; capacities must be > 0", bpt))
		}
		out = append(out, tokens)
	}
	return out, nil
}

// formatTokens prints a token count compactly: 3M, 0.5M, 12k.
func formatTokens(n int64) string {
	switch {
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// printSweep prints one table row per run.
func printSweep(w io.Writer, src string, n int, runs []runResult) {
	fmt.Fprintf(w, "Mooncake trace replay sweep: %s (%d requests)\n", src, n)
	fmt.Fprintf(w, "%-8s %-12s %-14s %-9s %-10s %8s %8s %8s %8s %8s\n", "policy", "routing", "caches", "capacity", "pool", "blocks", "tokens", "LRU ref", "OPT", "elapsed")
	for _, r := range runs {
		caches := "one pool"
		if r.Instances > 1 {
			caches = fmt.Sprintf("%d x shared", r.Instances)
			if r.LocalCaches {
				caches = fmt.Sprintf("%d x local", r.Instances)
			}
		}
		fmt.Fprintf(w, "%-8s %-12s %-14s %-9s %-10s %8.4f %8.4f %8.4f %8.4f %7.1fs\n", r.Policy, r.Routing, caches, formatTokens(r.CapacityTokens),
			geometry.FormatSize(int64(r.PoolBytes)), r.BlockHitRatio, r.TokenHitRatio, r.LRURefBlockHitRatio, r.OPTBlockHitRatio, r.ElapsedS)
	}
}

// plotSweep draws block hit ratio against capacity (log scale): one line
// per policy (and routing) measured in the pool, plus the LRU reference
// and the OPT bound, into a PNG (or SVG/PDF by file extension) at path.
func plotSweep(path, title string, runs []runResult) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "pool capacity (tokens)"
	p.Y.Label.Text = "block hit ratio"
	p.X.Scale = plot.LogScale{}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(50)
	var ticks []plot.Tick
	for _, r := range runs {
		if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == float64(r.CapacityTokens) }) {
			ticks = append(ticks, plot.Tick{Value: float64(r.CapacityTokens), Label: formatTokens(r.CapacityTokens)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)

	var order []string
	lines := map[string]plotter.XYs{}
	add := func(name string, x int64, y float64) {
		if _, ok := lines[name]; !ok {
			order = append(order, name)
		}
		lines[name] = append(lines[name], plotter.XY{X: float64(x), Y: y})
	}
	seen := map[int64]bool{}
	for _, r := range runs {
		name := r.Policy
		if r.Instances > 1 {
			name = fmt.Sprintf("%s, %d instances %s, %s", r.Policy, r.Instances, map[bool]string{false: "sharing one pool", true: "with local caches"}[r.LocalCaches], r.Routing)
		}
		add(name, r.CapacityTokens, r.BlockHitRatio)
	}
	for _, r := range runs {
		if !seen[r.CapacityTokens] {
			seen[r.CapacityTokens] = true
			add("LRU reference", r.CapacityTokens, r.LRURefBlockHitRatio)
			add("OPT bound", r.CapacityTokens, r.OPTBlockHitRatio)
		}
	}
	var args []any
	for _, name := range order {
		xy := lines[name]
		slices.SortStableFunc(xy, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		args = append(args, name, xy)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
