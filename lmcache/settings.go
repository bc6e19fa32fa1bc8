package lmcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/connectors/config"
)

// Errors returned by this package; match with errors.Is.
var (
	// ErrBadURL: the connector URL is not plugin://<name>
	// (MC_LMCACHE_ERR_BAD_URL).
	ErrBadURL = errors.New("lmcache: bad connector URL")
	// ErrBadConfig: the settings JSON does not parse, or a key of the
	// plugin's extra config is unknown, missing or has a bad value; the
	// error names the key (MC_LMCACHE_ERR_BAD_CONFIG).
	ErrBadConfig = errors.New("lmcache: bad config")
	// ErrClosed: a call on a connector after Close.
	ErrClosed = errors.New("lmcache: connector closed")
	// ErrNotRegistered: UnregisterBuffer of an address RegisterBuffer did
	// not give (MC_ERR_INVALID_ARGUMENT).
	ErrNotRegistered = errors.New("lmcache: buffer not registered")
)

// Roles the shim passes in Settings.Role: LMCache's worker processes
// allocate memory objects and move bytes; its scheduler (vLLM's
// scheduler process, whose local CPU backend is a stub) only looks keys
// up, so its store client mounts no segment.
const (
	RoleWorker    = "worker"
	RoleScheduler = "scheduler"
)

// Defaults of the plugin's own keys.
const (
	DefaultLookupTimeout  = 5 * time.Second  // lookup_timeout_ms
	DefaultTimeout        = 30 * time.Second // timeout_ms
	DefaultConnectTimeout = 30 * time.Second // connect_timeout_ms
	DefaultHost           = "127.0.0.1"      // local_hostname when the scope and the file leave it out
)

// Keys of the plugin's scope (remote_storage_plugin.<name>.KEY) that are
// the adapter's own (not store client settings). The shim reads the
// geometry keys (kv_shape, kv_dtype, use_mla, chunk_size): the chunk
// geometry for a connector that LMCache built without metadata.
const (
	KeyKeyPrefix      = "key_prefix"
	KeyReplicaNum     = "replica_num"
	KeyLookupTimeout  = "lookup_timeout_ms"
	KeyTimeout        = "timeout_ms"
	KeyConnectTimeout = "connect_timeout_ms"
)

// shimKeys are scope keys LMCache or the Python shim consume; Go accepts
// them without reading them.
var shimKeys = []string{"module_path", "class_name", "kv_shape", "kv_dtype", "use_mla", "chunk_size"}

// ownKeys are the adapter keys ParseSettings reads.
var ownKeys = []string{KeyKeyPrefix, KeyReplicaNum, KeyLookupTimeout, KeyTimeout, KeyConnectTimeout}

// Settings are one connector's configuration: what the shim passes to
// mc_lmcache_create (the plugin name in the URL, the role, this host,
// LMCache's whole extra_config) resolved against the environment.
type Settings struct {
	// Plugin is the plugin instance name of remote_storage_plugins
	// ("mooncake_go", "mooncake_go.a"): the scope of its keys is
	// "remote_storage_plugin.<Plugin>.".
	Plugin string
	// Role is RoleWorker or RoleScheduler.
	Role string
	// Pool is the store client's configuration: from the upstream
	// Mooncake JSON file named by MOONCAKE_CONFIG_PATH when that is set
	// (as LMCache's own Mooncake connector), else from the Mooncake keys
	// of the plugin's scope (local_hostname, metadata_server,
	// master_server_address, global_segment_size, protocol, ...), loaded
	// by connectors/config under LMCache's rules.
	Pool config.Config
	// KeyPrefix (key_prefix, default "") is put before every LMCache key
	// string to form the pool key; List strips it.
	KeyPrefix string
	// ReplicaNum (replica_num, default 1, LMCache's hard-coded value for
	// Mooncake) is the replicas each put asks for.
	ReplicaNum int
	// LookupTimeout (lookup_timeout_ms, default 5 s) bounds one exists /
	// batched_contains call.
	LookupTimeout time.Duration
	// Timeout (timeout_ms, default 30 s) bounds one put, get, remove,
	// list or ping.
	Timeout time.Duration
	// ConnectTimeout (connect_timeout_ms, default 30 s) bounds opening the
	// pool (metadata server, master, segment mount).
	ConnectTimeout time.Duration
	// Notes are remarks for the engine's log: keys the loader ignored
	// and its warnings, one line each.
	Notes []string
}

// input is mc_lmcache_create's config_json.
type input struct {
	Role        string          `json:"role"`
	Host        string          `json:"host"`
	ExtraConfig json.RawMessage `json:"extra_config"`
}

// PluginOfURL returns the plugin name of a connector URL "plugin://<name>"
// (what LMCache's RemoteBackend builds for a remote_storage_plugins
// entry). Errors match ErrBadURL.
func PluginOfURL(raw string) (string, error) {
	name, ok := strings.CutPrefix(raw, "plugin://")
	if !ok {
		return "", fmt.Errorf("%w: %q: want plugin://<name> (LMCache's URL for a remote_storage_plugins entry)", ErrBadURL, raw)
	}
	if name == "" || strings.ContainsAny(name, "/?#@: ") {
		return "", fmt.Errorf("%w: %q: the plugin name must be non-empty, without / ? # @ : or spaces", ErrBadURL, raw)
	}
	if _, err := url.Parse(raw); err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBadURL, raw, err)
	}
	return name, nil
}

// Scope is the prefix of plugin's keys in LMCache's extra_config.
func Scope(plugin string) string { return "remote_storage_plugin." + plugin + "." }

// ParseSettings resolves mc_lmcache_create's arguments: connURL is
// "plugin://<name>"; data is the JSON object {"role": "worker" |
// "scheduler", "host": this host's address (default 127.0.0.1),
// "extra_config": LMCache's extra_config}; env is the process
// environment (libc's view inside an engine).
//
// Pool settings: MOONCAKE_CONFIG_PATH set → that upstream JSON file, read
// by connectors/config under LMCache's rules (scope keys that are store
// settings are then ignored, with a note, as LMCache's Mooncake connector
// ignores extra_config); else the store keys of the plugin's scope, read
// the same way, where master_server_address (or master_server_addr) and
// metadata_server are required and local_hostname defaults to host. The
// adapter's own keys (key_prefix, replica_num, lookup_timeout_ms,
// timeout_ms, connect_timeout_ms) come from the scope in both cases.
// Keys outside the scope are LMCache's and are not looked at.
//
// Errors: ErrBadURL; ErrBadConfig naming the key (a scope key nobody
// reads - misspelled? -, a missing required key, a bad value), or the
// file and its problem.
func ParseSettings(connURL string, data []byte, env map[string]string) (Settings, error) {
	var s Settings
	plugin, err := PluginOfURL(connURL)
	if err != nil {
		return s, err
	}
	s.Plugin = plugin
	var in input
	if err := json.Unmarshal(data, &in); err != nil {
		return s, fmt.Errorf("%w: config_json: %v", ErrBadConfig, err)
	}
	switch in.Role {
	case "", RoleWorker:
		s.Role = RoleWorker
	case RoleScheduler:
		s.Role = RoleScheduler
	default:
		return s, fmt.Errorf("%w: role %q, want %q or %q", ErrBadConfig, in.Role, RoleWorker, RoleScheduler)
	}
	host := in.Host
	if host == "" {
		host = DefaultHost
	}
	var extra map[string]json.RawMessage
	if t := bytes.TrimSpace(in.ExtraConfig); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &extra); err != nil {
			return s, fmt.Errorf("%w: extra_config is not a JSON object: %v", ErrBadConfig, err)
		}
	}
	scope := Scope(plugin)
	store := map[string]json.RawMessage{} // the scope's store client keys
	own := map[string]json.RawMessage{}
	for k, v := range extra {
		short, ok := strings.CutPrefix(k, scope)
		if !ok {
			continue
		}
		switch {
		case slices.Contains(ownKeys, short):
			own[short] = v
		case slices.Contains(shimKeys, short):
		default:
			store[short] = v
		}
	}
	if err := s.own(own); err != nil {
		return s, err
	}
	s.Pool, s.Notes, err = poolConfig(scope, store, host, env)
	return s, err
}

// own reads the adapter's keys, with their defaults.
func (s *Settings) own(m map[string]json.RawMessage) error {
	s.ReplicaNum = 1
	s.LookupTimeout, s.Timeout, s.ConnectTimeout = DefaultLookupTimeout, DefaultTimeout, DefaultConnectTimeout
	scope := Scope(s.Plugin)
	if v, ok := m[KeyKeyPrefix]; ok {
		if err := json.Unmarshal(v, &s.KeyPrefix); err != nil {
			return fmt.Errorf("%w: %s%s = %s, want a string", ErrBadConfig, scope, KeyKeyPrefix, v)
		}
	}
	if v, ok := m[KeyReplicaNum]; ok {
		if err := json.Unmarshal(v, &s.ReplicaNum); err != nil || s.ReplicaNum < 1 {
			return fmt.Errorf("%w: %s%s = %s, want an integer >= 1", ErrBadConfig, scope, KeyReplicaNum, v)
		}
	}
	for _, d := range []struct {
		key string
		out *time.Duration
	}{{KeyLookupTimeout, &s.LookupTimeout}, {KeyTimeout, &s.Timeout}, {KeyConnectTimeout, &s.ConnectTimeout}} {
		v, ok := m[d.key]
		if !ok {
			continue
		}
		var ms float64
		if err := json.Unmarshal(v, &ms); err != nil || ms <= 0 {
			return fmt.Errorf("%w: %s%s = %s, want a number of milliseconds > 0", ErrBadConfig, scope, d.key, v)
		}
		*d.out = time.Duration(ms * float64(time.Millisecond))
	}
	return nil
}

// poolConfig loads the store client settings (see ParseSettings).
func poolConfig(scope string, store map[string]json.RawMessage, host string, env map[string]string) (config.Config, []string, error) {
	origin := strings.TrimSuffix(scope, ".")
	opts := config.LoadOptions{Integration: config.LMCache, Env: env}
	path, fromFile := env[config.EnvConfigPath]
	if !fromFile {
		for _, k := range []string{"master_server_address", "metadata_server"} {
			if _, ok := store[k]; !ok && (k != "master_server_address" || store["master_server_addr"] == nil) {
				return config.Config{}, nil, fmt.Errorf("%w: %s%s is missing (or set %s to an upstream Mooncake JSON file)", ErrBadConfig, scope, k, config.EnvConfigPath)
			}
		}
		if _, ok := store["local_hostname"]; !ok {
			b, _ := json.Marshal(host)
			store["local_hostname"] = b
		}
		// The scope stands in for the file: LMCache's rules read the same
		// keys from both, and the file form requires nothing itself.
		data, err := json.Marshal(store)
		if err != nil {
			return config.Config{}, nil, fmt.Errorf("%w: %s: %v", ErrBadConfig, origin, err)
		}
		opts.File = origin
		opts.ReadFile = func(string) ([]byte, error) { return data, nil }
	}
	cfg, rep, err := config.Load(opts)
	if err != nil {
		where := origin
		if fromFile {
			where = config.EnvConfigPath + "=" + path
		}
		return cfg, nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, where, err)
	}
	var unknown, notes []string
	for _, u := range rep.Unknown {
		unknown = append(unknown, qualify(scope, origin, u.Origin, u.Key))
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return cfg, nil, fmt.Errorf("%w: unknown key %s (not a setting of this plugin or of the store: misspelled?)", ErrBadConfig, strings.Join(unknown, ", "))
	}
	for _, i := range rep.Ignored {
		notes = append(notes, fmt.Sprintf("config: %s ignored: %s", qualify(scope, origin, i.Origin, i.Key), i.Reason))
	}
	if fromFile {
		for k := range store {
			notes = append(notes, fmt.Sprintf("config: %s%s ignored: %s is set, and its file holds the store settings (as LMCache's Mooncake connector)", scope, k, config.EnvConfigPath))
		}
	}
	for _, w := range rep.Warnings {
		notes = append(notes, "config: "+w)
	}
	sort.Strings(notes)
	return cfg, notes, nil
}

// qualify names a key reported by the loader as the operator wrote it: a
// scope key in full, a file key as file:key.
func qualify(scope, origin, from, key string) string {
	if from == origin {
		return scope + key
	}
	return from + ":" + key
}
