package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// precCase is one row of a precedence table: inputs, then either an error
// or the values and sources expected.
type precCase struct {
	name    string
	env     map[string]string
	file    string
	extra   string
	url     string
	wantErr error
	primary string            // Report.Primary.String()
	want    map[string]string // key -> fmt.Sprint(value)
	from    map[string]string // key -> Source.String()
	ignored map[string]string // "origin:key" -> substring of the reason
	warn    []string          // substrings, each in some warning
}

func runPrecedence(t *testing.T, in Integration, files mem, cases []precCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, rep, err := Load(LoadOptions{
				Integration: in, Env: tc.env, File: tc.file, Extra: []byte(tc.extra),
				RemoteURL: tc.url, ReadFile: files.read,
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v\n%v", err, rep)
			}
			if tc.primary != "" && rep.Primary.String() != tc.primary {
				t.Errorf("Primary = %q, want %q", rep.Primary, tc.primary)
			}
			for k, want := range tc.want {
				p := fieldPtr(&c, k)
				if p == nil {
					t.Fatalf("no field %q", k)
				}
				if got := fmt.Sprint(deref(p)); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			for k, want := range tc.from {
				if got := rep.Sources[k].String(); got != want {
					t.Errorf("source of %s = %q, want %q", k, got, want)
				}
			}
			for ref, why := range tc.ignored {
				found := false
				for _, i := range rep.Ignored {
					if i.KeyRef.String() == ref {
						found = true
						if !strings.Contains(i.Reason, why) {
							t.Errorf("ignored %s: reason %q lacks %q", ref, i.Reason, why)
						}
					}
				}
				if !found {
					t.Errorf("%s not in Ignored %v", ref, rep.Ignored)
				}
			}
			for _, w := range tc.warn {
				found := false
				for _, got := range rep.Warnings {
					found = found || strings.Contains(got, w)
				}
				if !found {
					t.Errorf("no warning containing %q in %q", w, rep.Warnings)
				}
			}
			if len(tc.warn) == 0 && len(rep.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", rep.Warnings)
			}
		})
	}
}

func deref(p any) any {
	switch v := p.(type) {
	case *string:
		return *v
	case *int64:
		return *v
	case *bool:
		return *v
	case *int:
		return *v
	}
	return p
}

func TestPrecedenceGeneric(t *testing.T) {
	files := mem{
		"/m.json":      `{"local_hostname":"h","metadata_server":"P2PHANDSHAKE","master_server_address":"m:1"}`,
		"/x.json":      `{"local_hostname":"x","metadata_server":"P2PHANDSHAKE","master_server_address":"x:1","protocol":"rdma"}`,
		"/noreq.json":  `{"local_hostname":"h","metadata_server":"P2PHANDSHAKE"}`,
		"/alias.json":  `{"local_hostname":"h","metadata_server":"P2PHANDSHAKE","master_server_addr":"a:1","rdma_devices":"mlx5_0"}`,
		"/both.json":   `{"local_hostname":"h","metadata_server":"P2PHANDSHAKE","master_server_addr":"a:1","master_server_address":"c:1"}`,
		"/array.json":  `[1,2]`,
		"/broken.json": `{"local_hostname":`,
	}
	runPrecedence(t, Generic, files, []precCase{
		{
			name:    "MOONCAKE_CONFIG_PATH file beats MOONCAKE_* variables, which are not a fallback",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/m.json", "MOONCAKE_MASTER": "e:1", "MOONCAKE_PROTOCOL": "rdma"},
			primary: "/m.json",
			want:    map[string]string{"master_server_address": "m:1", "protocol": "tcp", "global_segment_size": "3355443200"},
			from:    map[string]string{"master_server_address": "/m.json:master_server_address", "protocol": "default"},
			warn:    []string{"MOONCAKE_MASTER is set but not read", "MOONCAKE_PROTOCOL is set but not read"},
		},
		{
			name:    "explicit file replaces MOONCAKE_CONFIG_PATH",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/m.json"},
			file:    "/x.json",
			primary: "/x.json",
			want:    map[string]string{"local_hostname": "x", "protocol": "rdma"},
			warn:    []string{"explicit file /x.json replaces it"},
		},
		{
			name: "environment form with every variable",
			env: map[string]string{
				"MOONCAKE_MASTER": "e:1", "MOONCAKE_LOCAL_HOSTNAME": "n1", "MOONCAKE_TE_META_DATA_SERVER": "http://md:8080/metadata",
				"MOONCAKE_GLOBAL_SEGMENT_SIZE": "4gb", "MOONCAKE_LOCAL_BUFFER_SIZE": "512mb", "MOONCAKE_PROTOCOL": "rdma",
				"MOONCAKE_DEVICE": "mlx5_1", "MOONCAKE_OFFLOAD_ENABLED": "yes", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/ssd",
				"MOONCAKE_TENANT_ID": "t1",
			},
			primary: "environment",
			want: map[string]string{
				"master_server_address": "e:1", "local_hostname": "n1", "metadata_server": "http://md:8080/metadata",
				"global_segment_size": "4294967296", "local_buffer_size": "536870912", "protocol": "rdma",
				"device_name": "mlx5_1", "enable_ssd_offload": "true", "ssd_offload_path": "/ssd", "tenant_id": "t1",
			},
			from: map[string]string{"global_segment_size": "env MOONCAKE_GLOBAL_SEGMENT_SIZE", "tenant_id": "env MOONCAKE_TENANT_ID"},
		},
		{
			name:    "environment defaults",
			env:     map[string]string{"MOONCAKE_MASTER": "e:1"},
			primary: "environment",
			want: map[string]string{"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE", "protocol": "tcp",
				"global_segment_size": "3355443200", "local_buffer_size": "1073741824", "tenant_id": "default"},
			from: map[string]string{"master_server_address": "env MOONCAKE_MASTER", "local_hostname": "default"},
		},
		{
			name: "aliases of the store's dict form",
			file: "/alias.json",
			want: map[string]string{"master_server_address": "a:1", "device_name": "mlx5_0"},
			from: map[string]string{"master_server_address": "/alias.json:master_server_addr", "device_name": "/alias.json:rdma_devices"},
		},
		{
			name: "canonical key beats its alias",
			file: "/both.json",
			want: map[string]string{"master_server_address": "c:1"},
			warn: []string{"both master_server_addr and master_server_address are set"},
		},
		{name: "empty MOONCAKE_MASTER is unset", env: map[string]string{"MOONCAKE_MASTER": ""}, wantErr: ErrNoSource},
		{name: "no source", env: map[string]string{}, wantErr: ErrNoSource},
		{name: "empty MOONCAKE_CONFIG_PATH", env: map[string]string{"MOONCAKE_CONFIG_PATH": "", "MOONCAKE_MASTER": "e:1"}, wantErr: ErrNoSource},
		{name: "file without master_server_address", file: "/noreq.json", wantErr: ErrMissingKey},
		{name: "missing file", file: "/nope.json", wantErr: fs.ErrNotExist},
		{name: "file is not an object", file: "/array.json", wantErr: ErrBadValue},
		{name: "file is not JSON", file: "/broken.json", wantErr: ErrBadValue},
		{name: "extra config", env: map[string]string{"MOONCAKE_MASTER": "e:1"}, extra: `{"protocol":"tcp"}`, wantErr: ErrBadValue},
		{name: "bad boolean", env: map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_OFFLOAD_ENABLED": "maybe"}, wantErr: ErrBadValue},
		{name: "bad size", env: map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "4 potatoes"}, wantErr: ErrBadValue},
		{name: "set-but-empty protocol is used, then invalid", env: map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_PROTOCOL": ""}, wantErr: ErrInvalid},
		{name: "remote_url is LMCache's", env: map[string]string{"MOONCAKE_MASTER": "e:1"}, url: "mooncakestore://h:1/", wantErr: ErrBadValue},
	})
}

func TestPrecedenceVLLM(t *testing.T) {
	files := mem{
		"/v.json": `{"metadata_server":"P2PHANDSHAKE","master_server_address":"m:1","local_hostname":"file-host","preferred_segment":"f:1"}`,
	}
	runPrecedence(t, VLLM, files, []precCase{
		{name: "no MOONCAKE_CONFIG_PATH: the environment is not a source", env: map[string]string{"MOONCAKE_MASTER": "e:1"}, wantErr: ErrNoSource},
		{name: "empty MOONCAKE_CONFIG_PATH", env: map[string]string{"MOONCAKE_CONFIG_PATH": ""}, wantErr: ErrNoSource},
		{
			name:    "file only; local_hostname in the file is ignored",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json"},
			primary: "/v.json",
			want:    map[string]string{"master_server_address": "m:1", "protocol": "rdma", "local_hostname": "", "mode": "embedded", "preferred_segment": ""},
			from:    map[string]string{"local_hostname": "runtime", "protocol": "default"},
			ignored: map[string]string{"/v.json:local_hostname": "MOONCAKE_REQUESTER_LOCAL_HOSTNAME", "/v.json:preferred_segment": "kv_connector_extra_config"},
		},
		{
			name: "MOONCAKE_REQUESTER_LOCAL_HOSTNAME",
			env:  map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json", "MOONCAKE_REQUESTER_LOCAL_HOSTNAME": "10.0.0.9"},
			want: map[string]string{"local_hostname": "10.0.0.9"},
			from: map[string]string{"local_hostname": "env MOONCAKE_REQUESTER_LOCAL_HOSTNAME"},
		},
		{
			name: "blank MOONCAKE_REQUESTER_LOCAL_HOSTNAME leaves the rank IP",
			env:  map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json", "MOONCAKE_REQUESTER_LOCAL_HOSTNAME": "  "},
			want: map[string]string{"local_hostname": ""},
			from: map[string]string{"local_hostname": "runtime"},
		},
		{
			name:    "Mooncake keys in the extra config are ignored",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json"},
			extra:   `{"master_server_address":"x:1","protocol":"tcp"}`,
			want:    map[string]string{"master_server_address": "m:1", "protocol": "rdma"},
			ignored: map[string]string{"extra:master_server_address": "only from the MOONCAKE_CONFIG_PATH file", "extra:protocol": "only from"},
		},
		{
			name:  "extra preferred_segment beats MOONCAKE_PREFERRED_SEGMENT",
			env:   map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json", "MOONCAKE_PREFERRED_SEGMENT": "e:1"},
			extra: `{"preferred_segment":" x:1 "}`,
			want:  map[string]string{"preferred_segment": "x:1"},
			from:  map[string]string{"preferred_segment": "extra:preferred_segment"},
		},
		{
			name: "MOONCAKE_PREFERRED_SEGMENT",
			env:  map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json", "MOONCAKE_PREFERRED_SEGMENT": " e:1"},
			want: map[string]string{"preferred_segment": "e:1"},
			from: map[string]string{"preferred_segment": "env MOONCAKE_PREFERRED_SEGMENT"},
		},
		{
			name: "explicit file",
			file: "/v.json",
			want: map[string]string{"master_server_address": "m:1"},
		},
		{name: "empty extra preferred_segment", env: map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json"}, extra: `{"preferred_segment":" "}`, wantErr: ErrBadValue},
		{name: "non-string extra preferred_segment", env: map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json"}, extra: `{"preferred_segment":5}`, wantErr: ErrBadValue},
		{name: "extra is not an object", env: map[string]string{"MOONCAKE_CONFIG_PATH": "/v.json"}, extra: `"x"`, wantErr: ErrBadValue},
	})
}

func TestPrecedenceSGLang(t *testing.T) {
	files := mem{
		"/s.json":        `{"master_server_address":"f:1","protocol":"tcp"}`,
		"/t.json":        `{"master_server_address":"t:1"}`,
		"/client.json":   `{"client_server_address":"c:1","standalone_storage":true}`,
		"/nomaster.json": `{"protocol":"tcp"}`,
	}
	runPrecedence(t, SGLang, files, []precCase{
		{
			name:    "extra config naming a master beats the file and the environment",
			env:     map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/s.json", "MOONCAKE_MASTER": "e:1", "MOONCAKE_PROTOCOL": "tcp"},
			extra:   `{"master_server_address":"x:1"}`,
			primary: "extra",
			want:    map[string]string{"master_server_address": "x:1", "protocol": "rdma", "local_hostname": "localhost"},
			from:    map[string]string{"master_server_address": "extra:master_server_address", "protocol": "default"},
			warn:    []string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH is set but not read", "MOONCAKE_MASTER is set but not read", "MOONCAKE_PROTOCOL is set but not read"},
		},
		{
			name:    "extra config naming only a client is selected",
			extra:   `{"client_server_address":"c:1","standalone_storage":true}`,
			primary: "extra",
			want:    map[string]string{"client_server_address": "c:1", "standalone_storage": "true", "master_server_address": ""},
		},
		{
			name:    "extra config without an address falls through; its tag still counts",
			env:     map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/s.json"},
			extra:   `{"protocol":"rdma","extra_backend_tag":"team-a","enable_group_semantics":true,"backend_name":"mooncake"}`,
			primary: "/s.json",
			want:    map[string]string{"master_server_address": "f:1", "protocol": "tcp", "extra_backend_tag": "team-a", "enable_group_semantics": "true"},
			from:    map[string]string{"extra_backend_tag": "extra:extra_backend_tag", "protocol": "/s.json:protocol"},
			ignored: map[string]string{"extra:protocol": "names neither master_server_address nor client_server_address", "extra:backend_name": "SGLang HiCache"},
		},
		{
			name:    "a null master does not select the extra config",
			env:     map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/s.json"},
			extra:   `{"master_server_address":null}`,
			primary: "/s.json",
			want:    map[string]string{"master_server_address": "f:1"},
		},
		{
			name:    "file beats the environment, which is not a fallback",
			env:     map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/s.json", "MOONCAKE_MASTER": "e:1", "MOONCAKE_DEVICE": "mlx5_9"},
			primary: "/s.json",
			want:    map[string]string{"master_server_address": "f:1", "device_name": ""},
			warn:    []string{"MOONCAKE_MASTER is set but not read", "MOONCAKE_DEVICE is set but not read"},
		},
		{
			name:    "explicit file replaces SGLANG_HICACHE_MOONCAKE_CONFIG_PATH",
			env:     map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": "/s.json"},
			file:    "/t.json",
			primary: "/t.json",
			want:    map[string]string{"master_server_address": "t:1"},
			warn:    []string{"explicit file /t.json replaces it"},
		},
		{
			name:    "MOONCAKE_CONFIG_PATH is not SGLang's",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/t.json", "MOONCAKE_MASTER": "e:1"},
			primary: "environment",
			want:    map[string]string{"master_server_address": "e:1"},
			warn:    []string{"SGLang does not read it; SGLang's file comes from SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"},
		},
		{
			name:    "file naming only a client",
			file:    "/client.json",
			primary: "/client.json",
			want:    map[string]string{"client_server_address": "c:1", "standalone_storage": "true"},
		},
		{
			name:    "environment form",
			env:     map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "8gb", "MOONCAKE_MASTER_METRICS_PORT": "9100", "MOONCAKE_CHECK_SERVER": "y", "MOONCAKE_TENANT_ID": "  "},
			primary: "environment",
			want:    map[string]string{"master_server_address": "e:1", "global_segment_size": "8589934592", "master_metrics_port": "9100", "check_server": "true", "tenant_id": "default"},
			from:    map[string]string{"global_segment_size": "env MOONCAKE_GLOBAL_SEGMENT_SIZE", "local_hostname": "default"},
		},
		{
			name: "legacy LOCAL_HOSTNAME",
			env:  map[string]string{"MOONCAKE_MASTER": "e:1", "LOCAL_HOSTNAME": "legacy"},
			want: map[string]string{"local_hostname": "legacy"},
			from: map[string]string{"local_hostname": "env LOCAL_HOSTNAME"},
		},
		{
			name: "MOONCAKE_LOCAL_HOSTNAME beats LOCAL_HOSTNAME",
			env:  map[string]string{"MOONCAKE_MASTER": "e:1", "LOCAL_HOSTNAME": "legacy", "MOONCAKE_LOCAL_HOSTNAME": "new"},
			want: map[string]string{"local_hostname": "new"},
		},
		{
			name: "MOONCAKE_CLIENT alone, standalone storage",
			env:  map[string]string{"MOONCAKE_CLIENT": "c:1", "MOONCAKE_STANDALONE_STORAGE": "true"},
			want: map[string]string{"client_server_address": "c:1", "standalone_storage": "true"},
		},
		{
			name:  "SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE applies whatever the source",
			env:   map[string]string{"SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE": "33554432"},
			extra: `{"master_server_address":"x:1","local_buffer_size":0}`,
			want:  map[string]string{"local_buffer_size": "33554432"},
			from:  map[string]string{"local_buffer_size": "env SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE"},
		},
		{
			name: "EnvBool falls back to its default on a value it does not know",
			env:  map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_CHECK_SERVER": "on"},
			want: map[string]string{"check_server": "false"},
			warn: []string{"MOONCAKE_CHECK_SERVER=\"on\" is not a boolean SGLang knows"},
		},
		{
			name: "EnvInt falls back to its default on a bad value",
			env:  map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_MASTER_METRICS_PORT": "abc"},
			want: map[string]string{"master_metrics_port": "9003"},
			warn: []string{"MOONCAKE_MASTER_METRICS_PORT=\"abc\" is not an integer"},
		},
		{
			name:  "string boolean in the extra config",
			extra: `{"master_server_address":"x:1","check_server":"false"}`,
			want:  map[string]string{"check_server": "false"},
			warn:  []string{`check_server is the string "false": mooncake-go reads false, upstream sglang would read true`},
		},
		{name: "no source", env: map[string]string{"MOONCAKE_CONFIG_PATH": "/s.json"}, wantErr: ErrNoSource},
		{name: "file without master or client", file: "/nomaster.json", wantErr: ErrMissingKey},
		{name: "set-but-empty MOONCAKE_MASTER passes selection, then fails validation", env: map[string]string{"MOONCAKE_MASTER": ""}, wantErr: ErrInvalid},
		{name: "bad MOONCAKE_GLOBAL_SEGMENT_SIZE", env: map[string]string{"MOONCAKE_MASTER": "e:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "4 gigs"}, wantErr: ErrBadValue},
		{name: "bad SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE", env: map[string]string{"MOONCAKE_MASTER": "e:1", "SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE": ""}, wantErr: ErrBadValue},
		{name: "empty SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", env: map[string]string{"SGLANG_HICACHE_MOONCAKE_CONFIG_PATH": ""}, wantErr: ErrNoSource},
	})
}

func TestPrecedenceLMCache(t *testing.T) {
	files := mem{
		"/l.json":  `{"local_hostname":"f","metadata_server":"P2PHANDSHAKE"}`,
		"/l2.json": `{"local_hostname":"f","metadata_server":"P2PHANDSHAKE","master_server_address":"f:1","device_name":"mlx5_0"}`,
	}
	const extra = `{"local_hostname":"x","metadata_server":"P2PHANDSHAKE","master_server_address":"x:1","save_chunk_meta":false,"remote_storage_plugin.kvpool.url":"kvpool://h:1"}`
	runPrecedence(t, LMCache, files, []precCase{
		{
			name:    "MOONCAKE_CONFIG_PATH file beats extra_config",
			env:     map[string]string{"MOONCAKE_CONFIG_PATH": "/l2.json"},
			extra:   extra,
			primary: "/l2.json",
			want:    map[string]string{"master_server_address": "f:1", "local_hostname": "f"},
			ignored: map[string]string{"extra:master_server_address": "MOONCAKE_CONFIG_PATH is set", "extra:save_chunk_meta": "LMCache setting"},
		},
		{
			name:    "extra_config with LMCache's own keys",
			extra:   extra,
			primary: "extra",
			want:    map[string]string{"master_server_address": "x:1", "protocol": "tcp", "global_segment_size": "3355443200"},
			ignored: map[string]string{"extra:save_chunk_meta": "LMCache setting", "extra:remote_storage_plugin.kvpool.url": "LMCache plugin"},
		},
		{
			name: "remote_url fills an empty master address",
			file: "/l.json",
			url:  "mooncakestore://u.example:7/",
			want: map[string]string{"master_server_address": "u.example:7"},
			from: map[string]string{"master_server_address": "url mooncakestore://u.example:7/"},
		},
		{
			name: "remote_url does not replace a configured master; ?device= replaces device_name",
			file: "/l2.json",
			url:  "mooncakestore://u:7/?device=mlx5_3",
			want: map[string]string{"master_server_address": "f:1", "device_name": "mlx5_3"},
			from: map[string]string{"master_server_address": "/l2.json:master_server_address", "device_name": "url mooncakestore://u:7/?device=mlx5_3"},
		},
		{
			name:  "prefer_local_alloc, the older spelling",
			extra: `{"local_hostname":"x","metadata_server":"P2PHANDSHAKE","master_server_address":"x:1","prefer_local_alloc":true,"transfer_timeout":2.5}`,
			want:  map[string]string{"mooncake_prefer_local_alloc": "true"},
			from:  map[string]string{"mooncake_prefer_local_alloc": "extra:prefer_local_alloc"},
		},
		{
			name:  "string size",
			extra: `{"local_hostname":"x","metadata_server":"P2PHANDSHAKE","master_server_address":"x:1","global_segment_size":"4gb"}`,
			want:  map[string]string{"global_segment_size": "4294967296"},
			warn:  []string{"LMCache passes it to Mooncake unparsed"},
		},
		{name: "no source", env: map[string]string{"MOONCAKE_MASTER": "e:1"}, wantErr: ErrNoSource},
		{name: "extra_config without metadata_server", extra: `{"local_hostname":"x","master_server_address":"x:1"}`, wantErr: ErrMissingKey},
		{name: "empty extra_config", extra: `{}`, wantErr: ErrMissingKey},
		{name: "remote_url with a port-less host leaves the master empty", file: "/l.json", url: "mooncakestore://u/", wantErr: ErrInvalid},
		{name: "two hosts", file: "/l.json", url: "mooncakestore://a:1,b:2/", wantErr: ErrBadValue},
		{name: "another scheme", file: "/l.json", url: "redis://a:1/", wantErr: ErrBadValue},
	})
}

// TestTransferTimeout checks the seconds value, which the table cannot
// format.
func TestTransferTimeout(t *testing.T) {
	c, _ := mustLoad(t, LoadOptions{Integration: LMCache,
		Extra: []byte(`{"local_hostname":"x","metadata_server":"P2PHANDSHAKE","master_server_address":"x:1","transfer_timeout":2.5}`)})
	if c.TransferTimeout.Seconds() != 2.5 {
		t.Errorf("TransferTimeout = %v, want 2.5s", c.TransferTimeout)
	}
}
