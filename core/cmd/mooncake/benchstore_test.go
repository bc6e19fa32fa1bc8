package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storeResult is the part of `bench store --json` the tests check.
type storeResult struct {
	Protocol    string `json:"protocol"`
	ValueSize   int    `json:"value_size"`
	Concurrency int    `json:"concurrency"`
	GetKeys     int    `json:"get_keys"`
	Put, Get    struct {
		Ops  int64   `json:"ops"`
		GBps float64 `json:"gbps"`
		P50  float64 `json:"p50_ms"`
		P99  float64 `json:"p99_ms"`
	}
}

func benchStore(t *testing.T, args ...string) storeResult {
	t.Helper()
	r := mooncake(t, 60*time.Second, append([]string{"bench", "store", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("bench store %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	var res storeResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("bench store --json printed %q: %v", r.stdout, err)
	}
	return res
}

func TestBenchStoreInProcess(t *testing.T) {
	for _, proto := range []string{"shm", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			res := benchStore(t, "--protocol", proto, "--value-size", "64KiB", "--clients", "2", "--ops", "40",
				"--segment-size", "1MiB", "--warmup", "10ms")
			if res.Protocol != proto || res.ValueSize != 64<<10 || res.Concurrency != 2 || res.Put.Ops != 40 || res.Get.Ops != 40 {
				t.Fatalf("result %+v", res)
			}
			if res.Put.GBps <= 0 || res.Get.GBps <= 0 || res.Put.P99 < res.Put.P50 || res.GetKeys == 0 {
				t.Fatalf("implausible result %+v", res)
			}
		})
	}
}

func TestBenchStoreHumanLine(t *testing.T) {
	r := mooncake(t, 60*time.Second, "bench", "store", "--value-size", "4KiB", "--clients", "1", "--ops", "10", "--segment-size", "1MiB", "--warmup", "0")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "shm put value 4.0 KiB clients 1: ") || !strings.HasPrefix(lines[1], "shm get value 4.0 KiB clients 1: ") ||
		!strings.Contains(lines[0], "ops/s") || !strings.Contains(lines[0], "GB/s") || !strings.Contains(lines[0], "p99") {
		t.Fatalf("output %q", r.stdout)
	}
}

func TestBenchStoreBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		flag string // the usage line must name it
	}{
		{[]string{"--protocol", "rdma"}, "--protocol"},
		{[]string{"--value-size", "0"}, "--value-size"},
		{[]string{"--value-size", "lots"}, "--value-size"},
		{[]string{"--value-size", "8"}, "--value-size"},
		{[]string{"--clients", "0"}, "--clients"},
		{[]string{"--nodes", "0"}, "--nodes"},
		{[]string{"--ops", "-1"}, "--ops"},
		{[]string{"--ops", "2", "--clients", "4"}, "--ops"},
		{[]string{"--ops", "0", "--duration", "0s"}, "--duration"},
		{[]string{"--warmup", "-1s"}, "--warmup"},
		{[]string{"--cpuprofile", "/nonexistent-dir/cpu.pprof"}, "--cpuprofile"},
		{[]string{"--segment-size", "-1"}, "--segment-size"},
		// Refused before any buffer is mapped: larger than the whole pool,
		// or buffers beyond the machine's memory.
		{[]string{"--value-size", "2GiB"}, "--value-size"},
		// Fits the pool of 2 x 512MiB, not one segment.
		{[]string{"--value-size", "768MiB"}, "--value-size"},
		// Room for 2 such values at once, 4 puts in flight.
		{[]string{"--value-size", "300MiB"}, "--clients"},
		// Values start 64-byte aligned: room for 1.
		{[]string{"--value-size", "4097", "--segment-size", "8194", "--clients", "2", "--nodes", "1"}, "--clients"},
		{[]string{"--nodes", "100000"}, "--nodes"},
		// Segments beyond the machine's memory.
		{[]string{"--nodes", "4", "--segment-size", "1TiB"}, "--nodes"},
		{[]string{"--value-size", "2EiB"}, "unknown unit"},
		{[]string{"--value-size", "1GiB", "--segment-size", "1TiB", "--clients", "100000"}, "--clients"},
		{[]string{"--value-size", "1MiB", "--clients", "4611686018427387904"}, "--clients"}, // clients x value overflows int64
		{[]string{"--value-size", "4KiB", "--clients", "2305843009213693952"}, "--clients"},
		{[]string{"--master", "127.0.0.1:1", "--value-size", "1MiB", "--clients", "4611686018427387904"}, "--clients"}, // memory check, no pool check
		{[]string{"--master", "no-port"}, "--master"},
		// A usage error found after --cpuprofile leaves no profile file.
		{[]string{"--master", "no-port", "--cpuprofile", filepath.Join(dir, "p.pprof")}, "--master"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := mooncake(t, 30*time.Second, append([]string{"bench", "store"}, tc.args...)...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2\n%s", r.code, r.stderr)
			}
			if line := oneLine(t, r.stderr); !strings.Contains(line, tc.flag) {
				t.Fatalf("usage line %q does not name %s", line, tc.flag)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "p.pprof")); !os.IsNotExist(err) {
		t.Fatalf("profile file after a usage error: %v", err)
	}
}

// TestBenchStoreCPUProfile: --cpuprofile writes a non-empty Go profile
// (pprof's gzip stream) of the measured phases.
func TestBenchStoreCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	res := benchStore(t, "--value-size", "64KiB", "--clients", "1", "--ops", "20", "--segment-size", "1MiB", "--warmup", "10ms", "--cpuprofile", path)
	if res.Put.Ops != 20 {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s: %d bytes, not a gzip-compressed profile", path, len(b))
	}
}

// TestBenchStoreAgainstNode runs the benchmark against a master and a node
// in other processes: with shm the client maps the node's segment (its
// memfd passed over the node's unix socket), with tcp it does not.
func TestBenchStoreAgainstNode(t *testing.T) {
	ports := freePorts(t, 3)
	rpc := "127.0.0.1:" + strconv.Itoa(ports[0])
	meta := "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metadata"
	m, _ := startDaemon(t, "master", "--rpc_port", strconv.Itoa(ports[0]), "--metrics_port", strconv.Itoa(ports[1]),
		"--http_metadata_server_port", strconv.Itoa(ports[2]), "--rpc_address", "127.0.0.1",
		"--metrics_host", "127.0.0.1", "--http_metadata_server_host", "127.0.0.1")
	n, _ := startDaemon(t, "node", "--master", rpc, "--metadata_server", meta, "--segment-size", "4MiB", "--bind", "127.0.0.1:0")
	for _, proto := range []string{"shm", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			res := benchStore(t, "--master", rpc, "--metadata_server", meta, "--bind", "127.0.0.1:0", "--protocol", proto,
				"--value-size", "64KiB", "--clients", "2", "--ops", "30", "--warmup", "10ms")
			if res.Put.Ops != 30 || res.Get.Ops != 30 || res.GetKeys == 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
	n.stop(t)
	m.stop(t)
}

// TestBenchTransferTargetSpan: --target_span moves the batches over a
// larger target, wrapping where a whole window no longer fits (a span
// that is not a multiple of the window included), for writes and reads;
// a span that is no size or smaller than the buffer, an unknown protocol
// and an unknown mode are usage errors.
func TestBenchTransferTargetSpan(t *testing.T) {
	for _, tc := range []struct{ op, span string }{{"write", "1MiB"}, {"write", "1000KiB"}, {"read", "1000KiB"}} {
		r := mooncake(t, 60*time.Second, "bench", "transfer", "--mode", "loopback", "--protocol", "tcp", "--operation", tc.op,
			"--block_size", "64KiB", "--batch_size", "2", "--threads", "2", "--duration", "200ms", "--target_span", tc.span, "--json")
		require.Equal(t, 0, r.code, "%s over %s: %s", tc.op, tc.span, r.stderr)
		var res struct {
			Bytes   int64 `json:"bytes"`
			Batches int64 `json:"batches"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
		assert.Positive(t, res.Batches, "%s over %s", tc.op, tc.span)
		assert.Equal(t, res.Batches*2*64<<10, res.Bytes, "%s over %s: bytes = batches x batch", tc.op, tc.span)
	}
	r := mooncake(t, 30*time.Second, "bench", "transfer", "--mode", "loopback", "--target_span", "lots")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--target_span")
	r = mooncake(t, 30*time.Second, "bench", "transfer", "--protocol", "bogus")
	assert.Equal(t, 2, r.code, "an unknown protocol is a usage error")
	assert.Contains(t, r.stderr, `--protocol "bogus": want tcp, shm or socket`)
	r = mooncake(t, 30*time.Second, "bench", "transfer", "--mode", "bogus")
	assert.Equal(t, 2, r.code, "an unknown mode is a usage error")
	assert.Contains(t, r.stderr, `--mode "bogus": want initiator, target or loopback`)
	// A span smaller than the buffer the batches fill would be ignored.
	r = mooncake(t, 30*time.Second, "bench", "transfer", "--block_size", "64KiB", "--batch_size", "2", "--threads", "2", "--target_span", "1KiB")
	assert.Equal(t, 2, r.code, "a span smaller than the buffer is a usage error")
	assert.Contains(t, r.stderr, "--target_span 1KiB is smaller than block_size x batch_size x threads (262144 bytes)")
}

// TestBenchTransferSocket: the plain-socket baseline prints the same JSON
// as the engine's run, and refuses what it does not measure.
func TestBenchTransferSocket(t *testing.T) {
	r := mooncake(t, 60*time.Second, "bench", "transfer", "--protocol", "socket", "--block_size", "64KiB", "--batch_size", "1",
		"--threads", "2", "--duration", "200ms", "--target_span", "1MiB", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct {
		Protocol string `json:"protocol"`
		Bytes    int64  `json:"bytes"`
		Batches  int64  `json:"batches"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	assert.Equal(t, "socket", res.Protocol)
	assert.Positive(t, res.Batches)
	assert.Equal(t, res.Batches*64<<10, res.Bytes)
	r = mooncake(t, 30*time.Second, "bench", "transfer", "--protocol", "socket", "--operation", "read")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "write only")
	r = mooncake(t, 30*time.Second, "bench", "transfer", "--protocol", "socket", "--mode", "initiator")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "loopback only")
}
