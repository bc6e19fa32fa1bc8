package config

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

func TestUnknownAndIgnoredKeys(t *testing.T) {
	files := mem{"/v.json": `{
		"metadata_server": "P2PHANDSHAKE",
		"master_server_address": "m:1",
		"transfer_timeout": 3,
		"use_ascend_direct": true,
		"global_segmnet_size": "8gb",
		"zz_custom": 1
	}`}
	_, rep, err := Load(LoadOptions{Integration: VLLM, File: "/v.json", ReadFile: files.read,
		Extra: []byte(`{"load_async": true, "mystery": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, u := range rep.Unknown {
		unknown = append(unknown, u.String())
	}
	if want := []string{"/v.json:global_segmnet_size", "/v.json:zz_custom", "extra:mystery"}; !slices.Equal(unknown, want) {
		t.Errorf("Unknown = %q, want %q", unknown, want)
	}
	reasons := map[string]string{}
	for _, i := range rep.Ignored {
		reasons[i.KeyRef.String()] = i.Reason
	}
	for ref, want := range map[string]string{
		"/v.json:transfer_timeout":  "read by: lmcache file/extra config",
		"/v.json:use_ascend_direct": "vllm-ascend",
		"extra:load_async":          "vLLM connector setting",
	} {
		if !strings.Contains(reasons[ref], want) {
			t.Errorf("reason for %s = %q, want it to contain %q", ref, reasons[ref], want)
		}
	}
	notes := rep.Notes(func(origin string) bool { return origin == "extra" })
	if len(notes) != 4 || !strings.Contains(notes[0], `config /v.json: unknown key "global_segmnet_size"`) ||
		!strings.Contains(notes[2], `config /v.json: key "transfer_timeout" ignored: `) || !strings.Contains(notes[2], "read by: lmcache") {
		t.Errorf("Notes (extra skipped) = %q", notes)
	}
	if all := rep.Notes(nil); len(all) != 6 || !strings.Contains(strings.Join(all, "\n"), `config extra: unknown key "mystery"`) {
		t.Errorf("Notes(nil) = %q", all)
	}
	if got := rep.String(); !strings.Contains(got, "unknown key /v.json:zz_custom") || !strings.Contains(got, "master_server_address <- /v.json:master_server_address") {
		t.Errorf("Report.String() =\n%s", got)
	}
}

func TestBadValueNamesTheKey(t *testing.T) {
	files := mem{"/g.json": `{"local_hostname":"h","metadata_server":"m","master_server_address":"a:1","global_segment_size":true}`}
	_, _, err := Load(LoadOptions{Integration: Generic, File: "/g.json", ReadFile: files.read})
	if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "/g.json:global_segment_size") {
		t.Fatalf("err = %v, want ErrBadValue naming /g.json:global_segment_size", err)
	}
}

func TestParseSize(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"3355443200", 3355443200, true},
		{" 4096 ", 4096, true},
		{"0", 0, true},
		{"4gb", 4 * gib, true}, // SGLang's MOONCAKE_GLOBAL_SEGMENT_SIZE default
		{"4GB", 4 * gib, true},
		{"4 gb", 4 * gib, true},
		{"4g", 4 * gib, true}, // Mooncake's short suffixes
		{"1GiB", gib, true},
		{"80GB", 80 * gib, true}, // vLLM docs
		{"512MB", 512 << 20, true},
		{"16kb", 16 << 10, true},
		{"2tb", 2 << 40, true},
		{"100b", 100, true},
		{"1.5gb", 1610612736, true},
		{"0.5b", 0, true}, // truncated, as int(float(x))
		{"1e9", 1000000000, true},
		{"1.5e3mb", 1500 << 20, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"", 0, false},
		{"  ", 0, false},
		{"gb", 0, false},
		{"-1", 0, false},
		{"-1gb", 0, false},
		{"4 potatoes", 0, false},
		{"4pb", 0, false},
		{"1.2.3", 0, false},
		{"9223372036854775808", 0, false},
		{"9e18gb", 0, false},
		{"2e", 0, false},
		{"inf", 0, false},
		{"nan", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.ok && (err != nil || got != tt.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
		if !tt.ok {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", tt.in, got)
			} else if !errors.Is(err, ErrBadValue) {
				t.Errorf("ParseSize(%q) error %v does not wrap ErrBadValue", tt.in, err)
			}
		}
	}
	if _, err := ParseSize("4 potatoes"); !errors.Is(err, geometry.ErrInvalidSize) {
		t.Errorf("error does not wrap geometry.ErrInvalidSize: %v", err)
	}
}

func TestSizeOfJSONNumbers(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"3355443200", 3355443200, true},
		{"3355443200.0", 3355443200, true},
		{"1.9", 1, true},       // int() truncates
		{"-4096", -4096, true}, // Validate rejects it later
		{"1e3", 1000, true},
		{"1e30", 0, false},
		{"true", 0, false},
		{"null", 0, false},
		{"[1]", 0, false},
	}
	for _, tt := range tests {
		m, err := decodeObject([]byte(`{"v":` + tt.in + `}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := sizeOf(m["v"])
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("sizeOf(%s) = %d, %v; want %d ok=%t", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestBoolOf(t *testing.T) {
	for in, want := range map[string]bool{
		`true`: true, `false`: false, `1`: true, `0`: false, `"yes"`: true, `"Y"`: true, `"on"`: true,
		`"false"`: false, `"No"`: false, `"off"`: false, `""`: false, `" TRUE "`: true,
	} {
		m, _ := decodeObject([]byte(`{"v":` + in + `}`))
		got, err := boolOf(m["v"])
		if err != nil || got != want {
			t.Errorf("boolOf(%s) = %t, %v; want %t", in, got, err, want)
		}
	}
	for _, in := range []string{`"maybe"`, `[]`, `{}`} {
		m, _ := decodeObject([]byte(`{"v":` + in + `}`))
		if _, err := boolOf(m["v"]); !errors.Is(err, ErrBadValue) {
			t.Errorf("boolOf(%s): err = %v, want ErrBadValue", in, err)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := func(in Integration) Config {
		c := Defaults(in)
		c.LocalHostname, c.MetadataServer, c.MasterServerAddress = "node1", "P2PHANDSHAKE", "m:50051"
		return c
	}
	tests := []struct {
		name   string
		c      Config
		errHas []string // empty: valid
	}{
		{name: "generic defaults plus a master", c: valid(Generic)},
		{name: "vllm defaults plus a master", c: valid(VLLM)},
		{name: "sglang defaults plus a master", c: valid(SGLang)},
		{name: "lmcache defaults plus a master", c: valid(LMCache)},
		{name: "bad protocol", c: func() Config { c := valid(Generic); c.Protocol = "RDMA"; return c }(), errHas: []string{`protocol "RDMA" is not one of tcp, rdma`}},
		{name: "negative sizes", c: func() Config { c := valid(Generic); c.GlobalSegmentSize, c.LocalBufferSize = -1, -2; return c }(),
			errHas: []string{"global_segment_size -1 is negative", "local_buffer_size -2 is negative"}},
		{name: "negative timeout", c: func() Config { c := valid(LMCache); c.TransferTimeout = -time.Second; return c }(), errHas: []string{"transfer_timeout -1s is negative"}},
		{name: "empty hostname", c: func() Config { c := valid(LMCache); c.LocalHostname = " "; return c }(), errHas: []string{"local_hostname is empty"}},
		{name: "vllm leaves the hostname to the rank IP", c: func() Config { c := valid(VLLM); c.LocalHostname = ""; return c }()},
		{name: "empty master", c: func() Config { c := valid(Generic); c.MasterServerAddress = ""; return c }(), errHas: []string{"master_server_address is empty"}},
		{name: "empty metadata server", c: func() Config { c := valid(VLLM); c.MetadataServer = ""; return c }(), errHas: []string{"metadata_server is empty"}},
		{name: "empty tenant", c: func() Config { c := valid(Generic); c.TenantID = ""; return c }(), errHas: []string{"tenant_id is empty"}},
		{name: "vllm bad mode", c: func() Config { c := valid(VLLM); c.Mode = "hybrid"; return c }(), errHas: []string{`mode "hybrid" is not`}},
		{name: "vllm embedded with no segment", c: func() Config { c := valid(VLLM); c.GlobalSegmentSize = 0; return c }(), errHas: []string{"needs global_segment_size > 0"}},
		{name: "vllm standalone with a segment", c: func() Config { c := valid(VLLM); c.Mode = ModeStandaloneStore; return c }(), errHas: []string{"needs global_segment_size 0"}},
		{name: "vllm zero buffer", c: func() Config { c := valid(VLLM); c.LocalBufferSize = 0; return c }(), errHas: []string{"local_buffer_size must be > 0"}},
		{name: "generic zero buffer is a pure store", c: func() Config { c := valid(Generic); c.LocalBufferSize = 0; return c }()},
		{name: "sglang standalone needs a client", c: func() Config { c := valid(SGLang); c.StandaloneStorage = true; return c }(), errHas: []string{"standalone_storage needs client_server_address"}},
		{name: "sglang standalone needs no master", c: func() Config {
			c := valid(SGLang)
			c.StandaloneStorage, c.ClientServerAddress, c.MasterServerAddress = true, "c:1", ""
			return c
		}()},
		{name: "sglang port", c: func() Config { c := valid(SGLang); c.MasterMetricsPort = 70000; return c }(), errHas: []string{"master_metrics_port 70000"}},
		{name: "sglang bad device map", c: func() Config { c := valid(SGLang); c.DeviceName = `{"0": ["a"]`; return c }(), errHas: []string{"rank-to-device JSON object"}},
		{name: "several problems at once", c: Config{Integration: Generic}, errHas: []string{"protocol", "local_hostname", "master_server_address", "metadata_server", "tenant_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if len(tt.errHas) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestDeviceForRank(t *testing.T) {
	c := Config{DeviceName: `{"0": "mlx5_0,mlx5_1", "1": "mlx5_2"}`}
	for rank, want := range map[int]string{0: "mlx5_0,mlx5_1", 1: "mlx5_2", 2: ""} {
		if got := c.DeviceForRank(rank); got != want {
			t.Errorf("DeviceForRank(%d) = %q, want %q", rank, got, want)
		}
	}
	if got := (Config{DeviceName: "mlx5_0"}).DeviceForRank(3); got != "mlx5_0" {
		t.Errorf("plain list: %q", got)
	}
	if got := (Config{DeviceName: "{broken"}).DeviceForRank(0); got != "" {
		t.Errorf("broken map: %q, want auto-detect", got)
	}
}

func TestIntegrationNames(t *testing.T) {
	for in := Generic; in <= LMCache; in++ {
		got, err := ParseIntegration(strings.ToUpper(in.String()))
		if err != nil || got != in {
			t.Errorf("ParseIntegration(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseIntegration("trtllm"); !errors.Is(err, ErrBadValue) {
		t.Errorf("err = %v", err)
	}
	if s := Integration(9).String(); s != "integration(9)" {
		t.Errorf("String = %q", s)
	}
	if _, _, err := Load(LoadOptions{Integration: Integration(9)}); !errors.Is(err, ErrBadValue) {
		t.Errorf("Load with a bad integration: %v", err)
	}
}

func TestFromOS(t *testing.T) {
	t.Setenv("MOONCAKE_CONFIG_TEST_VAR", "a=b")
	if got := FromOS()["MOONCAKE_CONFIG_TEST_VAR"]; got != "a=b" {
		t.Errorf("FromOS()[...] = %q, want %q", got, "a=b")
	}
}

func TestConfigJSONKeys(t *testing.T) {
	// The JSON tags are the upstream keys, so a Config marshals to a file
	// its integration reads back.
	c := Defaults(VLLM)
	c.MetadataServer, c.MasterServerAddress = "P2PHANDSHAKE", "m:1"
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, rep := mustLoad(t, LoadOptions{Integration: VLLM, File: "/c.json", ReadFile: mem{"/c.json": string(b)}.read})
	if d := diffConfig(back, c); d != "" {
		t.Errorf("round trip differs:\n%s", d)
	}
	if len(rep.Unknown) != 0 {
		t.Errorf("Unknown = %v", rep.Unknown)
	}
}
