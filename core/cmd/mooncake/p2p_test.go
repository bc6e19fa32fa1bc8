package main

import (
	"encoding/json"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
)

// p2pFiles writes two files of seeded random bytes and returns their paths.
func p2pFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	r := mrand.New(mrand.NewPCG(20, 20))
	var paths []string
	for i, n := range []int{300<<10 + 17, 70 << 10} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		p := filepath.Join(dir, []string{"model.safetensors", "config.bin"}[i])
		require.NoError(t, os.WriteFile(p, b, 0o644))
		paths = append(paths, p)
	}
	return paths
}

func sameFiles(t *testing.T, src []string, dir string) {
	t.Helper()
	for _, p := range src {
		want, err := os.ReadFile(p)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, filepath.Base(p)))
		require.NoError(t, err)
		require.True(t, string(want) == string(got), "%s differs", filepath.Base(p))
	}
}

// One seed process and getter processes: the first getter keeps serving,
// the seed stops, later getters complete from the first getter alone; a
// holder killed with SIGKILL (its lease still alive) is skipped.
func TestP2PProcesses(t *testing.T) {
	ep := etcdtest.Start(t)
	src := p2pFiles(t)
	common := []string{"--etcd", ep, "--prefix", "clitest/"}
	seed, _ := startDaemon(t, append(append([]string{"p2p", "seed", "--name", "ckpt/v1", "--shard-size", "16KiB"}, common...), src...)...)
	seed.waitFor(t, "seeding \"ckpt/v1\"", time.Minute)
	assert.Contains(t, seed.log(), "in 24 shard(s)", "the banner gives the shard count p2p list shows")

	r := mooncake(t, time.Minute, append([]string{"p2p", "list", "ckpt/"}, common...)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ckpt/v1")
	assert.Regexp(t, `ckpt/v1\s+370\.0 KiB\s+2\s+24\s+16\.0 KiB\s+1\s`, r.stdout)

	out1 := t.TempDir()
	g1, _ := startDaemon(t, append([]string{"p2p", "get", "--name", "ckpt/v1", "--out", out1, "--serve"}, common...)...)
	g1.waitFor(t, "serving \"ckpt/v1\"", time.Minute)
	assert.Contains(t, g1.log(), "100%")
	sameFiles(t, src, out1)
	seed.stop(t)
	assert.Contains(t, seed.log(), "stopped seeding")

	out2 := t.TempDir()
	r = mooncake(t, time.Minute, append([]string{"p2p", "get", "--name", "ckpt/v1", "--out", out2, "--serve=false"}, common...)...)
	require.Equal(t, 0, r.code, r.stderr)
	sameFiles(t, src, out2)
	assert.Contains(t, r.stdout, "0 B from the origin")

	// g1 dies without revoking its lease: its holder keys stay for the
	// TTL, reads from it fail. No other holder: the getter reports it.
	require.NoError(t, g1.cmd.Process.Kill())
	<-g1.done
	_ = g1.cmd.Wait()
	r = mooncake(t, time.Minute, append([]string{"p2p", "get", "--name", "ckpt/v1", "--out", t.TempDir(), "--holder-wait", "500ms"}, common...)...)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no holder could serve the shard")
}

func TestP2PErrors(t *testing.T) {
	ep := etcdtest.Start(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"p2p", "get", "--name", "nope", "--out", t.TempDir(), "--etcd", ep}, 1, `unknown object "nope"`},
		{[]string{"p2p", "list", "--etcd", "127.0.0.1:1", "--etcd-timeout", "300ms"}, 1, "cannot reach etcd at 127.0.0.1:1"},
		{[]string{"p2p", "get", "--name", "x", "--out", t.TempDir()}, 2, "--etcd is required"},
		{[]string{"p2p", "get", "--out", t.TempDir(), "--etcd", ep}, 2, "--name is required"},
		{[]string{"p2p", "seed", "--name", "x", "--etcd", ep}, 2, "requires at least 1 arg"},
		{[]string{"p2p", "seed", "--name", "x", "--etcd", ep, "/nonexistent/file"}, 2, "no such file"},
		{[]string{"p2p", "seed", "--name", "x", "--etcd", ep, "--shard-size", "0", "/dev/null"}, 2, "--shard-size"},
		{[]string{"p2p", "list", "a", "b", "--etcd", ep}, 2, "accepts at most 1 arg"},
	} {
		t.Run(strings.Join(tc.args[:2], " ")+" "+tc.msg, func(t *testing.T) {
			r := mooncake(t, time.Minute, tc.args...)
			assert.Equal(t, tc.code, r.code, r.stderr)
			assert.Contains(t, oneLine(t, r.stderr), tc.msg)
		})
	}
}

// bench p2p on a small object: every row present, the P2P rounds' seed
// sent the object once (claims do not expire in so short a run).
func TestBenchP2PSmall(t *testing.T) {
	ep := etcdtest.Start(t)
	r := mooncake(t, 2*time.Minute, "bench", "p2p", "--etcd", ep, "--size", "256KiB", "--shard-size", "16KiB", "--getters", "1,3", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Rows []p2pBenchRow `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Rows, 4)
	for _, row := range rep.Rows {
		if row.Mode == "naive" {
			assert.InDelta(t, float64(row.Getters), row.SeedX, 1e-9, "%+v", row)
		} else {
			assert.InDelta(t, 1, row.SeedX, 1e-9, "%+v", row)
		}
	}
	r = mooncake(t, time.Minute, "bench", "p2p", "--etcd", ep, "--getters", "0")
	assert.Equal(t, 2, r.code)
}
