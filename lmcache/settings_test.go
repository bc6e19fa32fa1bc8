package lmcache

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// createJSON renders mc_lmcache_create's config_json with extra as
// LMCache's extra_config.
func createJSON(t *testing.T, role string, extra map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"role": role, "host": "10.0.0.7", "extra_config": extra})
	require.NoError(t, err)
	return b
}

func scoped(kv map[string]any) map[string]any {
	out := map[string]any{
		"remote_storage_plugin.mooncake_go.module_path": "mooncake_go.lmcache",
		"remote_storage_plugin.mooncake_go.class_name":  "MooncakeGoConnectorAdapter",
		"save_chunk_meta": false, // LMCache's own key: not ours to check
		"remote_storage_plugin.other.master_server_address": "ignored:1",
	}
	for k, v := range kv {
		out["remote_storage_plugin.mooncake_go."+k] = v
	}
	return out
}

func TestPluginOfURL(t *testing.T) {
	for _, tc := range []struct {
		url, want string
		ok        bool
	}{
		{"plugin://mooncake_go", "mooncake_go", true},
		{"plugin://mooncake_go.a", "mooncake_go.a", true},
		{"plugin://", "", false},
		{"mooncakestore://127.0.0.1:50051", "", false},
		{"plugin://a/b", "", false},
	} {
		got, err := PluginOfURL(tc.url)
		if !tc.ok {
			require.ErrorIs(t, err, ErrBadURL, tc.url)
			continue
		}
		require.NoError(t, err, tc.url)
		assert.Equal(t, tc.want, got)
	}
}

func TestParseSettingsScope(t *testing.T) {
	s, err := ParseSettings("plugin://mooncake_go", createJSON(t, "worker", scoped(map[string]any{
		"master_server_address": "10.0.0.1:50051", "metadata_server": "http://10.0.0.1:8080/metadata",
		"global_segment_size": 0, "key_prefix": "tenant-a/", "replica_num": 2, "lookup_timeout_ms": 250,
		"kv_shape": []int{32, 2, 256, 8, 128}, "kv_dtype": "bfloat16",
	})), map[string]string{})
	require.NoError(t, err)
	assert.Equal(t, "mooncake_go", s.Plugin)
	assert.Equal(t, RoleWorker, s.Role)
	assert.Equal(t, "10.0.0.1:50051", s.Pool.MasterServerAddress)
	assert.Equal(t, "http://10.0.0.1:8080/metadata", s.Pool.MetadataServer)
	assert.Equal(t, "10.0.0.7", s.Pool.LocalHostname, "local_hostname defaults to the host the shim passes")
	assert.Equal(t, int64(0), s.Pool.GlobalSegmentSize)
	assert.Equal(t, "tcp", s.Pool.Protocol)
	assert.Equal(t, "tenant-a/", s.KeyPrefix)
	assert.Equal(t, 2, s.ReplicaNum)
	assert.Equal(t, 250*time.Millisecond, s.LookupTimeout)
	assert.Equal(t, DefaultTimeout, s.Timeout)
}

func TestParseSettingsAliasAndInstance(t *testing.T) {
	extra := map[string]any{
		"remote_storage_plugin.mooncake_go.b.master_server_addr": "h:1",
		"remote_storage_plugin.mooncake_go.b.metadata_server":    "P2PHANDSHAKE",
		"remote_storage_plugin.mooncake_go.b.local_hostname":     "me",
	}
	s, err := ParseSettings("plugin://mooncake_go.b", createJSON(t, "scheduler", extra), map[string]string{})
	require.NoError(t, err)
	assert.Equal(t, "h:1", s.Pool.MasterServerAddress)
	assert.Equal(t, "me", s.Pool.LocalHostname)
	assert.Equal(t, RoleScheduler, s.Role)
}

func TestParseSettingsErrorsNameTheKey(t *testing.T) {
	base := map[string]any{"master_server_address": "h:1", "metadata_server": "P2PHANDSHAKE"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"missing master", scoped(with("master_server_address", nil)), "remote_storage_plugin.mooncake_go.master_server_address is missing"},
		{"missing metadata", scoped(with("metadata_server", nil)), "remote_storage_plugin.mooncake_go.metadata_server is missing"},
		{"misspelled", scoped(with("master_adress", "h:2")), "unknown key remote_storage_plugin.mooncake_go.master_adress"},
		{"bad size", scoped(with("global_segment_size", "lots")), "global_segment_size"},
		{"bad replicas", scoped(with("replica_num", 0)), "remote_storage_plugin.mooncake_go.replica_num = 0"},
		{"bad timeout", scoped(with("timeout_ms", -1)), "remote_storage_plugin.mooncake_go.timeout_ms = -1"},
		{"bad protocol", scoped(with("protocol", "carrier-pigeon")), "protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSettings("plugin://mooncake_go", createJSON(t, "", tc.extra), map[string]string{})
			require.ErrorIs(t, err, ErrBadConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := ParseSettings("plugin://mooncake_go", createJSON(t, "driver", scoped(base)), map[string]string{})
	require.ErrorIs(t, err, ErrBadConfig)
	assert.Contains(t, err.Error(), `role "driver"`)
	_, err = ParseSettings("plugin://mooncake_go", []byte(`{"extra_config": [1]}`), map[string]string{})
	require.ErrorIs(t, err, ErrBadConfig)
}

func TestParseSettingsMooncakeConfigPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mooncake.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"local_hostname": "node-a", "metadata_server": "http://m:8080/metadata",
		"master_server_address": "m:50051", "global_segment_size": 1048576, "protocol": "tcp"}`), 0o644))
	env := map[string]string{"MOONCAKE_CONFIG_PATH": file}
	// The file holds the store settings; the scope's store keys are
	// ignored (noted), its adapter keys still count.
	s, err := ParseSettings("plugin://mooncake_go", createJSON(t, "", scoped(map[string]any{
		"master_server_address": "not-this:1", "key_prefix": "p/",
	})), env)
	require.NoError(t, err)
	assert.Equal(t, "m:50051", s.Pool.MasterServerAddress)
	assert.Equal(t, "node-a", s.Pool.LocalHostname)
	assert.Equal(t, int64(1<<20), s.Pool.GlobalSegmentSize)
	assert.Equal(t, "p/", s.KeyPrefix)
	assert.Contains(t, s.Notes, "config: remote_storage_plugin.mooncake_go.master_server_address ignored: MOONCAKE_CONFIG_PATH is set, and its file holds the store settings (as LMCache's Mooncake connector)")

	// A file without local_hostname fails naming the file and the key.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"metadata_server": "P2PHANDSHAKE", "master_server_address": "m:50051"}`), 0o644))
	_, err = ParseSettings("plugin://mooncake_go", createJSON(t, "", nil), map[string]string{"MOONCAKE_CONFIG_PATH": bad})
	require.ErrorIs(t, err, ErrBadConfig)
	assert.Contains(t, err.Error(), "MOONCAKE_CONFIG_PATH="+bad)
	assert.Contains(t, err.Error(), "local_hostname")
	_, err = ParseSettings("plugin://mooncake_go", createJSON(t, "", nil), map[string]string{"MOONCAKE_CONFIG_PATH": filepath.Join(dir, "absent.json")})
	require.ErrorIs(t, err, ErrBadConfig)
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}
