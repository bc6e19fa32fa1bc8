package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// Errors returned by Load and Validate; match them with errors.Is.
var (
	// ErrNoSource: the integration found nothing to load from (for example
	// Generic with neither MOONCAKE_CONFIG_PATH nor MOONCAKE_MASTER).
	ErrNoSource = errors.New("config: no configuration source")
	// ErrMissingKey: a source lacks a key its integration requires.
	ErrMissingKey = errors.New("config: missing required key")
	// ErrBadValue: a value has the wrong type or does not parse.
	ErrBadValue = errors.New("config: bad value")
	// ErrInvalid: the loaded configuration breaks a rule in Validate.
	ErrInvalid = errors.New("config: invalid configuration")
)

// Integration selects whose loading rules Load follows: which sources it
// reads, in which order, with which defaults.
type Integration int

const (
	// Generic follows Mooncake's own MooncakeConfig.load_from_env
	// (mooncake-wheel/mooncake/mooncake_config.py), used by the store
	// service and by code that only has the environment: the JSON file named
	// by MOONCAKE_CONFIG_PATH if that is set, else MOONCAKE_* variables.
	Generic Integration = iota
	// VLLM follows vLLM's MooncakeStoreConnector (kv_connector/v1/mooncake/
	// store/worker.py): Mooncake keys only from the MOONCAKE_CONFIG_PATH file,
	// local_hostname from MOONCAKE_REQUESTER_LOCAL_HOSTNAME or the rank's IP,
	// preferred_segment from kv_connector_extra_config or
	// MOONCAKE_PREFERRED_SEGMENT.
	VLLM
	// SGLang follows SGLang HiCache's Mooncake backend
	// (mem_cache/storage/mooncake_store/mooncake_store.py): extra-config when
	// it names a master or client address, else the file named by
	// SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, else MOONCAKE_* variables.
	SGLang
	// LMCache follows LMCache's MooncakestoreConnector
	// (lmcache/v1/storage_backend/connector/mooncakestore_connector.py): the
	// MOONCAKE_CONFIG_PATH file if set, else extra_config, then the
	// mooncakestore:// URL fills an empty master address and ?device=.
	LMCache
)

var integrationNames = [...]string{"generic", "vllm", "sglang", "lmcache"}

// String returns "generic", "vllm", "sglang" or "lmcache".
func (i Integration) String() string {
	if i >= 0 && int(i) < len(integrationNames) {
		return integrationNames[i]
	}
	return "integration(" + strconv.Itoa(int(i)) + ")"
}

// ParseIntegration is the inverse of String (case-insensitive).
func ParseIntegration(s string) (Integration, error) {
	for i, n := range integrationNames {
		if strings.EqualFold(s, n) {
			return Integration(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown integration %q (want %s)", ErrBadValue, s, strings.Join(integrationNames[:], ", "))
}

// Sizes that appear among the upstream defaults.
const (
	// DefaultStoreSegmentSize is MooncakeConfig's and LMCache's
	// global_segment_size default (3.125 GiB), and vLLM's before it had its
	// own v1 connector.
	DefaultStoreSegmentSize int64 = 3355443200
	// DefaultStoreBufferSize is MooncakeConfig's and LMCache's
	// local_buffer_size default (1 GiB).
	DefaultStoreBufferSize int64 = 1 << 30
	// DefaultEngineSize is vLLM v1's global_segment_size and
	// local_buffer_size default and SGLang's global_segment_size default
	// ("4gb"): 4 GiB.
	DefaultEngineSize int64 = 4 << 30
	// DefaultSGLangBufferSize is SGLang's local buffer
	// (SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE): 16 MiB, since its zero-copy
	// calls need almost none. It equals DEFAULT_LOCAL_BUFFER_SIZE (and
	// DEFAULT_GLOBAL_SEGMENT_SIZE) of the store's C++ types.h, which the
	// dict-form setup(config) falls back to.
	DefaultSGLangBufferSize int64 = 16 << 20
	// DefaultMasterAddress is the master that the store's dict-form setup
	// uses when master_server_addr is absent; no loader here fills it in.
	DefaultMasterAddress = "127.0.0.1:50051"
	// DefaultMetadataServer selects the transfer engine's peer-to-peer
	// handshake instead of a metadata server.
	DefaultMetadataServer = "P2PHANDSHAKE"
	// DefaultTenant is every integration's tenant_id default.
	DefaultTenant = "default"
)

// Modes of vLLM's Mooncake store connector (the "mode" key).
const (
	ModeEmbedded        = "embedded"         // each rank contributes global_segment_size
	ModeStandaloneStore = "standalone-store" // an external mooncake_client owns the pool; ranks contribute 0
)

// Protocols lists the transfer-engine protocol names Validate accepts:
// those of mooncake_config.py's docstring plus efa.
var Protocols = []string{"tcp", "rdma", "nvmeof", "nvlink", "nvlink_intra", "hip", "barex", "cxl", "ascend", "efa"}

// Config is a Mooncake store client configuration in the vocabulary of the
// upstream JSON files. Each field names its JSON key, its default per
// integration (G=Generic, V=VLLM, S=SGLang, L=LMCache; "-" where that
// integration does not read it and the zero value stays), and its
// environment variable where one exists. Load fills it; Validate checks
// it. Start from Defaults when building one by hand.
type Config struct {
	// Integration is the rule set the values were loaded under; Validate
	// adds that integration's own checks.
	Integration Integration `json:"-"`

	// LocalHostname (local_hostname) is this client's address as peers
	// see it, optionally host:port. G: file key required, env
	// MOONCAKE_LOCAL_HOSTNAME else "localhost"; V: not read from the file
	// - MOONCAKE_REQUESTER_LOCAL_HOSTNAME, else empty and the adapter uses
	// the rank's IP; S: "localhost", env MOONCAKE_LOCAL_HOSTNAME then
	// legacy LOCAL_HOSTNAME; L: required in extra_config, "" from a file.
	LocalHostname string `json:"local_hostname"`
	// MetadataServer (metadata_server) is the transfer-engine metadata
	// service: "P2PHANDSHAKE", "http://host:8080/metadata", "etcd://host:2379",
	// "redis://...". G: file key required, env MOONCAKE_TE_META_DATA_SERVER
	// else "P2PHANDSHAKE"; V: ""; S: "P2PHANDSHAKE", same env; L: required
	// in extra_config.
	MetadataServer string `json:"metadata_server"`
	// MasterServerAddress (master_server_address; master_server_addr, the
	// store's dict-form name, is accepted as an alias) is the master RPC
	// host:port (port 50051 by default). G: file key required, env
	// MOONCAKE_MASTER required; V: ""; S: env MOONCAKE_MASTER, required
	// unless client_server_address is given; L: required in extra_config,
	// else host:port of the mooncakestore:// URL.
	MasterServerAddress string `json:"master_server_address"`
	// ClientServerAddress (client_server_address, env MOONCAKE_CLIENT) is
	// the standalone mooncake_client that owns memory in SGLang's
	// standalone_storage mode. S only.
	ClientServerAddress string `json:"client_server_address,omitempty"`
	// GlobalSegmentSize (global_segment_size) is the memory this client
	// mounts into the pool, in bytes; 0 makes it a pure requester. G:
	// 3355443200, env MOONCAKE_GLOBAL_SEGMENT_SIZE; V: 4 GiB; S: "4gb", env
	// MOONCAKE_GLOBAL_SEGMENT_SIZE - for the whole instance: SGLang gives
	// each rank GlobalSegmentSize/(tp_size*pp_size); L: 3355443200.
	GlobalSegmentSize int64 `json:"global_segment_size"`
	// LocalBufferSize (local_buffer_size) is the client's registered
	// staging buffer, in bytes. G: 1073741824, env
	// MOONCAKE_LOCAL_BUFFER_SIZE; V: 4 GiB, must be > 0; S: the key is
	// ignored - env SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE else 16 MiB; L:
	// 1073741824.
	LocalBufferSize int64 `json:"local_buffer_size"`
	// Protocol (protocol) is the transport: one of Protocols. G: "tcp", env
	// MOONCAKE_PROTOCOL; V: "rdma"; S: "rdma" (SGLang releases of 2025 used
	// "tcp"), env MOONCAKE_PROTOCOL; L: "tcp".
	Protocol string `json:"protocol"`
	// DeviceName (device_name; rdma_devices accepted as an alias) lists RDMA
	// NICs ("mlx5_0,mlx5_1"); empty means auto-detect. SGLang also takes a
	// JSON object mapping tensor-parallel rank to a list: see DeviceForRank.
	// All: "", env MOONCAKE_DEVICE for G and S; L: ?device= in the URL wins.
	DeviceName string `json:"device_name"`

	// Mode (mode) is vLLM's topology, ModeEmbedded (default) or
	// ModeStandaloneStore. V only.
	Mode string `json:"mode,omitempty"`
	// StandaloneStorage (standalone_storage, env MOONCAKE_STANDALONE_STORAGE)
	// makes SGLang a dummy client of the mooncake_client at
	// ClientServerAddress. S only; false.
	StandaloneStorage bool `json:"standalone_storage,omitempty"`
	// EnableOffload (enable_offload) is vLLM's switch for the owner-side SSD
	// tier: it sizes GET batches to the owner's DirectIO staging buffer. V
	// only; false.
	EnableOffload bool `json:"enable_offload,omitempty"`
	// EnableSSDOffload (enable_ssd_offload) passes SSD offload to the
	// store's setup. G: false, env MOONCAKE_OFFLOAD_ENABLED; S: false, env
	// MOONCAKE_ENABLE_SSD_OFFLOAD.
	EnableSSDOffload bool `json:"enable_ssd_offload,omitempty"`
	// SSDOffloadPath (ssd_offload_path, env MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)
	// is the SSD offload directory. G and S; "".
	SSDOffloadPath string `json:"ssd_offload_path,omitempty"`
	// TenantID (tenant_id) namespaces keys on a multi-tenant master. G, V, S:
	// "default" (env MOONCAKE_TENANT_ID for G and S; SGLang maps blank to
	// "default").
	TenantID string `json:"tenant_id,omitempty"`
	// PreferredSegment pins puts to one owner segment (host:port). V only:
	// kv_connector_extra_config preferred_segment, else env
	// MOONCAKE_PREFERRED_SEGMENT; "".
	PreferredSegment string `json:"preferred_segment,omitempty"`

	// MasterMetricsPort (master_metrics_port, env
	// MOONCAKE_MASTER_METRICS_PORT) is the master's HTTP port that
	// CheckServer polls. S only; 9003.
	MasterMetricsPort int `json:"master_metrics_port,omitempty"`
	// CheckServer (check_server, env MOONCAKE_CHECK_SERVER) makes SGLang
	// wait (up to 600 s) for the master to list a segment before setup. S
	// only; false.
	CheckServer bool `json:"check_server,omitempty"`
	// ExtraBackendTag (extra_backend_tag) prefixes every SGLang key, to keep
	// tenants or deployments apart. S only, extra-config only; "".
	ExtraBackendTag string `json:"extra_backend_tag,omitempty"`
	// EnableGroupSemantics (enable_group_semantics) tags SGLang puts with
	// group id "sglang-hicache:<page key>". S only, extra-config only; false.
	EnableGroupSemantics bool `json:"enable_group_semantics,omitempty"`

	// TransferTimeout (transfer_timeout, seconds) bounds each LMCache put;
	// a put that times out is dropped with a warning. L only; 1 s.
	TransferTimeout time.Duration `json:"transfer_timeout,omitempty"`
	// StorageRootDir (storage_root_dir) is exported by LMCache as
	// MOONCAKE_STORAGE_ROOT_DIR for Mooncake's legacy disk persistence.
	// L only; "". Accepted for compatibility; mooncake-go does not act on it.
	StorageRootDir string `json:"storage_root_dir,omitempty"`
	// PreferLocalAlloc (mooncake_prefer_local_alloc; older LMCache:
	// prefer_local_alloc) makes LMCache prefer its own segment for puts. L
	// only; false.
	PreferLocalAlloc bool `json:"mooncake_prefer_local_alloc,omitempty"`
	// PageFirstMultiBuffer (mooncake_page_first_multi_buffer) selects
	// LMCache's page-first multi-buffer data path (needs save_chunk_meta
	// false). L only; false. Consumed by the LMCache adapter, not the store.
	PageFirstMultiBuffer bool `json:"mooncake_page_first_multi_buffer,omitempty"`

	// TLSCAFile, TLSCertFile and TLSKeyFile (mc_tls_ca_file,
	// mc_tls_cert_file, mc_tls_key_file; env MC_TLS_CA_FILE,
	// MC_TLS_CERT_FILE, MC_TLS_KEY_FILE) turn on mutual TLS to a master
	// started with --tls-ca/--tls-cert/--tls-key: the CA bundle, this
	// client's certificate and its key, PEM files; all three or none. The
	// master's metadata server is then https:// (an http:// metadata_server
	// is refused). Ours, every integration; "" = plaintext, as upstream.
	TLSCAFile   string `json:"mc_tls_ca_file,omitempty"`
	TLSCertFile string `json:"mc_tls_cert_file,omitempty"`
	TLSKeyFile  string `json:"mc_tls_key_file,omitempty"`
	// TLSServerName (mc_tls_server_name, env MC_TLS_SERVER_NAME) is the
	// name verified in the master's certificate instead of the host of
	// master_server_address. Ours; "".
	TLSServerName string `json:"mc_tls_server_name,omitempty"`
	// EtcdTLSCAFile, EtcdTLSCertFile, EtcdTLSKeyFile (mc_etcd_tls_ca_file,
	// mc_etcd_tls_cert_file, mc_etcd_tls_key_file; env MC_ETCD_TLS_CA_FILE,
	// MC_ETCD_TLS_CERT_FILE, MC_ETCD_TLS_KEY_FILE) turn on TLS to etcd (an
	// etcd:// master_server_address or metadata_server): the CA bundle of
	// etcd's certificate, and a client certificate and key (both or
	// neither). Ours; "" = plaintext.
	EtcdTLSCAFile   string `json:"mc_etcd_tls_ca_file,omitempty"`
	EtcdTLSCertFile string `json:"mc_etcd_tls_cert_file,omitempty"`
	EtcdTLSKeyFile  string `json:"mc_etcd_tls_key_file,omitempty"`
}

// TLSFiles returns the pool's TLS files (tlsconfig.Load them); the zero
// Files means plaintext.
func (c Config) TLSFiles() tlsconfig.Files {
	return tlsconfig.Files{CA: c.TLSCAFile, Cert: c.TLSCertFile, Key: c.TLSKeyFile, ServerName: c.TLSServerName}
}

// EtcdTLSFiles returns etcd's TLS files (tlsconfig.LoadClient them).
func (c Config) EtcdTLSFiles() tlsconfig.Files {
	return tlsconfig.Files{CA: c.EtcdTLSCAFile, Cert: c.EtcdTLSCertFile, Key: c.EtcdTLSKeyFile}
}

// MarshalJSON writes c with the upstream keys, transfer_timeout in
// seconds, so that the file loads back under c.Integration's rules.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config // no methods: avoids recursion
	return json.Marshal(struct {
		plain
		TransferTimeout float64 `json:"transfer_timeout,omitempty"`
	}{plain(c), c.TransferTimeout.Seconds()})
}

// Defaults returns the values integration in applies to keys its primary
// source leaves out: for Generic the MOONCAKE_* environment form (its file
// form requires local_hostname, metadata_server and master_server_address
// instead of defaulting them), for VLLM the MOONCAKE_CONFIG_PATH file, for
// SGLang every form, for LMCache the extra_config form.
func Defaults(in Integration) Config {
	c := Config{Integration: in, TenantID: DefaultTenant}
	switch in {
	case Generic:
		c.LocalHostname = "localhost"
		c.MetadataServer = DefaultMetadataServer
		c.GlobalSegmentSize = DefaultStoreSegmentSize
		c.LocalBufferSize = DefaultStoreBufferSize
		c.Protocol = "tcp"
	case VLLM:
		c.Protocol = "rdma"
		c.Mode = ModeEmbedded
		c.GlobalSegmentSize = DefaultEngineSize
		c.LocalBufferSize = DefaultEngineSize
	case SGLang:
		c.LocalHostname = "localhost"
		c.MetadataServer = DefaultMetadataServer
		c.GlobalSegmentSize = DefaultEngineSize
		c.LocalBufferSize = DefaultSGLangBufferSize
		c.Protocol = "rdma"
		c.MasterMetricsPort = 9003
	case LMCache:
		c.GlobalSegmentSize = DefaultStoreSegmentSize
		c.LocalBufferSize = DefaultStoreBufferSize
		c.Protocol = "tcp"
		c.TransferTimeout = time.Second
		c.TenantID = ""
	}
	return c
}

// Validate checks c and returns an error wrapping ErrInvalid that lists
// every problem found, or nil. Common rules: Protocol is one of Protocols;
// sizes and TransferTimeout are not negative; MetadataServer, TenantID
// (except for LMCache, which has none) and, except for vLLM (whose adapter
// substitutes the rank's IP), LocalHostname are not empty; the master
// address is set unless SGLang runs standalone_storage, which needs
// ClientServerAddress instead. VLLM adds the connector's own checks: Mode
// is embedded or standalone-store, LocalBufferSize > 0, embedded needs
// GlobalSegmentSize > 0 and standalone-store needs 0. SGLang adds a
// port range for MasterMetricsPort and a well-formed device map. The TLS
// files must come as whole sets (they are read only when the client
// starts, by core/tlsconfig, which names a missing or bad file). Every
// string is valid UTF-8 (the environment and remote_url can carry other
// bytes; a JSON file, and so upstream's loaders, cannot).
func (c Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	if !slices.Contains(Protocols, c.Protocol) {
		add("protocol %q is not one of %s", c.Protocol, strings.Join(Protocols, ", "))
	}
	if c.GlobalSegmentSize < 0 {
		add("global_segment_size %d is negative", c.GlobalSegmentSize)
	}
	if c.LocalBufferSize < 0 {
		add("local_buffer_size %d is negative", c.LocalBufferSize)
	}
	if c.TransferTimeout < 0 {
		add("transfer_timeout %v is negative", c.TransferTimeout)
	}
	if c.Integration != VLLM && strings.TrimSpace(c.LocalHostname) == "" {
		add("local_hostname is empty (set it to this node's address as peers reach it)")
	}
	if c.Integration == SGLang && c.StandaloneStorage {
		if strings.TrimSpace(c.ClientServerAddress) == "" {
			add("standalone_storage needs client_server_address (MOONCAKE_CLIENT)")
		}
	} else {
		if strings.TrimSpace(c.MasterServerAddress) == "" {
			add("master_server_address is empty (want the master's host:port, usually port 50051)")
		}
		if strings.TrimSpace(c.MetadataServer) == "" {
			add("metadata_server is empty (want %q or a metadata URL)", DefaultMetadataServer)
		}
	}
	if c.Integration != LMCache && c.TenantID == "" {
		add("tenant_id is empty (the default tenant is %q)", DefaultTenant)
	}
	if f := c.TLSFiles(); f.Enabled() && (f.CA == "" || f.Cert == "" || f.Key == "") {
		add("%s, %s and %s go together (mutual TLS needs all three), got %q, %q, %q", KeyTLSCA, KeyTLSCert, KeyTLSKey, f.CA, f.Cert, f.Key)
	} else if !f.Enabled() && f.ServerName != "" {
		add("%s %q needs %s, %s and %s", KeyTLSServerName, f.ServerName, KeyTLSCA, KeyTLSCert, KeyTLSKey)
	}
	if f := c.EtcdTLSFiles(); f.Enabled() && (f.CA == "" || (f.Cert == "") != (f.Key == "")) {
		add("%s is required with %s and %s, which go together, got %q, %q, %q", KeyEtcdTLSCA, KeyEtcdTLSCert, KeyEtcdTLSKey, f.CA, f.Cert, f.Key)
	}

	switch c.Integration {
	case VLLM:
		switch c.Mode {
		case ModeEmbedded:
			if c.GlobalSegmentSize == 0 {
				add("mode %q needs global_segment_size > 0", c.Mode)
			}
		case ModeStandaloneStore:
			if c.GlobalSegmentSize != 0 {
				add("mode %q needs global_segment_size 0 (the external mooncake_client owns the pool)", c.Mode)
			}
		default:
			add("mode %q is not %q or %q", c.Mode, ModeEmbedded, ModeStandaloneStore)
		}
		if c.LocalBufferSize == 0 {
			add("local_buffer_size must be > 0 for vLLM")
		}
	case SGLang:
		if c.MasterMetricsPort < 1 || c.MasterMetricsPort > 65535 {
			add("master_metrics_port %d is not a TCP port", c.MasterMetricsPort)
		}
		if _, err := c.deviceMap(); err != nil {
			add("%v", err)
		}
	}
	// The environment and remote_url can carry any bytes; a JSON file,
	// and so upstream's Python loaders, only UTF-8.
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && !utf8.ValidString(f.String()) {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			add("%s %q is not valid UTF-8", name, f.String())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(bad, "; "))
	}
	return nil
}

// DeviceForRank returns the RDMA device list for tensor-parallel rank in
// SGLang's per-rank form, where device_name is a JSON object such as
// {"0": "mlx5_0", "1": "mlx5_1"}: the rank's entry, or "" (auto-detect) when
// the rank is missing or the object does not parse - SGLang's behaviour.
// A plain device list is returned unchanged for every rank.
func (c Config) DeviceForRank(rank int) string {
	m, err := c.deviceMap()
	if err != nil {
		return ""
	}
	if m == nil {
		return c.DeviceName
	}
	return m[strconv.Itoa(rank)]
}

// deviceMap parses the per-rank form of DeviceName; nil, nil when
// DeviceName is a plain list.
func (c Config) deviceMap() (map[string]string, error) {
	if !strings.HasPrefix(strings.TrimSpace(c.DeviceName), "{") {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(c.DeviceName), &m); err != nil {
		return nil, fmt.Errorf("device_name %q looks like a rank-to-device JSON object but does not parse: %v", c.DeviceName, err)
	}
	if m == nil {
		m = map[string]string{}
	}
	return m, nil
}
