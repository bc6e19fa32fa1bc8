package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
)

// Faults an operator meets (issue 15, points 3 and 4): what cannot work is
// refused up front, and every failure reads the same across commands.

// TestAvailableMemory: MemAvailable, lowered by a cgroup limit that leaves
// less; 0 (no check) when unknown.
func TestAvailableMemory(t *testing.T) {
	const meminfo = "MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"meminfo only", map[string]string{memFiles.meminfo: meminfo}, 20000000 << 10},
		{"cgroup v2 limit", map[string]string{memFiles.meminfo: meminfo, memFiles.v2max: "4294967296\n", memFiles.v2cur: "1073741824\n"}, 3 << 30},
		{"cgroup v2 no limit", map[string]string{memFiles.meminfo: meminfo, memFiles.v2max: "max\n", memFiles.v2cur: "1073741824\n"}, 20000000 << 10},
		{"cgroup v2 over its limit", map[string]string{memFiles.meminfo: meminfo, memFiles.v2max: "1024\n", memFiles.v2cur: "2048\n"}, 0},
		{"cgroup v1 limit", map[string]string{memFiles.meminfo: meminfo, memFiles.v1max: "2147483648", memFiles.v1cur: "0"}, 2 << 30},
		{"cgroup v1 unlimited", map[string]string{memFiles.meminfo: meminfo, memFiles.v1max: "9223372036854771712", memFiles.v1cur: "5"}, 20000000 << 10},
		{"a limit above MemAvailable", map[string]string{memFiles.meminfo: meminfo, memFiles.v2max: "1099511627776", memFiles.v2cur: "0"}, 20000000 << 10},
		{"no meminfo", map[string]string{memFiles.v2max: "1024"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := availableMemoryFrom(func(p string) ([]byte, error) {
				if s, ok := tc.files[p]; ok {
					return []byte(s), nil
				}
				return nil, os.ErrNotExist
			})
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Positive(t, availableMemory(), "this machine's /proc/meminfo")
}

func TestCheckMemory(t *testing.T) {
	require.NoError(t, checkMemory("x", 1<<30, 0, 1), "unknown memory passes")
	require.NoError(t, checkMemory("x", 1<<30, 1<<30, 1))
	require.NoError(t, checkMemory("x", 1<<29, 1<<30, 0.5))
	err := checkMemory("--segment-size 1TiB", 1<<40, 23<<30, 1)
	require.EqualError(t, err, "--segment-size 1TiB (1.0 TiB) exceeds this machine's available memory (23.0 GiB)")
	err = checkMemory("an in-process pool", 1<<30, 1<<30, 0.5)
	require.EqualError(t, err, "an in-process pool (1.0 GiB) exceeds half of this machine's available memory (1.0 GiB)")
}

// deadMaster is a 127.0.0.1 address nothing listens on.
func deadMaster(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
}

// TestNodeSegmentOverMemory: a segment larger than the machine's available
// memory is refused before anything starts (today's main maps it and
// "contributes 1.0 TiB"); --overcommit skips the check.
func TestNodeSegmentOverMemory(t *testing.T) {
	avail := availableMemory()
	if avail <= 0 || avail >= 1<<40 {
		t.Skipf("available memory %d: cannot ask for more than this machine has with 1 TiB", avail)
	}
	addr := deadMaster(t)
	r := mooncake(t, 30*time.Second, "node", "--master", addr, "--segment-size", "1TiB", "--bind", "127.0.0.1:0")
	line := oneLine(t, r.stderr)
	assert.Equal(t, 2, r.code, line)
	assert.Contains(t, line, "mooncake node: --segment-size 1TiB (1.0 TiB) exceeds this machine's available memory (")
	assert.Contains(t, line, "--overcommit")
	assert.Empty(t, r.stdout)

	// With --overcommit the check is skipped: the node goes on to its
	// master, which is not there.
	r = mooncake(t, 30*time.Second, "node", "--master", addr, "--segment-size", "1TiB", "--overcommit", "--bind", "127.0.0.1:0")
	line = oneLine(t, r.stderr)
	assert.Equal(t, 1, r.code, line)
	assert.Equal(t, "mooncake node: cannot reach master "+addr+": connection refused", line)

	// Asking for both is a usage error (before, --prefault was silently
	// dropped); --prefault=false with --overcommit is fine.
	r = mooncake(t, 30*time.Second, "node", "--master", addr, "--segment-size", "1TiB", "--overcommit", "--prefault", "--bind", "127.0.0.1:0")
	line = oneLine(t, r.stderr)
	assert.Equal(t, 2, r.code, line)
	assert.Contains(t, line, "--prefault with --overcommit")
	r = mooncake(t, 30*time.Second, "node", "--master", addr, "--segment-size", "1TiB", "--overcommit", "--prefault=false", "--bind", "127.0.0.1:0")
	assert.Equal(t, 1, r.code, r.stderr)
}

// startMasterProcess runs `mooncake master` on 127.0.0.1 at free ports (or
// the ports given) with extra flags, and returns it with its gRPC address
// and metadata URL.
func startMasterProcess(t *testing.T, ports []int, extra ...string) (*daemon, string, string) {
	t.Helper()
	if ports == nil {
		ports = freePorts(t, 2)
	}
	args := append([]string{"master", "--rpc_address", "127.0.0.1", "--rpc_port", strconv.Itoa(ports[0]),
		"--metrics_port", "0", "--http_metadata_server_host", "127.0.0.1", "--http_metadata_server_port", strconv.Itoa(ports[1])}, extra...)
	d, _ := startDaemon(t, args...)
	return d, "127.0.0.1:" + strconv.Itoa(ports[0]), "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metadata"
}

// TestNodeFailedStartLeavesNoSegment: a node whose start fails after it
// mounted its segment (here: a disk tier the master, without
// --enable_offload, refuses) unmounts it again; today's main leaves it
// listed until the node's TTL, and the master places replicas on memory
// that no longer exists.
func TestNodeFailedStartLeavesNoSegment(t *testing.T) {
	m, rpc, meta := startMasterProcess(t, nil)
	r := mooncake(t, 30*time.Second, "node", "--master", rpc, "--metadata_server", meta, "--segment-size", "16MiB",
		"--bind", "127.0.0.1:0", "--storage_root_dir", t.TempDir(), "--quota_bytes", "16MiB")
	line := oneLine(t, r.stderr)
	assert.Equal(t, 1, r.code, line)
	assert.Contains(t, line, "UNABLE_OFFLOAD")
	segs := ctlOK(t, rpc, "segments")
	assert.Len(t, segs, 1, "segments left by the failed node:\n%s", strings.Join(segs, "\n"))
	m.stop(t)
}

// TestReplayEmptyTrace: an empty trace is refused with a line that says
// so (today's main prints a report of zeros and exits 0).
func TestReplayEmptyTrace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "empty.jsonl")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	r := mooncake(t, 30*time.Second, "replay", "--trace", p)
	line := oneLine(t, r.stderr)
	assert.Equal(t, 2, r.code)
	assert.Equal(t, "mooncake replay: trace "+p+" is empty: it holds no requests (one JSON object per line: timestamp, input_length, output_length, hash_ids)", line)
	assert.Empty(t, r.stdout)
}

// TestReplayHugeTraceLine: one 16 MB trace line (about 760,000 blocks)
// replays without any call hitting gRPC's 4 MiB message limit (today's
// main fails its lookup with "received message larger than max"). The
// default pool is far smaller than the request, so most blocks cannot be
// stored: the replay says so (exit 1) and the report counts every block.
func TestReplayHugeTraceLine(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"timestamp": 0, "input_length": `)
	var ids strings.Builder
	n := 0
	for ids.Len() < 16<<20 {
		if n > 0 {
			ids.WriteString(", ")
		}
		ids.WriteString(strconv.FormatUint(1_000_000_000_000_000_000+uint64(n), 10))
		n++
	}
	fmt.Fprintf(&b, `%d, "output_length": 1, "hash_ids": [%s]}`, n*512, ids.String())
	p := filepath.Join(t.TempDir(), "huge.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(b.String()+"\n"), 0o644))
	require.GreaterOrEqual(t, b.Len(), 16<<20)

	r := mooncake(t, 5*time.Minute, "replay", "--trace", p, "--bytes-per-token", "1", "--json")
	for _, bad := range []string{"larger than max", "RPC_FAIL", "ResourceExhausted"} {
		require.NotContains(t, r.stderr, bad)
	}
	if r.code != 0 {
		line := oneLine(t, r.stderr)
		require.Equal(t, 1, r.code, line)
		require.Contains(t, line, "blocks could not be stored")
	}
	r.code = 0 // report() wants a run that finished
	rep := report(t, r)
	assert.Equal(t, 1.0, rep["requests"])
	assert.Equal(t, float64(n), rep["blocks_total"])
	assert.Positive(t, rep["bytes_written"])
}

// TestCtlRemoveRegexSkipped: remove-regex says how many matching keys it
// left and why, and that --force removes the leased ones.
func TestCtlRemoveRegexSkipped(t *testing.T) {
	p := startCtlMaster(t)
	// app/1 and big go; app/2 (leased) and pinned (hard-pinned) stay
	// without --force; app/3 is being written.
	assert.Equal(t, []string{
		"removed 2 keys",
		"skipped 2 leased or hard-pinned keys (--force removes them)",
		"skipped 1 keys being written",
	}, ctlOK(t, p.RPCAddr, "remove-regex", "."))
	assert.Equal(t, []string{"removed 2 keys", "skipped 1 keys being written"}, ctlOK(t, p.RPCAddr, "remove-regex", "--force", "."))
	assert.Equal(t, []string{"removed 0 keys"}, ctlOK(t, p.RPCAddr, "remove-regex", "^nothing$"))
}

// TestCtlEtcdMaster: `ctl --master etcd://...` finds the leader of an HA
// cluster through etcd, as the README says (today's main: "too many
// colons in address").
func TestCtlEtcdMaster(t *testing.T) {
	ep := etcdtest.Start(t)
	p, err := server.Start(server.ProcessConfig{RPCAddr: "127.0.0.1:0", Master: master.Config{ClientTTL: time.Hour},
		HA: &server.HAConfig{Endpoints: []string{ep}, ClusterID: "ctl_test", Logf: t.Logf}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	deadline := time.Now().Add(30 * time.Second)
	for p.Role() != "leader" {
		require.True(t, time.Now().Before(deadline), "no leader after 30 s: %s", p.Role())
		<-time.After(10 * time.Millisecond) // leadership is etcd's; the process has no channel for it
	}
	var mountErr error
	p.Server.Do(func(m *master.Master) {
		mountErr = m.MountSegment(master.Segment{ID: "seg-ha", Name: "node-ha", Base: 1 << 32, Size: 1 << 20, Protocol: "tcp"}, "c1")
	})
	require.NoError(t, mountErr)

	addr := "etcd://" + ep
	segs := ctlOK(t, addr, "--cluster_id", "ctl_test", "segments")
	require.Len(t, segs, 2, strings.Join(segs, "\n"))
	assert.Equal(t, []string{"seg-ha", "node-ha", "1048576"}, strings.Fields(segs[1])[:3])
	usage := ctlOK(t, addr, "--cluster_id", "ctl_test", "usage")
	assert.Equal(t, []string{"segments", "1"}, row(t, usage, "segments"))

	// Another cluster on the same etcd has no leader: the line says so.
	r := mooncake(t, 30*time.Second, "ctl", "--master", addr, "--cluster_id", "no_such_cluster", "--timeout", "10s", "usage")
	line := oneLine(t, r.stderr)
	assert.Equal(t, 1, r.code, line)
	assert.Equal(t, "mooncake ctl usage: cannot reach master "+addr+": no master leads the cluster (none is registered in etcd)", line)
}

// TestNodeLogsMasterLossAndRemount: a node says when it loses its master
// and when it has remounted at the restarted one (today's main says
// nothing), and its segment is listed again; stopped while the master is
// gone, it says it could not unmount, in the same words, and exits 1.
func TestNodeLogsMasterLossAndRemount(t *testing.T) {
	ports := freePorts(t, 2)
	m, rpc, meta := startMasterProcess(t, ports)
	n, ready := startDaemon(t, "node", "--master", rpc, "--metadata_server", meta, "--segment-size", "16MiB", "--bind", "127.0.0.1:0")
	require.Contains(t, ready, "contributes 16.0 MiB to "+rpc)

	require.NoError(t, m.cmd.Process.Kill())
	<-m.done
	_ = m.cmd.Wait()
	n.waitFor(t, "mooncake node: lost the master: cannot reach master "+rpc+": connection refused (retrying every 1s)\n", 30*time.Second)
	assert.Equal(t, 1, strings.Count(n.log(), "lost the master"), "one line per outage:\n%s", n.log())

	m2, _, _ := startMasterProcess(t, ports)
	n.waitFor(t, "mooncake node: remounted at master "+rpc+" (it restarted or dropped this client): segment ", 30*time.Second)
	assert.Contains(t, n.log(), ", 16777216 bytes\n")
	segs := ctlOK(t, rpc, "segments")
	assert.Len(t, segs, 2, strings.Join(segs, "\n"))

	// Stopped while its master is gone, the node cannot unmount: it says
	// so in the same words and exits 1.
	require.NoError(t, m2.cmd.Process.Kill())
	<-m2.done
	_ = m2.cmd.Wait()
	// Once the node has noticed this outage too, its client knows the old
	// connection is dead and the unmount dials anew (refused), rather than
	// racing the dead connection's EOF.
	n.waitFor(t, ", 16777216 bytes\nmooncake node: lost the master: ", 30*time.Second)
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGINT))
	<-n.done
	err := n.cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "node exit after SIGINT with its master gone:\n%s", n.log())
	assert.Equal(t, 1, ee.ExitCode())
	assert.True(t, strings.HasSuffix(n.log(), "mooncake node: unmount on exit: cannot reach master "+rpc+": connection refused\n"), n.log())
}

// TestExitStatuses: every command exits 2 for a usage error (the command
// line asks for something invalid or impossible here) and 1 for a runtime
// error (it was fine, running it failed), with one line on stderr naming
// the command; a master that is not there reads the same everywhere.
func TestExitStatuses(t *testing.T) {
	dead := deadMaster(t)
	refused := "cannot reach master " + dead + ": connection refused"
	m, rpc, _ := startMasterProcess(t, nil) // a live master: its port is taken
	rpcPort := strings.TrimPrefix(rpc, "127.0.0.1:")
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	rows := []struct {
		name string
		args []string
		code int
		want string // the line starts with "mooncake " + the command, and holds this
	}{
		// Usage errors.
		{"master bad flag value", []string{"master", "--rpc_port", "x"}, 2, `invalid argument "x"`},
		{"master port out of range", []string{"master", "--rpc_port", "70000"}, 2, "--rpc_port=70000 is not a port"},
		{"master negative port", []string{"master", "--rpc_port", "0", "--metrics_port", "-1"}, 2, "--metrics_port=-1 is not a port"},
		{"master bad strategy", []string{"master", "--allocation_strategy", "bogus", "--rpc_port", "0", "--metrics_port", "0", "--enable_http_metadata_server=false"}, 2, `allocation_strategy "bogus"`},
		{"node bad size", []string{"node", "--segment-size", "0"}, 2, "--segment-size"},
		{"node stray argument", []string{"node", "extra"}, 2, `unknown command "extra"`},
		{"node bad metadata server", []string{"node", "--master", dead, "--metadata_server", "ftp://x"}, 2, "--metadata_server"},
		{"replay missing trace", []string{"replay", "--trace", missing}, 2, "cannot read trace " + missing},
		{"replay zero capacity", []string{"replay", "--capacity-tokens", "0"}, 2, "--capacity-tokens 0"},
		{"ctl no command", []string{"ctl"}, 2, "missing command"},
		{"ctl stat without key", []string{"ctl", "--master", dead, "stat"}, 2, "want 1 argument"},
		{"ctl empty master", []string{"ctl", "--master", "", "usage"}, 2, "no master address"},
		{"ctl etcd master without endpoint", []string{"ctl", "--master", "etcd://", "usage"}, 2, "names no etcd endpoint"},
		{"bench store bad size", []string{"bench", "store", "--value-size", "0"}, 2, "--value-size"},
		{"bench transfer bad size", []string{"bench", "transfer", "--block_size", "x"}, 2, "--block_size"},
		{"info stray argument", []string{"info", "extra"}, 2, `unknown command "extra"`},
		// Runtime errors.
		{"master port in use", []string{"master", "--rpc_address", "127.0.0.1", "--rpc_port", rpcPort, "--metrics_port", "0", "--enable_http_metadata_server=false"}, 1, rpc},
		{"node dead master", []string{"node", "--master", dead, "--segment-size", "16MiB", "--bind", "127.0.0.1:0"}, 1, refused},
		{"replay dead master", []string{"replay", "--master", dead, "--limit", "1"}, 1, refused},
		{"bench store dead master", []string{"bench", "store", "--master", dead, "--clients", "1", "--ops", "1"}, 1, refused},
		{"ctl segments dead master", []string{"ctl", "--master", dead, "segments"}, 1, refused},
		{"ctl keys dead master", []string{"ctl", "--master", dead, "keys"}, 1, refused},
		{"ctl stat dead master", []string{"ctl", "--master", dead, "stat", "k"}, 1, refused},
		{"ctl remove dead master", []string{"ctl", "--master", dead, "remove", "k"}, 1, refused},
		{"ctl remove-regex dead master", []string{"ctl", "--master", dead, "remove-regex", "k"}, 1, refused},
		{"ctl usage dead master", []string{"ctl", "--master", dead, "usage"}, 1, refused},
		{"ctl stat missing key", []string{"ctl", "--master", rpc, "stat", "k"}, 1, "OBJECT_NOT_FOUND"},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			r := mooncake(t, 60*time.Second, tc.args...)
			line := oneLine(t, r.stderr)
			cmd := "mooncake " + tc.args[0]
			if tc.args[0] == "bench" {
				cmd += " " + tc.args[1]
			}
			assert.Equal(t, tc.code, r.code, "exit status; stderr %q", line)
			assert.True(t, strings.HasPrefix(line, cmd), "stderr %q does not start with %q", line, cmd)
			assert.Contains(t, line, tc.want)
			assert.Empty(t, r.stdout)
		})
	}
	m.stop(t)
}
