package vllm

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
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Errors returned by this package; match with errors.Is.
var (
	// ErrBadConfig is matched by every settings error (mc_vllm_create's
	// MC_VLLM_ERR_BAD_CONFIG).
	ErrBadConfig = errors.New("vllm: bad config")
	// ErrWrongRole is returned by a scheduler-only call on a worker
	// connector, or the reverse (MC_VLLM_ERR_WRONG_ROLE).
	ErrWrongRole = errors.New("vllm: wrong role")
	// ErrNotRegistered is returned by worker calls that move bytes before
	// RegisterKVCaches (MC_VLLM_ERR_NOT_REGISTERED).
	ErrNotRegistered = errors.New("vllm: KV caches not registered")
	// ErrBadInput is returned for engine input that breaks the contract
	// (a block id out of range, block 0, malformed metadata).
	ErrBadInput = errors.New("vllm: bad input")
)

// Role is vLLM's KVConnectorRole: which half of the connector an instance
// is.
type Role int

// The roles, with vLLM's enum values.
const (
	RoleScheduler Role = 0
	RoleWorker    Role = 1
)

func (r Role) String() string {
	switch r {
	case RoleScheduler:
		return "scheduler"
	case RoleWorker:
		return "worker"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Modes of the connector (kv_connector_extra_config "mc_mode").
const (
	// ModeStore shares KV blocks through the pool (upstream
	// MooncakeStoreConnector): kv_both saves and loads, kv_producer only
	// saves, kv_consumer only loads.
	ModeStore = "store"
	// ModePD is prefill/decode disaggregation (upstream
	// MooncakeConnector): the prefill instance (kv_producer) writes a
	// request's KV straight into the decode instance's (kv_consumer)
	// blocks.
	ModePD = "pd"
)

// KV roles (vLLM's kv_role).
const (
	KVProducer = "kv_producer"
	KVConsumer = "kv_consumer"
	KVBoth     = "kv_both"
)

// Settings are what the Python shim knows of the engine, handed to
// mc_vllm_create as one JSON object (the keys are the json tags), plus
// the connector's kv_connector_extra_config. Sizes are bytes, block sizes
// tokens.
type Settings struct {
	// CUDA is not configuration: the worker sets it from
	// SetDeviceRuntime before it starts the P/D half (device regions).
	CUDA transfer.DeviceRuntime `json:"-"`
	// KVRole is kv_transfer_config.kv_role: kv_producer, kv_consumer or
	// kv_both; required.
	KVRole string `json:"kv_role"`
	// EngineID is kv_transfer_config.engine_id (this instance's id in P/D
	// bookkeeping); required in pd mode.
	EngineID string `json:"engine_id"`
	// Model is the served model name or path; its last path component
	// names the keys (as upstream). Required.
	Model string `json:"model"`
	// KVDType is the KV cache element type as vLLM names it
	// ("bfloat16", "fp8_e4m3", ...); required.
	KVDType string `json:"kv_dtype"`
	// Layout names the KV cache byte layout of a block ("vllm-fa-nhd",
	// "vllm-flashinfer-nhd", "vllm-mla"...), derived by the shim from the
	// attention backend; blocks are only shared between instances of the
	// same layout. Required.
	Layout string `json:"layout"`
	// BlockSize is cache_config.block_size in tokens; > 0.
	BlockSize int `json:"block_size"`
	// TPRank, TPSize, PPRank and PPSize place this worker; the scheduler
	// passes rank 0. TPSize and PPSize default to 1.
	TPRank int `json:"tp_rank"`
	TPSize int `json:"tp_size"`
	PPRank int `json:"pp_rank"`
	PPSize int `json:"pp_size"`
	// UseMLA marks KV identical on every TP rank (MLA): all ranks share
	// one key per block and only rank 0 saves.
	UseMLA bool `json:"use_mla"`
	// Host is this process's IP as peers see it (vLLM's
	// get_ip()); default 127.0.0.1.
	Host string `json:"host"`
	// NumLayers is the model's attention layer count on this PP stage;
	// required with mc_layerwise.
	NumLayers int `json:"num_layers"`
	// Extra is kv_transfer_config.kv_connector_extra_config.
	Extra json.RawMessage `json:"kv_connector_extra_config"`

	// From Extra (see ParseSettings).
	Mode      string `json:"-"`
	LoadAsync bool   `json:"-"`
	// SaveAsync (mc_save_async, default true): wait_for_save starts the
	// step's saves and returns; vLLM holds a finished request's blocks
	// until get_finished reports its saves done. False makes
	// wait_for_save return only once the step's saves are in the pool
	// (bounded by mc_save_timeout_ms; past it the saves go on in the
	// background and finish as with true): the forward's step ends that
	// much later, but no engine thread runs beside the copies, and a
	// request's KV is in the pool when its last step returns. Ours;
	// upstream's connectors have no such key.
	SaveAsync       bool          `json:"-"`
	CachePrefix     string        `json:"-"`
	LookupTimeout   time.Duration `json:"-"`
	LoadTimeout     time.Duration `json:"-"`
	SaveTimeout     time.Duration `json:"-"`
	BootstrapPort   int           `json:"-"`
	BootstrapAddr   string        `json:"-"`
	AbortTimeout    time.Duration `json:"-"`
	SaveDecodeCache bool          `json:"-"`
	Layerwise       bool          `json:"-"`
	// PoolRequired (mc_pool_required, default true): a store-mode
	// connector whose pool cannot be reached within ConnectTimeout fails
	// its construction, so the engine exits with the error; false logs it
	// and serves without the cache (every lookup a miss, loads reported
	// failed, saves dropped) for the process's lifetime.
	PoolRequired bool `json:"-"`
	// ConnectTimeout (mc_connect_timeout_ms, default 10 s) bounds opening
	// the pool: metadata server, master and segment mount.
	ConnectTimeout time.Duration `json:"-"`
	// IdleWait (mc_idle_wait_ms, default 5 ms; 0 turns it off) bounds how
	// long a worker step that computes nothing waits in get_finished for
	// one of its pool loads or saves to complete. vLLM steps its engine
	// loop without pause while finished requests' blocks are held for
	// their saves (or requests wait for async loads); the wait turns that
	// spin into sleep, so the transfers get the CPU. A request arriving
	// meanwhile waits at most this long more. Ours; upstream has none.
	IdleWait time.Duration `json:"-"`
}

// extraKeys are the kv_connector_extra_config keys the connector reads
// itself; pool keys go to connectors/config.
type extraKeys struct {
	Mode            *string  `json:"mc_mode"`
	LoadAsync       *bool    `json:"load_async"`
	SaveAsync       *bool    `json:"mc_save_async"`
	CachePrefix     *string  `json:"cache_prefix"`
	LookupTimeoutMS *float64 `json:"mc_lookup_timeout_ms"`
	LoadTimeoutMS   *float64 `json:"mc_load_timeout_ms"`
	SaveTimeoutMS   *float64 `json:"mc_save_timeout_ms"`
	BootstrapAddr   *string  `json:"bootstrap_server_address"`
	SaveDecodeCache *bool    `json:"save_decode_cache"`
	Layerwise       *bool    `json:"mc_layerwise"`
	PoolRequired    *bool    `json:"mc_pool_required"`
	ConnectTimeout  *float64 `json:"mc_connect_timeout_ms"`
	IdleWaitMS      *float64 `json:"mc_idle_wait_ms"`
}

// DefaultIdleWait is mc_idle_wait_ms's default: 5 ms.
const DefaultIdleWait = 5 * time.Millisecond

// Environment variables read, with upstream's names and defaults.
const (
	// EnvBootstrapPort is the producer's bootstrap HTTP port (P/D mode);
	// default 8998.
	EnvBootstrapPort = "VLLM_MOONCAKE_BOOTSTRAP_PORT"
	// EnvAbortTimeout is the seconds after which a producer frees a
	// request's KV that no consumer fetched; default 480.
	EnvAbortTimeout = "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"
)

// ParseSettings decodes mc_vllm_create's JSON and validates it. env is the
// process environment (nil: os.Environ). Errors match ErrBadConfig and
// name the key.
func ParseSettings(data []byte, env map[string]string) (Settings, error) {
	if env == nil {
		env = config.FromOS()
	}
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: settings JSON: %v", ErrBadConfig, err)
	}
	if s.TPSize == 0 {
		s.TPSize = 1
	}
	if s.PPSize == 0 {
		s.PPSize = 1
	}
	if s.Host == "" {
		s.Host = "127.0.0.1"
	}
	s.Mode, s.LoadAsync, s.SaveAsync = ModeStore, true, true
	s.LookupTimeout, s.LoadTimeout, s.SaveTimeout = 5*time.Second, 30*time.Second, 30*time.Second
	s.BootstrapPort, s.AbortTimeout = 8998, 480*time.Second
	s.PoolRequired, s.ConnectTimeout = true, 10*time.Second
	s.IdleWait = DefaultIdleWait
	var ex extraKeys
	if len(bytes.TrimSpace(s.Extra)) > 0 && !bytes.Equal(bytes.TrimSpace(s.Extra), []byte("null")) {
		if err := json.Unmarshal(s.Extra, &ex); err != nil {
			return s, fmt.Errorf("%w: kv_connector_extra_config: %v", ErrBadConfig, err)
		}
	}
	if ex.Mode != nil {
		s.Mode = *ex.Mode
	}
	if ex.LoadAsync != nil {
		s.LoadAsync = *ex.LoadAsync
	}
	if ex.SaveAsync != nil {
		s.SaveAsync = *ex.SaveAsync
	}
	if ex.CachePrefix != nil {
		s.CachePrefix = *ex.CachePrefix
	}
	if ex.SaveDecodeCache != nil {
		s.SaveDecodeCache = *ex.SaveDecodeCache
	}
	if ex.Layerwise != nil {
		s.Layerwise = *ex.Layerwise
	}
	if ex.PoolRequired != nil {
		s.PoolRequired = *ex.PoolRequired
	}
	for _, d := range []struct {
		key string
		v   *float64
		out *time.Duration
	}{{"mc_lookup_timeout_ms", ex.LookupTimeoutMS, &s.LookupTimeout}, {"mc_load_timeout_ms", ex.LoadTimeoutMS, &s.LoadTimeout}, {"mc_save_timeout_ms", ex.SaveTimeoutMS, &s.SaveTimeout}, {"mc_connect_timeout_ms", ex.ConnectTimeout, &s.ConnectTimeout}} {
		if d.v == nil {
			continue
		}
		if *d.v <= 0 {
			return s, fmt.Errorf("%w: kv_connector_extra_config.%s = %v, want > 0", ErrBadConfig, d.key, *d.v)
		}
		*d.out = time.Duration(*d.v * float64(time.Millisecond))
	}
	if ex.IdleWaitMS != nil {
		if *ex.IdleWaitMS < 0 || *ex.IdleWaitMS > 1000 {
			return s, fmt.Errorf("%w: kv_connector_extra_config.mc_idle_wait_ms = %v, want 0 (off) to 1000", ErrBadConfig, *ex.IdleWaitMS)
		}
		s.IdleWait = time.Duration(*ex.IdleWaitMS * float64(time.Millisecond))
	}
	if ex.BootstrapAddr != nil {
		s.BootstrapAddr = *ex.BootstrapAddr
	}
	if v, ok := env[EnvBootstrapPort]; ok && v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return s, fmt.Errorf("%w: %s=%q is not a port", ErrBadConfig, EnvBootstrapPort, v)
		}
		s.BootstrapPort = p
	}
	if v, ok := env[EnvAbortTimeout]; ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return s, fmt.Errorf("%w: %s=%q is not a positive number of seconds", ErrBadConfig, EnvAbortTimeout, v)
		}
		s.AbortTimeout = time.Duration(f * float64(time.Second))
	}
	return s, s.validate()
}

func (s Settings) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case s.KVRole != KVProducer && s.KVRole != KVConsumer && s.KVRole != KVBoth:
		return bad("kv_role %q, want kv_producer, kv_consumer or kv_both", s.KVRole)
	case s.Mode != ModeStore && s.Mode != ModePD:
		return bad("kv_connector_extra_config.mc_mode %q, want %q or %q", s.Mode, ModeStore, ModePD)
	case s.Model == "":
		return bad("model is empty")
	case s.KVDType == "":
		return bad("kv_dtype is empty")
	case s.Layout == "":
		return bad("layout is empty")
	case s.BlockSize <= 0:
		return bad("block_size %d, want > 0", s.BlockSize)
	case s.TPSize < 1 || s.TPRank < 0 || s.TPRank >= s.TPSize:
		return bad("tp_rank %d of tp_size %d", s.TPRank, s.TPSize)
	case s.PPSize < 1 || s.PPRank < 0 || s.PPRank >= s.PPSize:
		return bad("pp_rank %d of pp_size %d", s.PPRank, s.PPSize)
	case s.Layerwise && s.Mode != ModeStore:
		return bad("kv_connector_extra_config.mc_layerwise is for mc_mode %q only", ModeStore)
	case s.Layerwise && s.NumLayers <= 0:
		return bad("num_layers %d: kv_connector_extra_config.mc_layerwise needs the model's layer count", s.NumLayers)
	case s.Mode == ModePD && s.EngineID == "":
		return bad("engine_id is empty (pd mode)")
	case s.Mode == ModePD && s.PPSize > 1:
		return fmt.Errorf("%w: unsupported: pd mode with pipeline parallelism (pp_size %d), as upstream's MooncakeConnector", ErrBadConfig, s.PPSize)
	}
	return nil
}

// modelName is the last path component of the model, as upstream's keys.
func (s Settings) modelName() string {
	m := strings.TrimRight(s.Model, "/")
	if i := strings.LastIndexByte(m, '/'); i >= 0 && i < len(m)-1 {
		m = m[i+1:]
	}
	return m
}

// Namespace is the key namespace of TP shard tp and PP stage pp: model,
// KV dtype, layout, shard and block size, with cache_prefix as the tenant
// (upstream's key scheme of section 8.2 of the spec, in our key syntax).
func (s Settings) Namespace(tp, pp int) kvpool.Namespace {
	return kvpool.Namespace{
		Model: s.modelName(), DType: s.KVDType, Layout: s.Layout,
		TPRank: tp, TPSize: s.TPSize, PPRank: pp, PPSize: s.PPSize,
		SharedMLA: s.UseMLA, BlockTokens: s.BlockSize, Tenant: s.CachePrefix,
	}
}

// shards are the namespaces whose objects must all exist for a block to
// be a hit: one per TP shard and PP stage (one per stage with MLA).
func (s Settings) shards() []kvpool.Namespace {
	tps := s.TPSize
	if s.UseMLA {
		tps = 1
	}
	var out []kvpool.Namespace
	for pp := range s.PPSize {
		for tp := range tps {
			out = append(out, s.Namespace(tp, pp))
		}
	}
	return out
}

// PoolConfig loads the pool settings: from the JSON file named by
// MOONCAKE_CONFIG_PATH (upstream MooncakeStoreConnector), with
// kv_connector_extra_config's preferred_segment; without that variable,
// from the pool keys in kv_connector_extra_config itself (metadata_server,
// master_server_address, global_segment_size, ...; our extension).
// A protocol no source sets is poolclient.DefaultProtocol (tcp), not
// upstream's rdma default. Errors match config's errors (ErrNoSource when
// neither names a master).
func (s Settings) PoolConfig(env map[string]string) (config.Config, error) {
	cfg, _, err := s.poolConfig(env)
	return cfg, err
}

// extraOrigin names kv_connector_extra_config as a config source when its
// pool keys stand in for the file; config.Load calls it "extra" when it
// reads it beside the file.
const extraOrigin = "kv_connector_extra_config"

func fromExtra(origin string) bool { return origin == extraOrigin || origin == "extra" }

// poolConfig is PoolConfig plus the loader's remarks an operator should
// see in the engine's log, one line each: keys of the MOONCAKE_CONFIG_PATH
// file that no integration reads (a misspelled key), keys read by other
// integrations only, and the loader's warnings. Unknown keys of
// kv_connector_extra_config are left to the Python shim, which knows the
// connector's own keys.
func (s Settings) poolConfig(env map[string]string) (config.Config, []string, error) {
	if env == nil {
		env = config.FromOS()
	}
	opts := config.LoadOptions{Integration: config.VLLM, Env: env, Extra: s.Extra}
	if _, ok := env[config.EnvConfigPath]; !ok {
		if len(bytes.TrimSpace(s.Extra)) == 0 {
			return config.Config{}, nil, fmt.Errorf("%w: no %s and no master_server_address in kv_connector_extra_config", config.ErrNoSource, config.EnvConfigPath)
		}
		extra := s.Extra
		opts.File = extraOrigin
		opts.ReadFile = func(string) ([]byte, error) { return extra, nil }
	}
	cfg, rep, err := config.Load(opts)
	if err != nil {
		return cfg, nil, err
	}
	if rep.Sources["protocol"].Kind == config.FromDefault {
		// Upstream's vLLM default is rdma; an unset protocol means what
		// this build's store client speaks, not an unsupported error.
		cfg.Protocol = poolclient.DefaultProtocol
	}
	return cfg, rep.Notes(fromExtra), nil
}
