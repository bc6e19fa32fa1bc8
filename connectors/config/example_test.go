package config_test

import (
	"fmt"

	"github.com/mooncake-go/mooncake/connectors/config"
)

// SGLang started with only MOONCAKE_* variables, as in its README.
func ExampleLoad() {
	cfg, rep, err := config.Load(config.LoadOptions{
		Integration: config.SGLang,
		Env: map[string]string{
			"MOONCAKE_MASTER":              "127.0.0.1:50051",
			"MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
			"MOONCAKE_GLOBAL_SEGMENT_SIZE": "4gb",
			"MOONCAKE_PROTOCOL":            "tcp",
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.MasterServerAddress, cfg.Protocol, cfg.GlobalSegmentSize, cfg.LocalBufferSize, cfg.LocalHostname)
	fmt.Println(rep.Primary, "|", rep.Sources["global_segment_size"], "|", rep.Sources["local_hostname"])
	// Output:
	// 127.0.0.1:50051 tcp 4294967296 16777216 localhost
	// environment | env MOONCAKE_GLOBAL_SEGMENT_SIZE | default
}

// vLLM reads Mooncake keys only from MOONCAKE_CONFIG_PATH; keys it does not
// read are reported, not fatal.
func ExampleLoad_vllm() {
	_, rep, err := config.Load(config.LoadOptions{
		Integration: config.VLLM,
		Env:         map[string]string{"MOONCAKE_CONFIG_PATH": "testdata/vllm/mooncake_config.json"},
		Extra:       []byte(`{"master_server_address": "10.0.0.1:50051", "load_async": true}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Sources["master_server_address"])
	for _, i := range rep.Ignored {
		fmt.Printf("%s: %s\n", i.KeyRef, i.Reason)
	}
	// Output:
	// testdata/vllm/mooncake_config.json:master_server_address
	// extra:load_async: a vLLM connector setting
	// extra:master_server_address: vLLM reads Mooncake settings only from the MOONCAKE_CONFIG_PATH file
}
