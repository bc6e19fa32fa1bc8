package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCapacities(t *testing.T) {
	got, err := parseCapacities("0.5M, 1M,3000000,12k,1MiB", 16)
	require.NoError(t, err)
	assert.Equal(t, []int64{500_000, 1_000_000, 3_000_000, 12_000, 65536}, got)
	for _, tc := range []struct{ list, want string }{
		{"1M,,3M", `item 2 "": empty`},
		{"1M,abc", `item 2 "abc": not a token count`},
		{"1M,3X", `item 2 "3X"`},
		{"0", `item 1 "0": holds less than one token`},
		{"-1M", `item 1 "-1M"`},
		{"8B", `item 1 "8B": holds less than one token at 16 B/token`},
		{"1e6", `item 1 "1e6": not a token count`},
		{"4GiX", `item 1 "4GiX"`},
	} {
		_, err := parseCapacities(tc.list, 16)
		if assert.Error(t, err, tc.list) {
			assert.Contains(t, err.Error(), tc.want, tc.list)
		}
	}
}

func TestReplaySweepUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--capacities", "1M,zz"}, `--capacities item 2 "zz"`},
		{[]string{"--capacities", "1M", "--capacity-tokens", "5"}, "not both"},
		{[]string{"--capacities", "1M", "--master", "127.0.0.1:1"}, "cannot be used with --master"},
		{[]string{"--eviction-policy", "lru,mru"}, `--eviction-policy item 2 "mru": unknown policy (want lru|s3fifo)`},
		{[]string{"--instances", "2", "--routing", "sticky"}, `--routing item 1 "sticky"`},
		{[]string{"--routing", "random"}, "need --instances N > 1"},
		{[]string{"--instances", "0"}, "--instances 0 must be >= 1"},
		{[]string{"--instances", "2", "--speed", "1"}, "--speed must be 0"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := mooncake(t, 30*time.Second, append([]string{"replay"}, tc.args...)...)
			assert.Equal(t, 2, r.code)
			assert.Contains(t, oneLine(t, r.stderr), tc.want)
			assert.Empty(t, r.stdout)
		})
	}
}

// TestReplaySweepJSONAndPlot: a sweep of two capacities and two policies
// prints a JSON list of four runs, each naming its settings, and draws a
// PNG.
func TestReplaySweepJSONAndPlot(t *testing.T) {
	png := filepath.Join(t.TempDir(), "curve.png")
	r := mooncake(t, 120*time.Second, "replay", "--limit", "200", "--capacities", "200k,1M",
		"--eviction-policy", "lru,s3fifo", "--json", "--plot", png)
	require.Equal(t, 0, r.code, r.stderr)
	var runs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
	require.Len(t, runs, 4)
	want := []struct {
		policy string
		cap    float64
	}{{"lru", 200_000}, {"lru", 1_000_000}, {"s3fifo", 200_000}, {"s3fifo", 1_000_000}}
	for i, run := range runs {
		assert.Equal(t, want[i].policy, run["eviction_policy"])
		assert.Equal(t, want[i].cap, run["capacity_tokens"])
		assert.Equal(t, "conversation_trace", run["trace"])
		assert.Equal(t, "none", run["routing"])
		assert.Equal(t, "in-process", run["pool_mode"])
		assert.EqualValues(t, 200, run["requests"])
		for _, k := range []string{"block_hit_ratio", "token_hit_ratio", "lru_reference_block_hit_ratio", "opt_bound_block_hit_ratio", "nodes", "lease_ttl_ms", "eviction_ratio"} {
			assert.Contains(t, run, k)
		}
		assert.LessOrEqual(t, run["block_hit_ratio"].(float64), run["opt_bound_block_hit_ratio"].(float64))
	}
	assertPNG(t, png)
}

func assertPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 100)
}

// TestReplayRoutedLocalCaches: four instances with local caches; the
// table names every routing.
func TestReplayRoutedLocalCaches(t *testing.T) {
	r := mooncake(t, 120*time.Second, "replay", "--limit", "1000", "--capacity-tokens", "1000000", "--instances", "4",
		"--routing", "round-robin,cache-aware", "--local-caches", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var runs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
	require.Len(t, runs, 2)
	for i, rt := range []string{"round-robin", "cache-aware"} {
		assert.Equal(t, rt, runs[i]["routing"])
		assert.EqualValues(t, 4, runs[i]["instances"])
		assert.Equal(t, true, runs[i]["local_caches"])
		assert.Len(t, runs[i]["instance_requests"], 4)
	}
	assert.Greater(t, runs[1]["block_hit_ratio"].(float64), runs[0]["block_hit_ratio"].(float64), "cache-aware routing beats round-robin over local caches")
}
