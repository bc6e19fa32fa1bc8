package config

import (
	"slices"
	"strings"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// form is one kind of source an integration reads keys from.
type form int

const (
	formFile  form = iota // a JSON file
	formExtra             // the engine's extra-config object
	formEnv               // environment variables
)

var formNames = [...]string{"file", "extra config", "environment"}

func (f form) String() string { return formNames[f] }

// fieldPtr returns a pointer to the Config field a JSON key sets: *string,
// *int64 (a size), *bool, *int or *time.Duration (seconds).
func fieldPtr(c *Config, key string) any {
	switch key {
	case "local_hostname":
		return &c.LocalHostname
	case "metadata_server":
		return &c.MetadataServer
	case "master_server_address":
		return &c.MasterServerAddress
	case "client_server_address":
		return &c.ClientServerAddress
	case "global_segment_size":
		return &c.GlobalSegmentSize
	case "local_buffer_size":
		return &c.LocalBufferSize
	case "protocol":
		return &c.Protocol
	case "device_name":
		return &c.DeviceName
	case "mode":
		return &c.Mode
	case "standalone_storage":
		return &c.StandaloneStorage
	case "enable_offload":
		return &c.EnableOffload
	case "enable_ssd_offload":
		return &c.EnableSSDOffload
	case "ssd_offload_path":
		return &c.SSDOffloadPath
	case "tenant_id":
		return &c.TenantID
	case "preferred_segment":
		return &c.PreferredSegment
	case "master_metrics_port":
		return &c.MasterMetricsPort
	case "check_server":
		return &c.CheckServer
	case "extra_backend_tag":
		return &c.ExtraBackendTag
	case "enable_group_semantics":
		return &c.EnableGroupSemantics
	case "transfer_timeout":
		return &c.TransferTimeout
	case "storage_root_dir":
		return &c.StorageRootDir
	case "mooncake_prefer_local_alloc":
		return &c.PreferLocalAlloc
	case "mooncake_page_first_multi_buffer":
		return &c.PageFirstMultiBuffer
	case KeyTLSCA:
		return &c.TLSCAFile
	case KeyTLSCert:
		return &c.TLSCertFile
	case KeyTLSKey:
		return &c.TLSKeyFile
	case KeyTLSServerName:
		return &c.TLSServerName
	case KeyEtcdTLSCA:
		return &c.EtcdTLSCAFile
	case KeyEtcdTLSCert:
		return &c.EtcdTLSCertFile
	case KeyEtcdTLSKey:
		return &c.EtcdTLSKeyFile
	}
	return nil
}

// Keys of our own (upstream has no transport security): the TLS files of
// the store client (core/tlsconfig). Every integration reads them from
// whichever file or extra config it reads Mooncake keys from; a key none
// of those sets comes from its environment variable (tlsEnv), whatever
// the integration.
const (
	KeyTLSCA         = "mc_tls_ca_file"
	KeyTLSCert       = "mc_tls_cert_file"
	KeyTLSKey        = "mc_tls_key_file"
	KeyTLSServerName = "mc_tls_server_name"
	KeyEtcdTLSCA     = "mc_etcd_tls_ca_file"
	KeyEtcdTLSCert   = "mc_etcd_tls_cert_file"
	KeyEtcdTLSKey    = "mc_etcd_tls_key_file"
)

// tlsEnv pairs each TLS key with its variable, in key order.
var tlsEnv = []envVar{
	{tlsconfig.EnvCA, KeyTLSCA},
	{tlsconfig.EnvCert, KeyTLSCert},
	{tlsconfig.EnvKey, KeyTLSKey},
	{tlsconfig.EnvServerName, KeyTLSServerName},
	{tlsconfig.EnvEtcdCA, KeyEtcdTLSCA},
	{tlsconfig.EnvEtcdCert, KeyEtcdTLSCert},
	{tlsconfig.EnvEtcdKey, KeyEtcdTLSKey},
}

// withTLS is keys followed by the TLS keys.
func withTLS(keys ...string) []string {
	out := slices.Clip(keys)
	for _, e := range tlsEnv {
		out = append(out, e.key)
	}
	return out
}

// aliases maps other spellings to the canonical key. The canonical key wins
// when a source has both.
var aliases = map[string]string{
	"master_server_addr": "master_server_address",       // the store's dict-form setup(config)
	"rdma_devices":       "device_name",                 // the store's dict-form setup(config)
	"prefer_local_alloc": "mooncake_prefer_local_alloc", // LMCache before the mooncake_ prefix
}

func canonical(key string) (string, bool) {
	if c, ok := aliases[key]; ok {
		return c, true
	}
	return key, false
}

// reads lists, per integration and form, the keys upstream reads.
var reads = map[Integration]map[form][]string{
	// mooncake_config.py: MooncakeConfig.from_file and load_from_env.
	Generic: {
		formFile: withTLS("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
			"protocol", "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id"),
		formEnv: {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
			"protocol", "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id"},
	},
	// store/worker.py: MooncakeStoreConfig.from_file; rdma_utils.py for the
	// extra config and the requester hostname.
	VLLM: {
		formFile: withTLS("metadata_server", "master_server_address", "protocol", "device_name", "mode",
			"global_segment_size", "local_buffer_size", "enable_offload", "tenant_id"),
		formExtra: withTLS("preferred_segment"),
		formEnv:   {"local_hostname", "preferred_segment"},
	},
	// mooncake_store.py: MooncakeStoreConfig.from_file, load_from_extra_config,
	// load_from_env, plus the extra-config-only keys MooncakeStore reads.
	SGLang: {
		formFile: withTLS(sglangKeys...),
		formExtra: withTLS(append(slices.Clip(sglangKeys),
			"extra_backend_tag", "enable_group_semantics")...),
		formEnv: append(slices.Clip(sglangKeys), "local_buffer_size"),
	},
	// mooncakestore_connector.py: from_file and load_from_lmcache_config read
	// the same keys.
	LMCache: {
		formFile:  withTLS(lmcacheKeys...),
		formExtra: withTLS(lmcacheKeys...),
	},
}

var sglangKeys = []string{"local_hostname", "metadata_server", "global_segment_size", "protocol",
	"device_name", "master_server_address", "client_server_address", "master_metrics_port",
	"check_server", "standalone_storage", "enable_ssd_offload", "ssd_offload_path", "tenant_id"}

var lmcacheKeys = []string{"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
	"protocol", "device_name", "master_server_address", "transfer_timeout", "storage_root_dir",
	"mooncake_prefer_local_alloc", "mooncake_page_first_multi_buffer"}

// engineKeys are keys that share the extra-config object with ours but
// belong to the engine or to another connector: reported as ignored with
// this reason, never as unknown.
var engineKeys = map[string]string{
	// vLLM MooncakeStoreConnector's kv_connector_extra_config.
	"load_async": "a vLLM connector setting", "lookup_async": "a vLLM connector setting",
	"lookup_rpc_port": "a vLLM connector setting", "enable_lookup": "a vLLM connector setting",
	"cache_prefix": "a vLLM connector setting", "save_decode_cache": "a vLLM connector setting",
	"store_tp_size": "a vLLM connector setting", "enable_store_tp_lcm": "a vLLM connector setting",
	"prefill_tp_sizes": "a vLLM connector setting", "enable_cross_layers_blocks": "a vLLM connector setting",
	"connectors": "a vLLM MultiConnector setting",
	// vllm-ascend writes this into its mooncake.json and extra config.
	"use_ascend_direct": "a vllm-ascend setting (Ascend direct transport); mooncake-go has no Ascend transport",
	// SGLang pops or reads these before the backend sees the dict.
	"backend_name": "an SGLang HiCache setting", "module_path": "an SGLang HiCache setting",
	"class_name": "an SGLang HiCache setting", "interface_v1": "an SGLang HiCache setting",
	"prefetch_threshold": "an SGLang HiCache setting", "prefetch_timeout_base": "an SGLang HiCache setting",
	"prefetch_timeout_per_ki_token": "an SGLang HiCache setting", "prefetch_timeout_max": "an SGLang HiCache setting",
	"hicache_storage_pass_prefix_keys": "an SGLang HiCache setting", "tp_lcm_size": "an SGLang HiCache setting",
	// LMCache's own extra_config keys around the Mooncake ones.
	"save_chunk_meta": "an LMCache setting", "use_exists_sync": "an LMCache setting",
	"remote_enable_mla_worker_id_as0": "an LMCache setting", "ping_interval": "an LMCache setting",
	"ping_timeout": "an LMCache setting", "mooncake_dsa_raw_token_dims": "an LMCache setting",
}

// enginePrefixes are key prefixes of LMCache plugin settings.
var enginePrefixes = []string{"remote_storage_plugin.", "storage_plugin.", "rust_remote."}

func engineKey(key string) (string, bool) {
	if r, ok := engineKeys[key]; ok {
		return r, true
	}
	for _, p := range enginePrefixes {
		if strings.HasPrefix(key, p) {
			return "an LMCache plugin setting", true
		}
	}
	return "", false
}

// readers names who reads a canonical key, for "ignored" reasons, e.g.
// "vllm file, sglang file/extra config".
func readers(key string) string {
	var out []string
	for in := Generic; in <= LMCache; in++ {
		var forms []string
		for f := formFile; f <= formEnv; f++ {
			if slices.Contains(reads[in][f], key) {
				forms = append(forms, f.String())
			}
		}
		if len(forms) > 0 {
			out = append(out, in.String()+" "+strings.Join(forms, "/"))
		}
	}
	return strings.Join(out, ", ")
}

// envVar is one environment variable an integration reads, and its key.
type envVar struct {
	name string
	key  string
}

// genericEnv: MooncakeConfig.load_from_env. MOONCAKE_MASTER is required
// (and must be non-empty); the others default when unset.
var genericEnv = []envVar{
	{"MOONCAKE_MASTER", "master_server_address"},
	{"MOONCAKE_LOCAL_HOSTNAME", "local_hostname"},
	{"MOONCAKE_TE_META_DATA_SERVER", "metadata_server"},
	{"MOONCAKE_GLOBAL_SEGMENT_SIZE", "global_segment_size"},
	{"MOONCAKE_LOCAL_BUFFER_SIZE", "local_buffer_size"},
	{"MOONCAKE_PROTOCOL", "protocol"},
	{"MOONCAKE_DEVICE", "device_name"},
	{"MOONCAKE_OFFLOAD_ENABLED", "enable_ssd_offload"},
	{"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "ssd_offload_path"},
	{"MOONCAKE_TENANT_ID", "tenant_id"},
}

// sglangEnv: SGLang's MooncakeStoreConfig.load_from_env through
// sglang/srt/environ.py (MOONCAKE_LOCAL_HOSTNAME is handled apart for its
// LOCAL_HOSTNAME fallback).
var sglangEnv = []envVar{
	{"MOONCAKE_MASTER", "master_server_address"},
	{"MOONCAKE_CLIENT", "client_server_address"},
	{"MOONCAKE_TE_META_DATA_SERVER", "metadata_server"},
	{"MOONCAKE_GLOBAL_SEGMENT_SIZE", "global_segment_size"},
	{"MOONCAKE_PROTOCOL", "protocol"},
	{"MOONCAKE_DEVICE", "device_name"},
	{"MOONCAKE_MASTER_METRICS_PORT", "master_metrics_port"},
	{"MOONCAKE_CHECK_SERVER", "check_server"},
	{"MOONCAKE_STANDALONE_STORAGE", "standalone_storage"},
	{"MOONCAKE_ENABLE_SSD_OFFLOAD", "enable_ssd_offload"},
	{"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "ssd_offload_path"},
	{"MOONCAKE_TENANT_ID", "tenant_id"},
}

// Environment variable names with a role in some integration.
const (
	EnvConfigPath        = "MOONCAKE_CONFIG_PATH"                // Generic, VLLM, LMCache: the JSON file
	EnvSGLangConfigPath  = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH" // SGLang: the JSON file
	EnvSGLangLocalBuffer = "SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE"   // SGLang: local_buffer_size
	EnvRequesterHostname = "MOONCAKE_REQUESTER_LOCAL_HOSTNAME"   // VLLM: local_hostname
	EnvPreferredSegment  = "MOONCAKE_PREFERRED_SEGMENT"          // VLLM: preferred_segment
	EnvLegacyHostname    = "LOCAL_HOSTNAME"                      // SGLang: local_hostname fallback
	envMaster            = "MOONCAKE_MASTER"
	envClient            = "MOONCAKE_CLIENT"
	envLocalHostname     = "MOONCAKE_LOCAL_HOSTNAME"
)

// mooncakeEnv lists every variable some integration reads, so that Load
// can warn about one that is set but not read by the chosen rules.
func mooncakeEnv() []string {
	names := []string{EnvConfigPath, EnvSGLangConfigPath, EnvSGLangLocalBuffer, EnvRequesterHostname, EnvPreferredSegment}
	for _, e := range genericEnv {
		names = append(names, e.name)
	}
	for _, e := range sglangEnv {
		names = append(names, e.name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
