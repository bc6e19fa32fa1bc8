package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// startTierMaster runs an in-process master with mcfg, metrics and the
// HTTP metadata server on free ports.
func startTierMaster(t *testing.T, mcfg master.Config) *server.Process {
	t.Helper()
	p, err := server.Start(server.ProcessConfig{Master: mcfg, RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// poll calls cond until it holds or d passes.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// TestNodeDiskTierFlags: a node refuses a quota too small to hold an
// object, warns when the quota exceeds the filesystem's free space, and
// creates no directory when its master refuses the tier (no
// --enable_offload).
func TestNodeDiskTierFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tier")
	r := mooncake(t, 30*time.Second, "node", "--storage_root_dir", dir, "--quota_bytes", "1")
	if line := oneLine(t, r.stderr); r.code != 2 || !strings.Contains(line, "--quota_bytes 1 B is too small") {
		t.Fatalf("--quota_bytes 1: exit %d, %q", r.code, line)
	}

	p := startTierMaster(t, master.Config{})
	r = mooncake(t, 30*time.Second, "node", "--master", p.RPCAddr, "--metadata_server", p.MetadataURL, "--segment-size", "1MiB",
		"--bind", "127.0.0.1:0", "--storage_root_dir", dir, "--quota_bytes", "100TiB")
	if r.code != 1 || !strings.Contains(r.stderr, "warning: --quota_bytes 100.0 TiB exceeds the") || !strings.Contains(r.stderr, "UNABLE_OFFLOAD") {
		t.Fatalf("node on a master without enable_offload: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused node created its storage_root_dir: %v", err)
	}
}

// TestNodeDiesWithDiskTier: a node with a disk tier is killed while a
// reader waits for one of its disk-only objects; once the master's client
// TTL drops the node, the read fails with OBJECT_NOT_FOUND saying the disk
// copy was dropped, and both `ctl usage` and /metrics count the miss.
func TestNodeDiesWithDiskTier(t *testing.T) {
	p := startTierMaster(t, master.Config{EnableOffload: true, ClientTTL: 2 * time.Second})
	n, _ := startDaemon(t, "node", "--master", p.RPCAddr, "--metadata_server", p.MetadataURL, "--segment-size", "1MiB",
		"--bind", "127.0.0.1:0", "--storage_root_dir", t.TempDir(), "--quota_bytes", "16MiB")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	meta, err := openMetadata(ctx, p.MetadataURL, p.RPCAddr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.Config{LocalHostname: "reader", MasterAddr: p.RPCAddr, Metadata: meta,
		Transport: tcp.New(tcp.Config{BindAddr: "127.0.0.1:0"}), LocalBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const value = 256 << 10
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"} // 2 MiB into 1 MiB of DRAM
	for _, k := range keys {
		if err := c.Put(ctx, k, bytes.Repeat([]byte(k), value/2), nil); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	poll(t, 10*time.Second, "k0 only on disk", func() bool {
		k, err := c.Stat(ctx, "k0")
		return err == nil && k.DiskSegment != "" && len(k.Replicas) == 0
	})
	if err := n.cmd.Process.Kill(); err != nil { // no unmount
		t.Fatal(err)
	}
	_, err = c.Get(ctx, "k0")
	if !errors.Is(err, store.ErrObjectNotFound) || !strings.Contains(err.Error(), "disk copy") {
		t.Fatalf("get of a dead node's disk-only object: %v; want OBJECT_NOT_FOUND naming the dropped disk copy", err)
	}
	usage := strings.Join(ctlOK(t, p.RPCAddr, "usage"), "\n")
	if !regexp.MustCompile(`disk_reads\s+0 hits, 1 misses`).MatchString(usage) {
		t.Fatalf("ctl usage does not count the miss:\n%s", usage)
	}
	code, body := httpGet(t, "http://"+p.MetricsAddr+"/metrics")
	if code != http.StatusOK || !regexp.MustCompile(`(?m)^master_file_cache_miss_nums 1$`).MatchString(body) {
		t.Fatalf("/metrics (%d) does not count the miss:\n%s", code, body)
	}
}
