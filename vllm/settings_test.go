package vllm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
)

func TestParseSettingsDefaults(t *testing.T) {
	s, err := ParseSettings(settingsJSON(t, KVBoth, nil, nil), map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]any{
		"Mode":            {s.Mode, ModeStore},
		"LoadAsync":       {s.LoadAsync, true},
		"SaveAsync":       {s.SaveAsync, true},
		"CachePrefix":     {s.CachePrefix, ""},
		"LookupTimeout":   {s.LookupTimeout, 5 * time.Second},
		"LoadTimeout":     {s.LoadTimeout, 30 * time.Second},
		"SaveTimeout":     {s.SaveTimeout, 30 * time.Second},
		"BootstrapPort":   {s.BootstrapPort, 8998},
		"BootstrapAddr":   {s.BootstrapAddr, ""},
		"AbortTimeout":    {s.AbortTimeout, 480 * time.Second},
		"SaveDecodeCache": {s.SaveDecodeCache, false},
		"TPSize":          {s.TPSize, 1},
		"PPSize":          {s.PPSize, 1},
		"Host":            {s.Host, "127.0.0.1"},
		"IdleWait":        {s.IdleWait, 5 * time.Millisecond},
		"modelName":       {s.modelName(), "tiny-llama"},
	}
	for name, gw := range want {
		if gw[0] != gw[1] {
			t.Errorf("%s = %v, want %v", name, gw[0], gw[1])
		}
	}
	// A null extra config is no extra config.
	if _, err := ParseSettings([]byte(`{"kv_role":"kv_both","model":"m","kv_dtype":"fp8","layout":"l","block_size":16,"kv_connector_extra_config":null}`), map[string]string{}); err != nil {
		t.Errorf("null extra config: %v", err)
	}
}

func TestParseSettingsExtraAndEnv(t *testing.T) {
	extra := map[string]any{
		"mc_mode": "pd", "load_async": false, "mc_save_async": false, "cache_prefix": "tenant-a",
		"mc_lookup_timeout_ms": 250, "mc_load_timeout_ms": 1500.5, "mc_save_timeout_ms": 2000, "mc_idle_wait_ms": 0,
		"bootstrap_server_address": "10.0.0.9:7000", "save_decode_cache": true,
		"master_server_address": "ignored-here:1", // a pool key: not the connector's
	}
	env := map[string]string{EnvBootstrapPort: "9100", EnvAbortTimeout: "1.5"}
	s, err := ParseSettings(settingsJSON(t, KVProducer, extra, map[string]any{"tp_rank": 1, "tp_size": 2, "host": "10.0.0.2"}), env)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]any{
		"Mode":            {s.Mode, ModePD},
		"LoadAsync":       {s.LoadAsync, false},
		"SaveAsync":       {s.SaveAsync, false},
		"CachePrefix":     {s.CachePrefix, "tenant-a"},
		"LookupTimeout":   {s.LookupTimeout, 250 * time.Millisecond},
		"LoadTimeout":     {s.LoadTimeout, 1500500 * time.Microsecond},
		"SaveTimeout":     {s.SaveTimeout, 2 * time.Second},
		"BootstrapAddr":   {s.BootstrapAddr, "10.0.0.9:7000"},
		"SaveDecodeCache": {s.SaveDecodeCache, true},
		"BootstrapPort":   {s.BootstrapPort, 9100},
		"AbortTimeout":    {s.AbortTimeout, 1500 * time.Millisecond},
		"TPRank":          {s.TPRank, 1},
		"TPSize":          {s.TPSize, 2},
		"Host":            {s.Host, "10.0.0.2"},
		"IdleWait":        {s.IdleWait, time.Duration(0)},
	}
	for name, gw := range want {
		if gw[0] != gw[1] {
			t.Errorf("%s = %v, want %v", name, gw[0], gw[1])
		}
	}
	// The cache prefix is the tenant of every namespace, which carries
	// the shard.
	ns := s.Namespace(1, 0)
	if ns.Tenant != "tenant-a" || ns.TPRank != 1 || ns.TPSize != 2 || ns.Model != "tiny-llama" || ns.BlockTokens != 4 {
		t.Errorf("Namespace(1, 0) = %+v", ns)
	}
	// Empty variables are unset.
	s, err = ParseSettings(settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvBootstrapPort: "", EnvAbortTimeout: ""})
	if err != nil || s.BootstrapPort != 8998 || s.AbortTimeout != 480*time.Second {
		t.Errorf("empty env: port %d, abort %v, err %v", s.BootstrapPort, s.AbortTimeout, err)
	}
}

func TestParseSettingsErrors(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		env   map[string]string
		wants string // a substring of the error: the key it names
	}{
		{"not JSON", []byte(`{"kv_role":`), nil, "settings JSON"},
		{"extra not an object", []byte(`{"kv_role":"kv_both","kv_connector_extra_config":[1]}`), nil, "kv_connector_extra_config"},
		{"extra wrong type", settingsJSON(t, KVBoth, map[string]any{"load_async": "yes"}, nil), nil, "load_async"},
		{"mc_save_async wrong type", settingsJSON(t, KVBoth, map[string]any{"mc_save_async": 0}, nil), nil, "mc_save_async"},
		{"kv_role", settingsJSON(t, "kv_sometimes", nil, nil), nil, "kv_role"},
		{"kv_role missing", settingsJSON(t, KVBoth, nil, map[string]any{"kv_role": nil}), nil, "kv_role"},
		{"mc_mode", settingsJSON(t, KVBoth, map[string]any{"mc_mode": "p2p"}, nil), nil, "mc_mode"},
		{"model", settingsJSON(t, KVBoth, nil, map[string]any{"model": nil}), nil, "model"},
		{"kv_dtype", settingsJSON(t, KVBoth, nil, map[string]any{"kv_dtype": ""}), nil, "kv_dtype"},
		{"layout", settingsJSON(t, KVBoth, nil, map[string]any{"layout": nil}), nil, "layout"},
		{"block_size", settingsJSON(t, KVBoth, nil, map[string]any{"block_size": 0}), nil, "block_size"},
		{"tp_rank", settingsJSON(t, KVBoth, nil, map[string]any{"tp_rank": 2, "tp_size": 2}), nil, "tp_rank"},
		{"tp_size", settingsJSON(t, KVBoth, nil, map[string]any{"tp_size": -1}), nil, "tp_size"},
		{"pp_rank", settingsJSON(t, KVBoth, nil, map[string]any{"pp_rank": -1}), nil, "pp_rank"},
		{"engine_id pd", settingsJSON(t, KVBoth, map[string]any{"mc_mode": "pd"}, map[string]any{"engine_id": ""}), nil, "engine_id"},
		{"pp_size pd", settingsJSON(t, KVBoth, map[string]any{"mc_mode": "pd"}, map[string]any{"pp_size": 2}), nil, "pp_size"},
		{"mc_lookup_timeout_ms", settingsJSON(t, KVBoth, map[string]any{"mc_lookup_timeout_ms": 0}, nil), nil, "mc_lookup_timeout_ms"},
		{"mc_load_timeout_ms", settingsJSON(t, KVBoth, map[string]any{"mc_load_timeout_ms": -5}, nil), nil, "mc_load_timeout_ms"},
		{"mc_save_timeout_ms", settingsJSON(t, KVBoth, map[string]any{"mc_save_timeout_ms": 0}, nil), nil, "mc_save_timeout_ms"},
		{"mc_idle_wait_ms negative", settingsJSON(t, KVBoth, map[string]any{"mc_idle_wait_ms": -1}, nil), nil, "mc_idle_wait_ms"},
		{"mc_idle_wait_ms too long", settingsJSON(t, KVBoth, map[string]any{"mc_idle_wait_ms": 5000}, nil), nil, "mc_idle_wait_ms"},
		{"bootstrap port text", settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvBootstrapPort: "http"}, EnvBootstrapPort},
		{"bootstrap port range", settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvBootstrapPort: "70000"}, EnvBootstrapPort},
		{"bootstrap port zero", settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvBootstrapPort: "0"}, EnvBootstrapPort},
		{"abort timeout text", settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvAbortTimeout: "soon"}, EnvAbortTimeout},
		{"abort timeout negative", settingsJSON(t, KVBoth, nil, nil), map[string]string{EnvAbortTimeout: "-1"}, EnvAbortTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			if env == nil {
				env = map[string]string{}
			}
			_, err := ParseSettings(tt.data, env)
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err = %v, want ErrBadConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wants) {
				t.Errorf("err = %q, want it to name %q", err, tt.wants)
			}
		})
	}
}

func TestShards(t *testing.T) {
	s := mustSettings(t, KVBoth, nil, map[string]any{"tp_size": 2, "pp_size": 2})
	got := s.shards()
	if len(got) != 4 {
		t.Fatalf("%d shards, want 4 (TP 2 x PP 2)", len(got))
	}
	seen := map[string]bool{}
	for _, ns := range got {
		seen[ns.Prefix()] = true
	}
	if len(seen) != 4 {
		t.Errorf("shard prefixes not distinct: %v", seen)
	}
	s = mustSettings(t, KVBoth, nil, map[string]any{"tp_size": 4, "use_mla": true})
	got = s.shards()
	if len(got) != 1 || !got[0].SharedMLA || got[0].Prefix() != s.Namespace(3, 0).Prefix() {
		t.Errorf("MLA shards = %+v, want one shared namespace", got)
	}
}

func TestPoolConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mooncake.json")
	if err := os.WriteFile(file, []byte(`{"local_hostname":"10.1.1.1","metadata_server":"http://meta.example:8080/metadata",
		"master_server_address":"file-master:50051","global_segment_size":1048576,"protocol":"tcp"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := map[string]any{
		"mc_mode": "store", "master_server_address": "extra-master:50051",
		"metadata_server": "P2PHANDSHAKE", "global_segment_size": 2097152, "preferred_segment": "node-7",
	}
	s := mustSettings(t, KVBoth, extra, nil)

	t.Run("file", func(t *testing.T) {
		cfg, err := s.PoolConfig(map[string]string{config.EnvConfigPath: file})
		if err != nil {
			t.Fatal(err)
		}
		// The file is the only source of pool keys; the extra config
		// adds preferred_segment; local_hostname is the rank's IP.
		if cfg.MasterServerAddress != "file-master:50051" || cfg.MetadataServer != "http://meta.example:8080/metadata" ||
			cfg.GlobalSegmentSize != 1<<20 || cfg.PreferredSegment != "node-7" || cfg.LocalHostname != "" {
			t.Errorf("config = %+v", cfg)
		}
	})
	t.Run("extra", func(t *testing.T) {
		cfg, err := s.PoolConfig(map[string]string{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MasterServerAddress != "extra-master:50051" || cfg.MetadataServer != "P2PHANDSHAKE" ||
			cfg.GlobalSegmentSize != 2<<20 || cfg.PreferredSegment != "node-7" {
			t.Errorf("config = %+v", cfg)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := s.PoolConfig(map[string]string{config.EnvConfigPath: filepath.Join(dir, "absent.json")})
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want a not-exist error", err)
		}
	})
	t.Run("no source", func(t *testing.T) {
		bare := mustSettings(t, KVBoth, nil, nil)
		_, err := bare.PoolConfig(map[string]string{})
		if !errors.Is(err, config.ErrNoSource) {
			t.Errorf("err = %v, want ErrNoSource", err)
		}
	})
	t.Run("NewWorker wraps", func(t *testing.T) {
		bare := mustSettings(t, KVBoth, nil, nil)
		_, err := NewWorker(bare, map[string]string{}, nil)
		if !errors.Is(err, ErrBadConfig) || !errors.Is(err, config.ErrNoSource) {
			t.Errorf("err = %v, want ErrBadConfig wrapping ErrNoSource", err)
		}
	})
}
