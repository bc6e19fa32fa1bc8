package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

// bin is the mooncake binary TestMain builds.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mooncake-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "mooncake")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one finished run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// mooncake runs the binary with args and a deadline.
func mooncake(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mooncake %s: still running after %v\nstderr: %s", strings.Join(args, " "), timeout, stderr.String())
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("mooncake %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// oneLine checks that stderr is exactly one non-empty line and no Go
// stack trace.
func oneLine(t *testing.T, stderr string) string {
	t.Helper()
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(stderr, bad) {
			t.Fatalf("stderr has %q (a stack trace?):\n%s", bad, stderr)
		}
	}
	line, ok := strings.CutSuffix(stderr, "\n")
	if !ok || line == "" || strings.Contains(line, "\n") {
		t.Fatalf("stderr is not exactly one line:\n%q", stderr)
	}
	return line
}

// jsonKeys are the keys the issue requires in `replay --json`.
var jsonKeys = []string{
	"requests", "blocks_total", "blocks_hit", "block_hit_ratio", "token_hit_ratio",
	"requests_with_hit", "bytes_written", "bytes_read", "elapsed_s", "write_gbps", "read_gbps",
	"put_p50_ms", "put_p99_ms", "get_p50_ms", "get_p99_ms", "evicted_objects",
	"content_mismatches", "capacity_tokens", "lru_reference_block_hit_ratio", "lru_reference_token_hit_ratio",
}

// report decodes stdout, which must be exactly one JSON object on one
// line holding every required key as a number.
func report(t *testing.T, r result) map[string]float64 {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("stdout is not one line:\n%s", r.stdout)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, r.stdout)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON value: %v\n%s", err, r.stdout)
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	for _, k := range jsonKeys {
		if _, ok := out[k]; !ok {
			t.Errorf("JSON report lacks numeric %q:\n%s", k, r.stdout)
		}
	}
	if out["content_mismatches"] != 0 {
		t.Errorf("content_mismatches = %v", out["content_mismatches"])
	}
	return out
}

func TestReplayJSONEmbeddedTrace(t *testing.T) {
	r := mooncake(t, 60*time.Second, "replay", "--limit", "50", "--json")
	rep := report(t, r)
	if r.stderr != "" {
		t.Errorf("stderr not empty:\n%s", r.stderr)
	}
	if rep["requests"] != 50 {
		t.Errorf("requests = %v, want 50", rep["requests"])
	}
	if rep["capacity_tokens"] != defaultCapacityTokens || rep["bytes_per_token"] != defaultBytesPerToken ||
		rep["pool_bytes"] != defaultCapacityTokens*defaultBytesPerToken {
		t.Errorf("capacity %v tokens at %v B/token, pool %v bytes; want the defaults %d at %d",
			rep["capacity_tokens"], rep["bytes_per_token"], rep["pool_bytes"], defaultCapacityTokens, defaultBytesPerToken)
	}
	if rep["blocks_total"] <= 0 || rep["blocks_hit"] > rep["blocks_total"] || rep["bytes_written"] <= 0 {
		t.Errorf("implausible report: %v", rep)
	}
	// The first 50 lines fit the 3M-token pool many times over, so the
	// pool matches the LRU reference exactly.
	if rep["block_hit_ratio"] != rep["lru_reference_block_hit_ratio"] || rep["token_hit_ratio"] != rep["lru_reference_token_hit_ratio"] {
		t.Errorf("hit ratios %v/%v differ from the bound %v/%v with no eviction", rep["block_hit_ratio"],
			rep["token_hit_ratio"], rep["lru_reference_block_hit_ratio"], rep["lru_reference_token_hit_ratio"])
	}
}

func TestReplayHumanReport(t *testing.T) {
	r := mooncake(t, 60*time.Second, "replay", "--limit", "5")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"LRU reference", "OPT bound", "conversation_trace.jsonl (embedded) (5 requests)", "0 content mismatches"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}
}

// traceLines returns the first n lines of the conversation trace.
func traceLines(t *testing.T, n int) []string {
	t.Helper()
	b, err := os.ReadFile("../../replay/traces/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitN(string(b), "\n", n+1)[:n]
}

func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplayTraceFile(t *testing.T) {
	lines := traceLines(t, 3)
	p := writeTrace(t, lines...)
	rep := report(t, mooncake(t, 60*time.Second, "replay", "--trace", p, "--json"))
	if rep["requests"] != 3 {
		t.Errorf("requests = %v, want 3 (the whole file)", rep["requests"])
	}
	rep = report(t, mooncake(t, 60*time.Second, "replay", "--trace", p, "--limit", "2", "--json"))
	if rep["requests"] != 2 {
		t.Errorf("requests = %v with --limit 2", rep["requests"])
	}
}

func TestReplayMalformedLine(t *testing.T) {
	good := []string{traceLines(t, 1)[0], `{"timestamp": 100, "input_length": 513, "output_length": 1, "hash_ids": [0, 1]}`}
	for _, tc := range []struct {
		name, line, reason string
	}{
		{"ids do not cover input", `{"timestamp": 9000, "input_length": 600, "output_length": 1, "hash_ids": [1]}`,
			"hash_ids has 1 ids but input_length 600 needs 2"},
		{"missing field", `{"timestamp": 9000, "input_length": 600, "output_length": 1}`, `missing field "hash_ids"`},
		{"invalid JSON", `{"timestamp": 9000,`, "invalid JSON"},
		{"timestamp goes back", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "timestamp 0 is before the previous line's timestamp 100"},
		{"empty line", ``, "empty line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTrace(t, good[0], good[1], tc.line, good[1])
			r := mooncake(t, 30*time.Second, "replay", "--trace", p)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			line := oneLine(t, r.stderr)
			if !strings.HasPrefix(line, p+":3: ") || !strings.Contains(line, tc.reason) {
				t.Errorf("stderr %q, want %q", line, p+":3: "+tc.reason+"...")
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty:\n%s", r.stdout)
			}
		})
	}
}

func TestReplayMissingTrace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no-such-trace.jsonl")
	r := mooncake(t, 30*time.Second, "replay", "--trace", p)
	if r.code == 0 {
		t.Fatalf("exit 0 for a missing trace")
	}
	if line := oneLine(t, r.stderr); !strings.Contains(line, p) {
		t.Errorf("stderr %q does not name %s", line, p)
	}
}

// freePorts returns n distinct ports that were free on 127.0.0.1.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // held until all are chosen, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func TestReplayUnreachableMaster(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
	start := time.Now()
	r := mooncake(t, 15*time.Second, "replay", "--master", addr, "--limit", "5")
	if r.code == 0 {
		t.Fatalf("exit 0 with no master at %s", addr)
	}
	line := oneLine(t, r.stderr)
	if want := "mooncake replay: cannot reach master " + addr + ": connection refused"; line != want || r.code != 1 {
		t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, line, want)
	}
	t.Logf("failed in %v: %s", time.Since(start), line)
}

func TestReplayBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the message
	}{
		{"pool size and capacity", []string{"--pool-size", "1GiB", "--capacity-tokens", "5"}, []string{"--pool-size", "--capacity-tokens"}},
		{"unknown model", []string{"--model", "nope"}, append([]string{"nope"}, geometry.Names()...)},
		{"pool size not a size", []string{"--pool-size", "abc"}, []string{"--pool-size", "abc"}},
		{"pool size zero", []string{"--pool-size", "0"}, []string{"--pool-size"}},
		{"negative capacity", []string{"--capacity-tokens", "-5"}, []string{"--capacity-tokens"}},
		{"capacity not a number", []string{"--capacity-tokens", "abc"}, []string{"--capacity_tokens", "abc"}},
		{"negative bytes per token", []string{"--bytes-per-token", "-1"}, []string{"--bytes-per-token"}},
		{"model and bytes per token disagree", []string{"--model", "llama3-8b", "--bytes-per-token", "16"}, []string{"contradicts"}},
		{"no nodes", []string{"--nodes", "0"}, []string{"--nodes"}},
		{"negative speed", []string{"--speed", "-1"}, []string{"--speed"}},
		{"unknown flag", []string{"--bogus"}, []string{"--bogus"}},
		{"speed not finite", []string{"--speed", "NaN"}, []string{"--speed"}},
		{"negative limit", []string{"--limit", "-1"}, []string{"--limit"}},
		{"pool smaller than a token", []string{"--pool-size", "1B"}, []string{"less than one token"}},
		{"pool larger than the machine", []string{"--model", "llama3-70b", "--capacity-tokens", "100000000"}, []string{"available memory"}},
		{"eviction ratio out of range", []string{"--eviction-ratio", "5"}, []string{"--eviction-ratio"}},
		// An explicit 0 is not "the default" (--limit 1: today's main
		// replays one request instead of refusing).
		{"zero capacity", []string{"--capacity-tokens", "0", "--limit", "1"}, []string{"--capacity-tokens 0: must be > 0", "omit it for the default"}},
		{"zero bytes per token", []string{"--bytes-per-token", "0", "--limit", "1"}, []string{"--bytes-per-token 0: must be > 0", "omit it for the default"}},
		{"zero bytes per token with a model", []string{"--bytes_per_token", "0", "--model", "llama3-8b", "--limit", "1"}, []string{"--bytes-per-token 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mooncake(t, 30*time.Second, append([]string{"replay"}, tc.args...)...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			line := oneLine(t, r.stderr)
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("stderr %q lacks %q", line, w)
				}
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty:\n%s", r.stdout)
			}
		})
	}
}

// TestReplayFailsWhenBlocksCannotBeStored: a pool smaller than one block
// stores nothing; the replay reports it and exits 1 instead of 0.
func TestReplayFailsWhenBlocksCannotBeStored(t *testing.T) {
	r := mooncake(t, 60*time.Second, "replay", "--capacity-tokens", "100", "--limit", "5", "--json")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", r.code, r.stderr)
	}
	if line := oneLine(t, r.stderr); !strings.Contains(line, "could not be stored") {
		t.Fatalf("stderr %q", line)
	}
	if !strings.Contains(r.stdout, `"put_failures":`) || strings.Contains(r.stdout, `"put_failures":0,`) {
		t.Fatalf("report shows no put failures: %s", r.stdout)
	}
}

func TestReplayModelGeometry(t *testing.T) {
	// 64 MiB blocks: two requests (29 blocks) are ~2 GB of copies.
	rep := report(t, mooncake(t, 120*time.Second, "replay", "--model", "llama3-8b", "--capacity-tokens", "20000", "--limit", "2", "--json"))
	if rep["bytes_per_token"] != 131072 || rep["capacity_tokens"] != 20000 || rep["pool_bytes"] != 20000*131072 {
		t.Errorf("bytes_per_token %v, capacity_tokens %v, pool_bytes %v; want 131072, 20000, %d",
			rep["bytes_per_token"], rep["capacity_tokens"], rep["pool_bytes"], 20000*131072)
	}
	if rep["requests"] != 2 || rep["bytes_written"] <= 0 || int64(rep["bytes_written"])%131072 != 0 {
		t.Errorf("requests %v, bytes_written %v", rep["requests"], rep["bytes_written"])
	}
}

func TestMasterHelpDefaults(t *testing.T) {
	r := mooncake(t, 30*time.Second, "master", "--help")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for flag, def := range map[string]string{
		"rpc_port": "50051", "metrics_port": "9003", "eviction_high_watermark_ratio": "0.9",
		"eviction_ratio": "0.05", "default_kv_lease_ttl": "10000",
	} {
		re := regexp.MustCompile(`(?m)^\s+--` + flag + ` \S+ .*\(default ` + regexp.QuoteMeta(def) + `\)$`)
		if !re.MatchString(r.stdout) {
			t.Errorf("help lacks --%s with default %s:\n%s", flag, def, r.stdout)
		}
	}
}

func TestMasterPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	r := mooncake(t, 30*time.Second, "master", "--rpc_address", "127.0.0.1", "--rpc_port", port,
		"--metrics_port", "0", "--enable_http_metadata_server=false")
	if r.code == 0 {
		t.Fatalf("exit 0 with port %s taken", port)
	}
	if line := oneLine(t, r.stderr); !strings.Contains(line, port) {
		t.Errorf("stderr %q does not name port %s", line, port)
	}
}

// daemon is a running mooncake process whose stderr is collected.
type daemon struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when stderr is drained
	line   chan struct{} // gets a token (if empty) after each stderr line
	mu     sync.Mutex
	stderr strings.Builder // guarded by mu
}

// waitFor waits until the process's stderr holds want, and fails the
// test after timeout or when the process exits without writing it.
func (d *daemon) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(d.log(), want) {
		select {
		case <-d.line:
		case <-d.done:
			if !strings.Contains(d.log(), want) {
				t.Fatalf("%s exited without writing %q:\n%s", d.cmd.Args[1], want, d.log())
			}
		case <-deadline:
			t.Fatalf("%s: no %q within %v:\n%s", d.cmd.Args[1], want, timeout, d.log())
		}
	}
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// startDaemon starts the binary and returns once it has written its first
// stderr line (master and node print it when ready), which is returned.
// Cleanup kills the process if it still runs.
func startDaemon(t *testing.T, args ...string) (*daemon, string) {
	t.Helper()
	d := &daemon{cmd: exec.Command(bin, args...), done: make(chan struct{}), line: make(chan struct{}, 1)}
	pipe, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
			d.cmd.Wait()
		}
	})
	first := make(chan string, 1)
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(pipe)
		for n := 0; sc.Scan(); n++ {
			d.mu.Lock()
			d.stderr.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.line <- struct{}{}:
			default:
			}
			if n == 0 {
				first <- sc.Text()
			}
		}
		close(first)
	}()
	select {
	case line, ok := <-first:
		if !ok {
			<-d.done
			d.cmd.Wait()
			t.Fatalf("mooncake %s exited (%v) before it was ready:\n%s", strings.Join(args, " "), d.cmd.ProcessState, d.log())
		}
		return d, line
	case <-time.After(30 * time.Second):
		t.Fatalf("mooncake %s: not ready after 30 s:\n%s", strings.Join(args, " "), d.log())
		return nil, ""
	}
}

// stop interrupts the process and checks it exits 0.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		<-d.done
		exited <- d.cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s: exit after SIGINT: %v\n%s", d.cmd.Args[1], err, d.log())
		}
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-exited
		t.Errorf("%s: still running 20 s after SIGINT\n%s", d.cmd.Args[1], d.log())
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTwoProcessPool runs a master and a node as separate processes and
// replays against them.
func TestTwoProcessPool(t *testing.T) {
	ports := freePorts(t, 3)
	rpc := "127.0.0.1:" + strconv.Itoa(ports[0])
	metrics := "127.0.0.1:" + strconv.Itoa(ports[1])
	meta := "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metadata"

	m, ready := startDaemon(t, "master", "--rpc_port", strconv.Itoa(ports[0]), "--metrics_port", strconv.Itoa(ports[1]),
		"--http_metadata_server_port", strconv.Itoa(ports[2]), "--rpc_address", "127.0.0.1",
		"--metrics_host", "127.0.0.1", "--http_metadata_server_host", "127.0.0.1")
	if !strings.Contains(ready, rpc) || !strings.Contains(ready, meta) {
		t.Errorf("master's ready line %q does not name %s and %s", ready, rpc, meta)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := httpGet(t, "http://"+metrics+"/health")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health: %d %s\nmaster:\n%s", code, body, m.log())
		}
		<-time.After(20 * time.Millisecond) // the ready line comes after the listeners, so rarely reached
	}

	n, ready := startDaemon(t, "node", "--master", rpc, "--metadata_server", meta, "--segment-size", "64MiB", "--bind", "127.0.0.1:0")
	if !strings.Contains(ready, "contributes 64.0 MiB to "+rpc) || strings.Contains(ready, "node:  ") {
		t.Errorf("node's ready line %q", ready)
	}
	// A node's segment is standalone: placement fills it before engines'.
	if segs := ctlOK(t, rpc, "segments"); len(segs) != 2 || !strings.HasSuffix(strings.TrimSpace(segs[1]), " standalone") {
		t.Errorf("ctl segments with one node:\n%s", strings.Join(segs, "\n"))
	}

	rep := report(t, mooncake(t, 60*time.Second, "replay", "--master", rpc, "--metadata-server", meta, "--limit", "100", "--json"))
	if rep["requests"] != 100 {
		t.Errorf("requests = %v, want 100", rep["requests"])
	}
	if rep["pool_bytes"] != 64<<20 {
		t.Errorf("pool_bytes = %v, want %d", rep["pool_bytes"], 64<<20)
	}
	// With no size flag the bound models the pool that is there.
	if rep["capacity_tokens"] != 64<<20/defaultBytesPerToken {
		t.Errorf("capacity_tokens = %v, want the pool's %d", rep["capacity_tokens"], 64<<20/defaultBytesPerToken)
	}

	code, body := httpGet(t, "http://"+metrics+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	re := regexp.MustCompile(`(?m)^master_key_count (\d+)$`)
	if mm := re.FindStringSubmatch(body); mm == nil || mm[1] == "0" {
		t.Errorf("/metrics has no positive master_key_count:\n%s", body)
	}

	// The node unmounts from a live master, then the master stops.
	n.stop(t)
	m.stop(t)
}

// TestMasterStrategyFlag: --allocation_strategy reaches the master's config
// validation (a bad name is refused with a clear line).
func TestMasterStrategyFlag(t *testing.T) {
	r := mooncake(t, 30*time.Second, "master", "--allocation_strategy", "bogus", "--rpc_address", "127.0.0.1", "--rpc_port", "0", "--metrics_port", "0", "--enable_http_metadata_server=false")
	if r.code == 0 {
		t.Fatal("master accepted --allocation_strategy bogus")
	}
	if line := oneLine(t, r.stderr); !strings.Contains(line, "allocation_strategy") || !strings.Contains(line, "free_ratio_first") {
		t.Fatalf("stderr %q", line)
	}
	h := mooncake(t, 30*time.Second, "master", "--help")
	for _, want := range []string{"--allocation_strategy", "--default_kv_soft_pin_ttl", "1800000", "--allow_evict_soft_pinned_objects"} {
		if !strings.Contains(h.stdout+h.stderr, want) {
			t.Errorf("master --help lacks %q", want)
		}
	}
}

// TestUsageErrors: stray arguments and unknown commands are usage errors
// (exit status 2, one line naming the command), as bad flags are; no
// command prints the help; --version prints the version.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `mooncake: unknown command "bogus" for "mooncake"`},
		{[]string{"master", "stray"}, `mooncake master: unknown command "stray"`},
		{[]string{"replay", "extra"}, `mooncake replay: unknown command "extra"`},
		{[]string{"node", "--nope"}, `mooncake node: unknown flag: --nope`},
	} {
		r := mooncake(t, 30*time.Second, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("mooncake %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := mooncake(t, 30*time.Second); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("mooncake with no command: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := mooncake(t, 30*time.Second, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "mooncake version ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("--version: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestFlagSpellings: every flag takes either spelling, dashes or
// underscores (upstream's flags use underscores).
func TestFlagSpellings(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "--capacity-tokens", "100", "--limit", "2", "--json"},
		{"replay", "--capacity_tokens", "100", "--limit", "2", "--json"},
	} {
		// Exit 1 is the tiny pool refusing blocks; a flag error would be 2.
		if r := mooncake(t, 60*time.Second, args...); r.code == 2 || strings.Contains(r.stderr, "flag") || !strings.Contains(r.stdout, `"requests"`) {
			t.Errorf("mooncake %q: exit %d, stdout %.80q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestMetadataServer runs the standalone HTTP metadata server: keys round
// trip through PUT/GET/DELETE, an unknown key is 404, SIGINT stops it, and
// a taken port is one error line.
func TestMetadataServer(t *testing.T) {
	d, ready := startDaemon(t, "metadata-server", "--host", "127.0.0.1", "--port", "0")
	m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/metadata)$`).FindStringSubmatch(ready)
	if m == nil {
		t.Fatalf("ready line %q names no URL", ready)
	}
	url := m[1] + "?key=mooncake/ram/x"
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(`{"name":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	if code, body := httpGet(t, url); code != http.StatusOK || body != `{"name":"x"}` {
		t.Fatalf("GET: %d %q", code, body)
	}
	if code, _ := httpGet(t, m[1]+"?key=nothing"); code != http.StatusNotFound {
		t.Fatalf("GET unknown key: %d, want 404", code)
	}
	port := regexp.MustCompile(`:(\d+)/metadata$`).FindStringSubmatch(m[1])[1]
	r := mooncake(t, 30*time.Second, "metadata-server", "--host", "127.0.0.1", "--port", port)
	if r.code != 1 {
		t.Errorf("second server on port %s: exit %d, want 1", port, r.code)
	}
	if line := oneLine(t, r.stderr); !strings.Contains(line, port) {
		t.Errorf("stderr %q does not name port %s", line, port)
	}
	d.stop(t)
	if r := mooncake(t, 30*time.Second, "metadata-server", "--port", "70000"); r.code != 2 {
		t.Errorf("--port 70000: exit %d, want 2", r.code)
	}
}
