package vllm

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/connectors/poolclient"
)

// deadAddr is a 127.0.0.1 address nothing listens on (a port just freed).
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func unreachableExtra(t *testing.T, over map[string]any) map[string]any {
	ex := map[string]any{
		"master_server_address": deadAddr(t), "metadata_server": "http://" + deadAddr(t) + "/metadata",
		"protocol": "tcp", "mode": "standalone-store", "global_segment_size": 0, "local_buffer_size": "16MB",
		"mc_connect_timeout_ms": 500,
	}
	for k, v := range over {
		ex[k] = v
	}
	return ex
}

func TestParseSettingsPoolRequired(t *testing.T) {
	s := mustSettings(t, KVBoth, nil, nil)
	assert.True(t, s.PoolRequired)
	assert.Equal(t, 10*time.Second, s.ConnectTimeout)
	s = mustSettings(t, KVBoth, map[string]any{"mc_pool_required": false, "mc_connect_timeout_ms": 1500}, nil)
	assert.False(t, s.PoolRequired)
	assert.Equal(t, 1500*time.Millisecond, s.ConnectTimeout)
	_, err := ParseSettings(settingsJSON(t, KVBoth, map[string]any{"mc_connect_timeout_ms": 0}, nil), map[string]string{})
	require.ErrorIs(t, err, ErrBadConfig)
	assert.Contains(t, err.Error(), "mc_connect_timeout_ms")
}

func TestSchedulerUnreachablePool(t *testing.T) {
	ctx := context.Background()
	t.Run("required", func(t *testing.T) {
		ex := unreachableExtra(t, nil)
		s := mustSettings(t, KVBoth, ex, nil)
		start := time.Now()
		_, err := NewScheduler(ctx, s, map[string]string{})
		require.ErrorIs(t, err, ErrPoolUnavailable)
		assert.Contains(t, err.Error(), ex["master_server_address"].(string))
		assert.Contains(t, err.Error(), "mc_pool_required")
		assert.Less(t, time.Since(start), 30*time.Second)
	})
	t.Run("optional", func(t *testing.T) {
		s := mustSettings(t, KVBoth, unreachableExtra(t, map[string]any{"mc_pool_required": false}), nil)
		sc, err := NewScheduler(ctx, s, map[string]string{})
		require.NoError(t, err)
		t.Cleanup(func() { sc.Close() })
		require.ErrorIs(t, sc.PoolError(), ErrPoolUnavailable)
		n, async, err := sc.Lookup(ctx, LookupArgs{ReqID: "r1", Hashes: [][]byte{{1}, {2}, {3}}, NumTokens: 3*16 + 5})
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.False(t, async)
	})
}

func TestWorkerUnreachablePool(t *testing.T) {
	ctx := context.Background()
	kc := newKVCache(t, 1, 4, 64)
	t.Run("required", func(t *testing.T) {
		w, err := NewWorker(mustSettings(t, KVBoth, unreachableExtra(t, nil), nil), map[string]string{}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		err = w.RegisterKVCaches(ctx, kc.regions)
		require.ErrorIs(t, err, ErrPoolUnavailable)
		assert.NoError(t, w.PoolError(), "a worker that failed to start has no pool error to report")
	})
	t.Run("optional", func(t *testing.T) {
		w, err := NewWorker(mustSettings(t, KVBoth, unreachableExtra(t, map[string]any{"mc_pool_required": false}), nil), map[string]string{}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		require.NoError(t, w.RegisterKVCaches(ctx, kc.regions))
		require.ErrorIs(t, w.PoolError(), ErrPoolUnavailable)
		errs := loader{w}.Load(ctx, []string{"k1", "k2"}, []int{1, 2})
		require.Len(t, errs, 2)
		for _, e := range errs {
			assert.True(t, errors.Is(e, ErrPoolUnavailable), "load error %v", e)
		}
		errs = saver{w}.Save(ctx, []string{"k1"}, []int{1})
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], ErrPoolUnavailable)
	})
}

func TestPoolConfigProtocol(t *testing.T) {
	base := map[string]any{"master_server_address": "127.0.0.1:50051", "metadata_server": "http://127.0.0.1:8080/metadata"}
	s := mustSettings(t, KVBoth, base, nil)
	pc, err := s.PoolConfig(map[string]string{})
	require.NoError(t, err)
	assert.Equal(t, poolclient.DefaultProtocol, pc.Protocol, "an unset protocol is what this build speaks, not upstream's rdma")
	withRDMA := map[string]any{"protocol": "rdma"}
	for k, v := range base {
		withRDMA[k] = v
	}
	s = mustSettings(t, KVBoth, withRDMA, nil)
	pc, err = s.PoolConfig(map[string]string{})
	require.NoError(t, err)
	assert.Equal(t, "rdma", pc.Protocol, "an explicit protocol is kept (Open then names it unsupported)")
	_, err = poolclient.Open(context.Background(), pc, poolclient.Options{Timeout: time.Second})
	require.ErrorIs(t, err, poolclient.ErrUnsupported)
	assert.Contains(t, err.Error(), `"rdma"`)
}

func TestUnsupportedProtocolIsAConfigError(t *testing.T) {
	// Not an unreachable pool: mc_pool_required false must not serve past it.
	s := mustSettings(t, KVBoth, unreachableExtra(t, map[string]any{"protocol": "rdma", "mc_pool_required": false}), nil)
	_, err := NewScheduler(context.Background(), s, map[string]string{})
	require.ErrorIs(t, err, ErrBadConfig)
	assert.NotErrorIs(t, err, ErrPoolUnavailable)
	assert.Contains(t, err.Error(), `unsupported: protocol "rdma"`)
	assert.NotContains(t, err.Error(), "mc_pool_required")
}

func TestPoolConfigNotesMisspelledFileKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mooncake.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"master_server_address":"127.0.0.1:50051","metadata_server":"http://127.0.0.1:8080/metadata","local_bufer_size":"1GB"}`), 0o600))
	s := mustSettings(t, KVBoth, map[string]any{"mc_mode": "store"}, nil)
	_, notes, err := s.poolConfig(map[string]string{"MOONCAKE_CONFIG_PATH": file})
	require.NoError(t, err)
	require.Len(t, notes, 1, "%q", notes)
	assert.Contains(t, notes[0], `unknown key "local_bufer_size"`)
	assert.Contains(t, notes[0], file)
	// The connector's own keys in kv_connector_extra_config are the shim's
	// to judge: no notes for them.
	s = mustSettings(t, KVBoth, map[string]any{"master_server_address": "127.0.0.1:50051", "metadata_server": "P2PHANDSHAKE", "mc_mode": "store"}, nil)
	_, notes, err = s.poolConfig(map[string]string{})
	require.NoError(t, err)
	assert.Empty(t, notes)
}
