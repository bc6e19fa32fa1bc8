package sglang

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/kvpool"
)

// Errors returned by this package; match with errors.Is.
var (
	// ErrBadConfig is matched by every settings error (mc_sglang_create's
	// MC_SGLANG_ERR_BAD_CONFIG).
	ErrBadConfig = errors.New("sglang: bad config")
	// ErrNoHostPool is returned by the data calls before RegisterHostPool
	// (MC_SGLANG_ERR_NO_HOST_POOL).
	ErrNoHostPool = errors.New("sglang: no host pool registered")
	// ErrBadLayout is returned for a host pool this backend cannot serve
	// (a layout other than layer_first, page_first, page_first_direct) and
	// for buffer lists that do not fit the registered pool's shape
	// (MC_SGLANG_ERR_BAD_LAYOUT).
	ErrBadLayout = errors.New("sglang: bad layout")
)

// Settings are what the Python backend knows of SGLang when it is built:
// the fields of HiCacheStorageConfig (sglang/srt/mem_cache/
// hicache_storage.py, 0.5.23) and the storage extra config, handed to
// mc_sglang_create as one JSON object (the keys are the json tags).
type Settings struct {
	// TPRank and TPSize are the attention tensor-parallel rank and size
	// (HiCacheStorageConfig.tp_rank/tp_size); TPSize defaults to 1.
	TPRank int `json:"tp_rank"`
	TPSize int `json:"tp_size"`
	// PPRank and PPSize are the pipeline stage and stage count.
	PPRank int `json:"pp_rank"`
	PPSize int `json:"pp_size"`
	// CPRank and CPSize are the attention context-parallel rank and size
	// (attn_cp_rank/attn_cp_size): each CP rank holds its own slice of a
	// page, so it is part of the key.
	CPRank int `json:"attn_cp_rank"`
	CPSize int `json:"attn_cp_size"`
	// DCPSize is the decode context-parallel size; only 1 is supported.
	DCPSize int `json:"dcp_size"`
	// MLA is is_mla_model: KV identical on every TP rank, one object per
	// page under a rank-free key, written by TP rank 0 only.
	MLA bool `json:"is_mla_model"`
	// SplitHeads is should_split_heads (page_head layout with
	// heterogeneous TP); unsupported.
	SplitHeads bool `json:"should_split_heads"`
	// Model is model_name (--served-model-name, may contain '/'); required.
	Model string `json:"model_name"`
	// Host is this process's address as pool peers see it; default
	// 127.0.0.1 (local_hostname in the pool settings wins).
	Host string `json:"host"`
	// Extra is storage_config.extra_config: the user's
	// --hicache-storage-backend-extra-config after SGLang removed its
	// prefetch keys (backend_name, module_path, class_name, interface_v1
	// stay in it).
	Extra json.RawMessage `json:"extra_config"`

	// From Extra (see ParseSettings).
	// Tenant (mc_tenant; else extra_backend_tag) keeps tenants or
	// deployments sharing a pool apart: it is part of every key.
	Tenant string `json:"-"`
	// GetTimeoutBase and GetTimeoutPerKiToken bound one batch_exists or
	// read call to base + perKi × tokens/1024 (mc_get_timeout_base_ms,
	// default 1000; mc_get_timeout_per_ki_token_ms, default 250: SGLang's
	// own prefetch timeout defaults), after which the pages not yet read
	// are misses.
	GetTimeoutBase       time.Duration `json:"-"`
	GetTimeoutPerKiToken time.Duration `json:"-"`
	// SetTimeout bounds one write call (mc_set_timeout_ms, default 30 s);
	// the pages not written in time are reported failed.
	SetTimeout time.Duration `json:"-"`
	// ConnectTimeout bounds opening the pool (mc_connect_timeout_ms,
	// default 10 s).
	ConnectTimeout time.Duration `json:"-"`
}

// extraKeys are the extra-config keys the backend reads itself; the pool
// keys go to connectors/config.
type extraKeys struct {
	Tenant          *string  `json:"mc_tenant"`
	GetBaseMS       *float64 `json:"mc_get_timeout_base_ms"`
	GetPerKiMS      *float64 `json:"mc_get_timeout_per_ki_token_ms"`
	SetMS           *float64 `json:"mc_set_timeout_ms"`
	ConnectMS       *float64 `json:"mc_connect_timeout_ms"`
	ExtraBackendTag *string  `json:"extra_backend_tag"`
}

// ParseSettings decodes mc_sglang_create's JSON and validates it. Errors
// match ErrBadConfig and name the key; the unsupported modes (decode
// context parallelism, head splitting) say "unsupported:".
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%w: settings JSON: %v", ErrBadConfig, err)
	}
	if s.TPSize == 0 {
		s.TPSize = 1
	}
	if s.PPSize == 0 {
		s.PPSize = 1
	}
	if s.CPSize == 0 {
		s.CPSize = 1
	}
	if s.DCPSize == 0 {
		s.DCPSize = 1
	}
	if s.Host == "" {
		s.Host = "127.0.0.1"
	}
	s.GetTimeoutBase, s.GetTimeoutPerKiToken = time.Second, 250*time.Millisecond
	s.SetTimeout, s.ConnectTimeout = 30*time.Second, 10*time.Second
	var ex extraKeys
	if t := bytes.TrimSpace(s.Extra); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(s.Extra, &ex); err != nil {
			return s, fmt.Errorf("%w: extra_config: %v", ErrBadConfig, err)
		}
	}
	switch {
	case ex.Tenant != nil:
		s.Tenant = *ex.Tenant
	case ex.ExtraBackendTag != nil:
		s.Tenant = *ex.ExtraBackendTag
	}
	for _, d := range []struct {
		key  string
		v    *float64
		out  *time.Duration
		zero bool
	}{
		{"mc_get_timeout_base_ms", ex.GetBaseMS, &s.GetTimeoutBase, false},
		{"mc_get_timeout_per_ki_token_ms", ex.GetPerKiMS, &s.GetTimeoutPerKiToken, true},
		{"mc_set_timeout_ms", ex.SetMS, &s.SetTimeout, false},
		{"mc_connect_timeout_ms", ex.ConnectMS, &s.ConnectTimeout, false},
	} {
		if d.v == nil {
			continue
		}
		if *d.v < 0 || (*d.v == 0 && !d.zero) {
			return s, fmt.Errorf("%w: extra_config.%s = %v, want > 0", ErrBadConfig, d.key, *d.v)
		}
		*d.out = time.Duration(*d.v * float64(time.Millisecond))
	}
	return s, s.validate()
}

func (s Settings) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Model == "":
		return bad("model_name is empty (SGLang passes --served-model-name, else the model path)")
	case s.TPSize < 1 || s.TPRank < 0 || s.TPRank >= s.TPSize:
		return bad("tp_rank %d of tp_size %d", s.TPRank, s.TPSize)
	case s.PPSize < 1 || s.PPRank < 0 || s.PPRank >= s.PPSize:
		return bad("pp_rank %d of pp_size %d", s.PPRank, s.PPSize)
	case s.CPSize < 1 || s.CPRank < 0 || s.CPRank >= s.CPSize:
		return bad("attn_cp_rank %d of attn_cp_size %d", s.CPRank, s.CPSize)
	case s.DCPSize != 1:
		return bad("unsupported: dcp_size %d (decode context parallelism) in the mooncake_go backend", s.DCPSize)
	case s.SplitHeads:
		return bad("unsupported: should_split_heads (page_head layout with tp_lcm_size) in the mooncake_go backend")
	}
	return nil
}

// Writer reports whether this rank writes pages: every rank for MHA, TP
// rank 0 only for MLA (SGLang's HiCacheStorageConfig.is_storage_writer
// with dcp_size 1).
func (s Settings) Writer() bool { return !s.MLA || s.TPRank == 0 }

// Geometry is what the Python backend tells of the host pool in
// register_mem_pool_host (MHATokenToKVPoolHost / MLATokenToKVPoolHost).
type Geometry struct {
	// Layout is the pool's layout (--hicache-mem-layout): layer_first,
	// page_first or page_first_direct.
	Layout string `json:"layout"`
	// DType is the KV element type without the "torch." prefix
	// ("bfloat16", "float8_e4m3fn", ...); required.
	DType string `json:"dtype"`
	// PageSize is the pool's page size in tokens; > 0.
	PageSize int `json:"page_size"`
	// Layers is the pool's layer count (layer_num); > 0.
	Layers int `json:"layer_num"`
	// PageBytes is the bytes of one page of this rank: K and V of every
	// layer for MHA (get_size_per_token × page_size), the latent rows of
	// every layer for MLA; > 0. A page read back must have exactly this
	// size.
	PageBytes int64 `json:"page_bytes"`
}

// layoutName is the kvpool.Namespace Layout of pages of geometry g: the
// byte order of one page object, so layouts whose objects hold the same
// bytes share pages (layer_first and page_first_direct both give
// [layer][token][...] per object; page_first gives [token][layer][...]).
func (s Settings) layoutName(g Geometry) (string, error) {
	var order string
	switch kvpool.SGLangLayout(g.Layout) {
	case kvpool.SGLangLayerFirst, kvpool.SGLangPageFirstDirect:
		order = "lt"
	case kvpool.SGLangPageFirst:
		order = "tl"
	default:
		return "", fmt.Errorf("%w: unsupported: host pool layout %q (the mooncake_go backend serves layer_first, page_first and page_first_direct)", ErrBadLayout, g.Layout)
	}
	kind := "mha"
	if s.MLA {
		kind = "mla"
	}
	name := "sglang-" + kind + "-" + order + "-l" + strconv.Itoa(g.Layers)
	if s.CPSize > 1 {
		name += "-cp" + strconv.Itoa(s.CPRank) + "of" + strconv.Itoa(s.CPSize)
	}
	return name, nil
}

// Namespace is the key namespace of this rank's pages for geometry g:
// model, KV dtype, object byte order and layer count, TP shard (or "mla"),
// PP stage, attention-CP rank, page size and tenant. Errors: ErrBadLayout,
// ErrBadConfig for an invalid geometry.
func (s Settings) Namespace(g Geometry) (kvpool.Namespace, error) {
	if g.DType == "" || g.PageSize <= 0 || g.Layers <= 0 || g.PageBytes <= 0 {
		return kvpool.Namespace{}, fmt.Errorf("%w: host pool geometry %+v: dtype, page_size, layer_num and page_bytes are required", ErrBadConfig, g)
	}
	layout, err := s.layoutName(g)
	if err != nil {
		return kvpool.Namespace{}, err
	}
	n := kvpool.Namespace{
		Model: s.Model, DType: strings.TrimPrefix(g.DType, "torch."), Layout: layout,
		TPRank: s.TPRank, TPSize: s.TPSize, PPRank: s.PPRank, PPSize: s.PPSize,
		SharedMLA: s.MLA, BlockTokens: g.PageSize, Tenant: s.Tenant,
	}
	if err := n.Validate(); err != nil {
		return n, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return n, nil
}

// PoolConfig loads the pool settings with SGLang's rules (connectors/config
// Integration SGLang, as SGLang's own Mooncake backend): the extra config
// when it names master_server_address, else the JSON file named by
// SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, else the MOONCAKE_* environment;
// global_segment_size is for the whole instance and each rank mounts
// global_segment_size / (tp_size × pp_size), as SGLang's backend does. A
// protocol no source sets is tcp (poolclient.DefaultProtocol), not
// SGLang's rdma default. notes are the loader's remarks for the log.
// Errors: config's (config.ErrNoSource when nothing names a master).
func (s Settings) PoolConfig(env map[string]string) (cfg config.Config, notes []string, err error) {
	if env == nil {
		env = config.FromOS()
	}
	opts := config.LoadOptions{Integration: config.SGLang, Env: env}
	if t := bytes.TrimSpace(s.Extra); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		opts.Extra = s.Extra
	}
	cfg, rep, err := config.Load(opts)
	if err != nil {
		return cfg, nil, err
	}
	if rep.Sources["protocol"].Kind == config.FromDefault {
		cfg.Protocol = poolclient.DefaultProtocol
	}
	cfg.GlobalSegmentSize /= int64(s.TPSize * s.PPSize)
	// The extra config carries SGLang's and our own keys beside the pool's.
	return cfg, rep.Notes(func(origin string) bool { return origin == "extra" }), nil
}
