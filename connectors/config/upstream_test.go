package config

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestUpstreamSamples loads every testdata sample unchanged under the rules
// of the integration it was written for and checks each resulting value
// against what the upstream code would pass to the store.
func TestUpstreamSamples(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		name    string
		opts    LoadOptions
		want    func(c *Config)
		primary Source
		ignored []string // "origin:key" expected in Report.Ignored
	}{
		{
			name: "mooncake docstring tcp file via MOONCAKE_CONFIG_PATH",
			opts: LoadOptions{Integration: Generic, Env: map[string]string{"MOONCAKE_CONFIG_PATH": td("mooncake/mooncake_config.json")}},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "localhost:8080", "localhost:8081"
				c.GlobalSegmentSize, c.LocalBufferSize = 3355443200, 1073741824
				c.Protocol, c.DeviceName = "tcp", ""
				c.EnableSSDOffload, c.SSDOffloadPath, c.TenantID = true, "/nvme/mooncake_offload", "default"
			},
			primary: Source{Kind: FromFile, Origin: td("mooncake/mooncake_config.json")},
		},
		{
			name: "mooncake docstring rdma file",
			opts: LoadOptions{Integration: Generic, File: td("mooncake/mooncake_config_rdma.json")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "node1", "master:8080", "master:8081"
				c.GlobalSegmentSize, c.LocalBufferSize = 3355443200, 1073741824
				c.Protocol, c.DeviceName = "rdma", "mlx5_0"
				c.EnableSSDOffload, c.SSDOffloadPath = true, "/nvme/mooncake_offload"
			},
			primary: Source{Kind: FromFile, Origin: td("mooncake/mooncake_config_rdma.json")},
		},
		{
			name: "mooncake service environment form",
			opts: LoadOptions{Integration: Generic, Env: readEnv(t, "mooncake/service.env")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "P2PHANDSHAKE", "10.13.3.232:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 3355443200, 1073741824
				c.Protocol, c.DeviceName = "rdma", ""
			},
			primary: Source{Kind: FromEnv},
		},
		{
			name: "store service config from the SGLang README",
			opts: LoadOptions{Integration: Generic, File: td("mooncake/store_service.json")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://localhost:8080/metadata", "localhost:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 2684354560, 0
				c.Protocol, c.DeviceName = "rdma", "erdma_0,erdma_1"
			},
			primary: Source{Kind: FromFile, Origin: td("mooncake/store_service.json")},
		},
		{
			name: "vllm embedded",
			opts: LoadOptions{Integration: VLLM, Env: map[string]string{"MOONCAKE_CONFIG_PATH": td("vllm/mooncake_config.json")}},
			want: func(c *Config) {
				c.Mode, c.MetadataServer, c.MasterServerAddress = ModeEmbedded, "P2PHANDSHAKE", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 80*gib, 4*gib
				c.Protocol, c.DeviceName, c.EnableOffload = "rdma", "", false
				c.LocalHostname = "" // the adapter substitutes the rank's IP
			},
			primary: Source{Kind: FromFile, Origin: td("vllm/mooncake_config.json")},
		},
		{
			name: "vllm standalone-store with disk offload, pinned by MOONCAKE_PREFERRED_SEGMENT",
			opts: LoadOptions{Integration: VLLM, Env: map[string]string{
				"MOONCAKE_CONFIG_PATH":       td("vllm/mooncake_config_standalone.json"),
				"MOONCAKE_PREFERRED_SEGMENT": "127.0.0.1:50053",
			}},
			want: func(c *Config) {
				c.Mode, c.MetadataServer, c.MasterServerAddress = ModeStandaloneStore, "P2PHANDSHAKE", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 0, 4*gib
				c.Protocol, c.DeviceName, c.EnableOffload = "rdma", "mlx5_0", true
				c.PreferredSegment = "127.0.0.1:50053"
			},
			primary: Source{Kind: FromFile, Origin: td("vllm/mooncake_config_standalone.json")},
		},
		{
			name: "vllm tenant, extra config and requester hostname",
			opts: LoadOptions{
				Integration: VLLM,
				File:        td("vllm/mooncake_config_tenant.json"),
				Extra:       readExtra(t, "vllm/kv_connector_extra_config.json"),
				Env:         map[string]string{"MOONCAKE_REQUESTER_LOCAL_HOSTNAME": " worker-a:50053 ", "MOONCAKE_PREFERRED_SEGMENT": "ignored:1"},
			},
			want: func(c *Config) {
				c.Mode, c.MetadataServer, c.MasterServerAddress = ModeEmbedded, "P2PHANDSHAKE", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 80*gib, 4*gib
				c.Protocol, c.TenantID = "rdma", "tenant-a"
				c.LocalHostname, c.PreferredSegment = "worker-a:50053", "10.0.0.7:50053"
			},
			primary: Source{Kind: FromFile, Origin: td("vllm/mooncake_config_tenant.json")},
			ignored: []string{"extra:load_async", "extra:lookup_rpc_port", "extra:save_decode_cache"},
		},
		{
			name: "sglang extra-config (4gb)",
			opts: LoadOptions{Integration: SGLang, Extra: readExtra(t, "sglang/extra_config.json")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://127.0.0.1:8080/metadata", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 4*gib, 16<<20
				c.Protocol, c.DeviceName = "rdma", ""
			},
			primary: Source{Kind: FromExtra, Origin: "extra"},
		},
		{
			name: "sglang extra-config with byte counts and local_buffer_size",
			opts: LoadOptions{Integration: SGLang, Extra: readExtra(t, "sglang/extra_config_bytes.json")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://127.0.0.1:8080/metadata", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 4294967296, 16<<20
				c.Protocol, c.DeviceName = "rdma", "mlx5_0,mlx5_1"
			},
			primary: Source{Kind: FromExtra, Origin: "extra"},
			ignored: []string{"extra:local_buffer_size"},
		},
		{
			name: "sglang extra-config from dynamo, group semantics",
			opts: LoadOptions{Integration: SGLang, Extra: readExtra(t, "sglang/extra_config_dynamo.json")},
			want: func(c *Config) {
				c.MasterServerAddress, c.EnableGroupSemantics = "mooncake-master.internal:50051", true
			},
			primary: Source{Kind: FromExtra, Origin: "extra"},
		},
		{
			name: "sglang SGLANG_HICACHE_MOONCAKE_CONFIG_PATH file",
			opts: LoadOptions{Integration: SGLang, Env: map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": td("sglang/mooncake_config.json")}},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://localhost:8080/metadata", "localhost:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 4*gib, 16<<20
				c.Protocol, c.DeviceName = "rdma", ""
			},
			primary: Source{Kind: FromFile, Origin: td("sglang/mooncake_config.json")},
			ignored: []string{td("sglang/mooncake_config.json") + ":local_buffer_size"},
		},
		{
			name: "sglang server environment",
			opts: LoadOptions{Integration: SGLang, Env: readEnv(t, "sglang/server.env")},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://127.0.0.1:8080/metadata", "127.0.0.1:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 4294967296, 16<<20
				c.Protocol, c.DeviceName = "rdma", "erdma_0,erdma_1"
			},
			primary: Source{Kind: FromEnv},
		},
		{
			name: "lmcache docs extra_config and remote_url",
			opts: LoadOptions{Integration: LMCache, Extra: readExtra(t, "lmcache/extra_config.json"), RemoteURL: "mooncakestore://127.0.0.1:50051/"},
			want: func(c *Config) {
				// The configured master wins over the URL's host:port.
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://127.0.0.1:8080/metadata", "localhost:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 3355443200, 1073741824
				c.Protocol, c.DeviceName, c.TransferTimeout = "tcp", "", time.Second
			},
			primary: Source{Kind: FromExtra, Origin: "extra"},
		},
		{
			name: "lmcache NoF extra_config",
			opts: LoadOptions{Integration: LMCache, Extra: readExtra(t, "lmcache/nof_extra_config.json"), RemoteURL: "mooncakestore://192.168.65.81:50051/"},
			want: func(c *Config) {
				c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "localhost", "http://192.168.65.81:8080/metadata", "192.168.65.81:50051"
				c.GlobalSegmentSize, c.LocalBufferSize = 0, 1073741824
				c.Protocol, c.DeviceName, c.TransferTimeout = "rdma", "mlx5_0", time.Second
			},
			primary: Source{Kind: FromExtra, Origin: "extra"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rep := mustLoad(t, tt.opts)
			want := Defaults(tt.opts.Integration)
			tt.want(&want)
			if d := diffConfig(got, want); d != "" {
				t.Errorf("config differs:\n%s", d)
			}
			if rep.Primary != tt.primary {
				t.Errorf("Primary = %v, want %v", rep.Primary, tt.primary)
			}
			if len(rep.Unknown) != 0 {
				t.Errorf("Unknown = %v, want none", rep.Unknown)
			}
			var ignored []string
			for _, i := range rep.Ignored {
				ignored = append(ignored, i.KeyRef.String())
			}
			if !slices.Equal(ignored, tt.ignored) {
				t.Errorf("Ignored = %v, want %v", rep.Ignored, tt.ignored)
			}
			if len(rep.Warnings) != 0 {
				t.Errorf("Warnings = %q, want none", rep.Warnings)
			}
		})
	}
}

// TestLMCacheYAMLTwins checks that each JSON twin carries exactly the
// extra_config lines of its YAML original.
func TestLMCacheYAMLTwins(t *testing.T) {
	for yamlName, jsonName := range map[string]string{
		"lmcache/mooncake-config.yaml": "lmcache/extra_config.json",
		"lmcache/nof.yaml":             "lmcache/nof_extra_config.json",
	} {
		y, err := os.ReadFile(td(yamlName))
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(y), "extra_config:\n")
		if !ok {
			t.Fatalf("%s: no extra_config section", yamlName)
		}
		want := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(section), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			want[k] = strings.Trim(strings.TrimSpace(v), `"`)
		}
		m, err := decodeObject(readExtra(t, jsonName))
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != len(want) {
			t.Errorf("%s has %d keys, %s has %d", jsonName, len(m), yamlName, len(want))
		}
		for k, v := range m {
			if s := strings.Trim(describe(v), `"`); strings.TrimPrefix(s, "number ") != want[k] {
				t.Errorf("%s: %s = %s, YAML says %q", jsonName, k, describe(v), want[k])
			}
		}
	}
}
