package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LoadOptions are the inputs of Load. Nothing is read from the process
// environment: pass Env (FromOS builds it for callers that want the real
// one).
type LoadOptions struct {
	// Integration selects whose rules to follow.
	Integration Integration
	// Env is the environment, name to value. A name that is present with an
	// empty value counts as set, as it does upstream.
	Env map[string]string
	// File, when not empty, is the JSON file to read in place of the one the
	// integration's path variable names (MOONCAKE_CONFIG_PATH, or
	// SGLANG_HICACHE_MOONCAKE_CONFIG_PATH for SGLang): it takes that
	// variable's place in the precedence, and the variable is not consulted.
	File string
	// Extra is the engine's extra-config JSON object: vLLM's
	// kv_connector_extra_config, SGLang's --hicache-storage-backend-extra-config,
	// LMCache's extra_config (YAML converted to JSON). Empty or null means
	// none. Generic rejects it.
	Extra json.RawMessage
	// RemoteURL is LMCache's remote_url, mooncakestore://host:port/?device=dev.
	// Only LMCache reads it.
	RemoteURL string
	// ReadFile reads a config file; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
}

// FromOS returns the process environment as a map, for LoadOptions.Env.
func FromOS() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// SourceKind says where a value came from.
type SourceKind int

const (
	FromDefault SourceKind = iota // the integration's default
	FromFile                      // a JSON file
	FromExtra                     // the extra-config object
	FromEnv                       // an environment variable
	FromURL                       // LMCache's remote_url
	FromRuntime                   // left empty for the adapter to fill at run time (vLLM: the rank's IP)
)

var sourceKindNames = [...]string{"default", "file", "extra", "env", "url", "runtime"}

func (k SourceKind) String() string {
	if k >= 0 && int(k) < len(sourceKindNames) {
		return sourceKindNames[k]
	}
	return "source(" + strconv.Itoa(int(k)) + ")"
}

// Source is where one value came from.
type Source struct {
	Kind SourceKind
	// Origin is the file path (FromFile), "extra" (FromExtra), the variable
	// name (FromEnv) or the URL (FromURL); empty otherwise.
	Origin string
	// Key is the key as written in a file or extra config; an alias shows
	// here as written.
	Key string
}

// String formats s as "default", "path/to/file.json:key", "extra:key",
// "env NAME", "url mooncakestore://...", "runtime", or for a Report's
// Primary "path/to/file.json", "extra" or "environment".
func (s Source) String() string {
	switch s.Kind {
	case FromFile, FromExtra:
		if s.Key == "" {
			return s.Origin
		}
		return s.Origin + ":" + s.Key
	case FromEnv, FromURL:
		if s.Origin == "" {
			return "environment"
		}
		return s.Kind.String() + " " + s.Origin
	}
	return s.Kind.String()
}

// KeyRef names a key in a source: Origin is the file path or "extra".
type KeyRef struct {
	Origin string
	Key    string
}

// String formats k as "origin:key".
func (k KeyRef) String() string { return k.Origin + ":" + k.Key }

// IgnoredKey is a key Load recognised but did not use, and why.
type IgnoredKey struct {
	KeyRef
	Reason string
}

// Report tells what Load read. Upstream integrations silently skip keys
// they do not know; Load does the same but lists them here.
type Report struct {
	Integration Integration
	// Primary is the source the integration selected: a file, the extra
	// config or the environment (Origin empty).
	Primary Source
	// Sources maps each key the integration reads (canonical spelling) to
	// where its value came from, defaults included.
	Sources map[string]Source
	// Unknown lists keys no integration reads, in source order.
	Unknown []KeyRef
	// Ignored lists keys that mean something to some integration or to the
	// engine but that these rules did not use.
	Ignored []IgnoredKey
	// Warnings notes values that load here but that upstream would read
	// differently, and set variables the rules did not consult.
	Warnings []string
}

// Notes are r's remarks an operator should see in the engine's log, one
// line each: keys of a source no integration reads ("misspelled?"), keys
// that mean something to another integration only, and the loader's
// warnings. Keys whose origin fromEngine reports true are skipped: the
// engine's extra config also carries the adapter's own keys, which the
// adapter checks itself (nil skips none). The vLLM and SGLang adapters
// log these at start-up.
func (r Report) Notes(fromEngine func(origin string) bool) []string {
	var notes []string
	skip := func(origin string) bool { return fromEngine != nil && fromEngine(origin) }
	for _, u := range r.Unknown {
		if !skip(u.Origin) {
			notes = append(notes, fmt.Sprintf("config %s: unknown key %q (not read by any integration: misspelled?)", u.Origin, u.Key))
		}
	}
	for _, i := range r.Ignored {
		if !skip(i.Origin) {
			notes = append(notes, fmt.Sprintf("config %s: key %q ignored: %s", i.Origin, i.Key, i.Reason))
		}
	}
	for _, w := range r.Warnings {
		notes = append(notes, "config: "+w)
	}
	return notes
}

// String summarises r on a few lines, for logs.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s rules, settings from %s", r.Integration, r.Primary)
	keys := make([]string, 0, len(r.Sources))
	for k, s := range r.Sources {
		if s.Kind != FromDefault {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s <- %s", k, r.Sources[k])
	}
	for _, u := range r.Unknown {
		fmt.Fprintf(&b, "\n  unknown key %s", u)
	}
	for _, i := range r.Ignored {
		fmt.Fprintf(&b, "\n  ignored key %s: %s", i.KeyRef, i.Reason)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "\n  warning: %s", w)
	}
	return b.String()
}

// Load builds a Config the way opts.Integration's upstream code does, then
// validates it. Precedence (first match wins; a source that is selected
// supplies every key, and keys it lacks take defaults, never values from a
// lower source):
//
//	Generic: File / MOONCAKE_CONFIG_PATH file (must hold local_hostname,
//	         metadata_server, master_server_address)
//	         > MOONCAKE_* environment (MOONCAKE_MASTER must be non-empty)
//	VLLM:    File / MOONCAKE_CONFIG_PATH file, the only source of Mooncake keys;
//	         local_hostname: MOONCAKE_REQUESTER_LOCAL_HOSTNAME > rank IP (left empty);
//	         preferred_segment: extra preferred_segment > MOONCAKE_PREFERRED_SEGMENT
//	SGLang:  extra config naming master_server_address or client_server_address
//	         > File / SGLANG_HICACHE_MOONCAKE_CONFIG_PATH file (must name one of them)
//	         > MOONCAKE_* environment (MOONCAKE_MASTER or MOONCAKE_CLIENT must be set);
//	         extra_backend_tag and enable_group_semantics come from the extra
//	         config whatever the source; local_buffer_size only from
//	         SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE (16 MiB)
//	LMCache: File / MOONCAKE_CONFIG_PATH file > extra_config (must hold
//	         local_hostname, metadata_server, master_server_address);
//	         then remote_url: host:port fills an empty master address and
//	         ?device= replaces device_name
//
// Aliases (master_server_addr, rdma_devices, prefer_local_alloc) are
// accepted wherever their canonical key is read; the canonical key wins if
// both appear. A JSON null counts as absent. On error the partial Config
// and Report come back too; the error wraps ErrNoSource, ErrMissingKey,
// ErrBadValue, ErrInvalid or the file system's error.
func Load(opts LoadOptions) (Config, Report, error) {
	l := &loader{
		in:        opts.Integration,
		opts:      opts,
		consulted: make(map[string]bool),
		rep:       Report{Integration: opts.Integration, Sources: make(map[string]Source)},
	}
	if l.opts.ReadFile == nil {
		l.opts.ReadFile = os.ReadFile
	}
	var err error
	switch l.in {
	case Generic:
		err = l.generic()
	case VLLM:
		err = l.vllm()
	case SGLang:
		err = l.sglang()
	case LMCache:
		err = l.lmcache()
	default:
		err = fmt.Errorf("%w: unknown integration %v", ErrBadValue, l.in)
	}
	if err == nil && opts.RemoteURL != "" && l.in != LMCache {
		err = fmt.Errorf("%w: RemoteURL is read only by the lmcache rules, not %v", ErrBadValue, l.in)
	}
	if err == nil {
		err = l.tlsFromEnv()
	}
	if err != nil {
		return l.cfg, l.rep, err
	}
	l.warnUnreadEnv()
	return l.cfg, l.rep, l.cfg.Validate()
}

type loader struct {
	in        Integration
	opts      LoadOptions
	cfg       Config
	rep       Report
	consulted map[string]bool // environment names looked up
}

// env looks a variable up and remembers that it was consulted.
func (l *loader) env(name string) (string, bool) {
	l.consulted[name] = true
	v, ok := l.opts.Env[name]
	return v, ok
}

func (l *loader) warn(format string, args ...any) {
	l.rep.Warnings = append(l.rep.Warnings, fmt.Sprintf(format, args...))
}

// start sets the defaults and records them as the source of every key the
// integration reads.
func (l *loader) start(c Config) {
	l.cfg = c
	for _, keys := range reads[l.in] {
		for _, k := range keys {
			l.rep.Sources[k] = Source{Kind: FromDefault}
		}
	}
}

// path returns the config file to read: opts.File, else the variable's
// value. ok is false when neither is given.
func (l *loader) path(envName string) (string, bool, error) {
	if l.opts.File != "" {
		return l.opts.File, true, nil
	}
	p, ok := l.env(envName)
	if ok && p == "" {
		return "", true, fmt.Errorf("%w: %s is set to the empty string", ErrNoSource, envName)
	}
	return p, ok, nil
}

func (l *loader) readJSON(path string) (map[string]any, error) {
	data, err := l.opts.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	m, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadValue, path, err)
	}
	return m, nil
}

// extra decodes opts.Extra; present is false for none, empty input or null.
func (l *loader) extra() (m map[string]any, present bool, err error) {
	t := bytes.TrimSpace(l.opts.Extra)
	if len(t) == 0 || string(t) == "null" {
		return nil, false, nil
	}
	m, err = decodeObject(t)
	if err != nil {
		return nil, false, fmt.Errorf("%w: extra config: %w", ErrBadValue, err)
	}
	return m, true, nil
}

// decodeObject decodes one JSON object, keeping numbers exact.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a JSON object, got %s", describe(v))
	}
	return m, nil
}

// has reports whether m holds key or one of its aliases (null included, as
// Python's "key in dict").
func has(m map[string]any, key string) bool {
	if _, ok := m[key]; ok {
		return true
	}
	for a, c := range aliases {
		if _, ok := m[a]; ok && c == key {
			return true
		}
	}
	return false
}

// hasValue reports whether m holds key or an alias with a non-null value
// (Python's dict.get(key) is not None).
func hasValue(m map[string]any, key string) bool {
	if v, ok := m[key]; ok && v != nil {
		return true
	}
	for a, c := range aliases {
		if v, ok := m[a]; ok && c == key && v != nil {
			return true
		}
	}
	return false
}

// specialWhy gives the reason for ignoring a key that an integration never
// reads from files or extra config, where the general one would mislead.
var specialWhy = map[Integration]map[string]string{
	VLLM: {
		"local_hostname":    "vLLM uses the rank's IP, or " + EnvRequesterHostname,
		"preferred_segment": "vLLM reads preferred_segment from kv_connector_extra_config or " + EnvPreferredSegment,
	},
	SGLang: {
		"local_buffer_size":      "SGLang sizes its buffer from " + EnvSGLangLocalBuffer + " (16 MiB) instead",
		"extra_backend_tag":      "SGLang reads it only from the extra config",
		"enable_group_semantics": "SGLang reads it only from the extra config",
	},
}

// apply sets every key of m that readable lists, recording its source,
// and reports the rest as ignored or unknown. why, when set, explains why a
// key this integration reads elsewhere is skipped in this source.
func (l *loader) apply(m map[string]any, kind SourceKind, origin string, f form, readable []string, why string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw := m[k]
		c, alias := canonical(k)
		ref := KeyRef{Origin: origin, Key: k}
		if slices.Contains(readable, c) {
			if alias {
				if _, both := m[c]; both {
					l.warn("%s: both %s and %s are set; %s wins", origin, k, c, c)
					continue
				}
			}
			if raw == nil {
				continue
			}
			if err := l.set(c, raw); err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
			l.rep.Sources[c] = Source{Kind: kind, Origin: origin, Key: k}
			continue
		}
		if fieldPtr(&Config{}, c) != nil {
			l.rep.Ignored = append(l.rep.Ignored, IgnoredKey{KeyRef: ref, Reason: l.whyIgnored(c, f, why)})
			continue
		}
		if r, ok := engineKey(k); ok {
			l.rep.Ignored = append(l.rep.Ignored, IgnoredKey{KeyRef: ref, Reason: r})
			continue
		}
		l.rep.Unknown = append(l.rep.Unknown, ref)
	}
	return nil
}

func (l *loader) whyIgnored(key string, f form, why string) string {
	if r, ok := specialWhy[l.in][key]; ok {
		return r
	}
	readHere := false
	for _, keys := range reads[l.in] {
		readHere = readHere || slices.Contains(keys, key)
	}
	if why != "" && readHere {
		return why
	}
	return fmt.Sprintf("the %v rules do not read it from the %v (read by: %s)", l.in, f, readers(key))
}

// set parses raw into the field of key.
func (l *loader) set(key string, raw any) error {
	switch p := fieldPtr(&l.cfg, key).(type) {
	case *string:
		s, err := stringOf(raw)
		if err != nil {
			return err
		}
		*p = s
	case *int64:
		n, err := sizeOf(raw)
		if err != nil {
			return err
		}
		if _, isStr := raw.(string); isStr && l.in == LMCache {
			l.warn("%s is a string: mooncake-go parses it, but LMCache passes it to Mooncake unparsed and setup fails (use an integer)", key)
		}
		*p = n
	case *bool:
		b, err := boolOf(raw)
		if err != nil {
			return err
		}
		// Only Mooncake's own loader parses boolean strings; vLLM, SGLang and
		// LMCache test the raw value, so any non-empty string is true there.
		if s, ok := raw.(string); ok && l.in != Generic && pyTruthy(raw) != b {
			l.warn("%s is the string %q: mooncake-go reads %t, upstream %v would read %t (use a JSON boolean)", key, s, b, l.in, !b)
		}
		*p = b
	case *int:
		n, err := intOf(raw)
		if err != nil {
			return err
		}
		*p = n
	case *time.Duration:
		d, err := secondsOf(raw)
		if err != nil {
			return err
		}
		*p = d
	default:
		return fmt.Errorf("%w: no field for key %q", ErrBadValue, key)
	}
	return nil
}

// setEnv sets key from variable name's value and records the source.
func (l *loader) setEnv(key, name, value string) error {
	if err := l.set(key, value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	l.rep.Sources[key] = Source{Kind: FromEnv, Origin: name}
	return nil
}

func (l *loader) rejectExtra() error {
	if _, present, err := l.extra(); err != nil || present {
		return fmt.Errorf("%w: the generic rules read no extra config (use vllm, sglang or lmcache)", ErrBadValue)
	}
	return nil
}

// generic follows mooncake_config.py's MooncakeConfig.load_from_env.
func (l *loader) generic() error {
	if err := l.rejectExtra(); err != nil {
		return err
	}
	path, ok, err := l.path(EnvConfigPath)
	if err != nil {
		return err
	}
	if ok {
		m, err := l.readJSON(path)
		if err != nil {
			return err
		}
		for _, k := range []string{"local_hostname", "metadata_server", "master_server_address"} {
			if !has(m, k) {
				return fmt.Errorf("%w: %s: %s", ErrMissingKey, path, k)
			}
		}
		// from_file defaults only the other keys.
		c := Defaults(Generic)
		c.LocalHostname, c.MetadataServer = "", ""
		l.start(c)
		l.rep.Primary = Source{Kind: FromFile, Origin: path}
		return l.apply(m, FromFile, path, formFile, reads[Generic][formFile], "")
	}
	if v, _ := l.env(envMaster); v == "" {
		return fmt.Errorf("%w: neither %s nor %s is set", ErrNoSource, EnvConfigPath, envMaster)
	}
	l.start(Defaults(Generic))
	l.rep.Primary = Source{Kind: FromEnv}
	for _, e := range genericEnv {
		if v, ok := l.env(e.name); ok {
			if err := l.setEnv(e.key, e.name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// vllm follows vLLM's MooncakeStoreConfig.load_from_config and the
// connector's requester helpers.
func (l *loader) vllm() error {
	path, ok, err := l.path(EnvConfigPath)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: vLLM reads Mooncake settings only from the JSON file named by %s, which is not set", ErrNoSource, EnvConfigPath)
	}
	m, err := l.readJSON(path)
	if err != nil {
		return err
	}
	l.start(Defaults(VLLM))
	l.rep.Primary = Source{Kind: FromFile, Origin: path}
	if err := l.apply(m, FromFile, path, formFile, reads[VLLM][formFile], ""); err != nil {
		return err
	}

	ex, present, err := l.extra()
	if err != nil {
		return err
	}
	if present {
		if raw, ok := ex["preferred_segment"]; ok && raw != nil {
			if s, isStr := raw.(string); !isStr || strings.TrimSpace(s) == "" {
				return fmt.Errorf("%w: extra:preferred_segment must be a non-empty string, got %s", ErrBadValue, describe(raw))
			}
		}
		if err := l.apply(ex, FromExtra, "extra", formExtra, reads[VLLM][formExtra],
			"vLLM reads Mooncake settings only from the "+EnvConfigPath+" file"); err != nil {
			return err
		}
		l.cfg.PreferredSegment = strings.TrimSpace(l.cfg.PreferredSegment)
	}
	if v, ok := l.env(EnvPreferredSegment); ok && strings.TrimSpace(v) != "" && l.cfg.PreferredSegment == "" {
		l.cfg.PreferredSegment = strings.TrimSpace(v)
		l.rep.Sources["preferred_segment"] = Source{Kind: FromEnv, Origin: EnvPreferredSegment}
	}

	l.cfg.LocalHostname = ""
	l.rep.Sources["local_hostname"] = Source{Kind: FromRuntime}
	if v, ok := l.env(EnvRequesterHostname); ok && strings.TrimSpace(v) != "" {
		l.cfg.LocalHostname = strings.TrimSpace(v)
		l.rep.Sources["local_hostname"] = Source{Kind: FromEnv, Origin: EnvRequesterHostname}
	}
	return nil
}

// sglang follows SGLang's MooncakeBaseStore._load_config and MooncakeStore.
func (l *loader) sglang() error {
	ex, present, err := l.extra()
	if err != nil {
		return err
	}
	l.start(Defaults(SGLang))
	if present && (hasValue(ex, "master_server_address") || hasValue(ex, "client_server_address")) {
		l.rep.Primary = Source{Kind: FromExtra, Origin: "extra"}
		if err := l.apply(ex, FromExtra, "extra", formExtra, reads[SGLang][formExtra], ""); err != nil {
			return err
		}
	} else {
		if err := l.sglangFileOrEnv(); err != nil {
			return err
		}
		if present {
			if err := l.apply(ex, FromExtra, "extra", formExtra, []string{"extra_backend_tag", "enable_group_semantics"},
				"the extra config names neither master_server_address nor client_server_address, so SGLang takes its Mooncake settings from "+l.rep.Primary.String()); err != nil {
				return err
			}
		}
	}
	// _normalize_tenant_id: blank means the default tenant.
	if l.cfg.TenantID = strings.TrimSpace(l.cfg.TenantID); l.cfg.TenantID == "" {
		l.cfg.TenantID = DefaultTenant
	}
	// DEFAULT_LOCAL_BUFFER_SIZE, read once at import whatever the source.
	if v, ok := l.env(EnvSGLangLocalBuffer); ok {
		return l.setEnv("local_buffer_size", EnvSGLangLocalBuffer, v)
	}
	return nil
}

func (l *loader) sglangFileOrEnv() error {
	path, ok, err := l.path(EnvSGLangConfigPath)
	if err != nil {
		return err
	}
	if ok {
		m, err := l.readJSON(path)
		if err != nil {
			return err
		}
		if !has(m, "master_server_address") && !has(m, "client_server_address") {
			return fmt.Errorf("%w: %s: master_server_address or client_server_address", ErrMissingKey, path)
		}
		l.rep.Primary = Source{Kind: FromFile, Origin: path}
		return l.apply(m, FromFile, path, formFile, reads[SGLang][formFile], "")
	}
	_, master := l.env(envMaster)
	_, client := l.env(envClient)
	if !master && !client {
		return fmt.Errorf("%w: SGLang found no extra config naming master_server_address or client_server_address, no %s, and neither %s nor %s",
			ErrNoSource, EnvSGLangConfigPath, envMaster, envClient)
	}
	l.rep.Primary = Source{Kind: FromEnv}
	for _, e := range sglangEnv {
		v, ok := l.env(e.name)
		if !ok {
			continue
		}
		switch e.key {
		case "master_metrics_port":
			// EnvInt: a bad value falls back to the default with a warning.
			if _, err := strconv.Atoi(strings.TrimSpace(v)); err != nil {
				l.warn("%s=%q is not an integer; SGLang keeps the default %d", e.name, v, l.cfg.MasterMetricsPort)
				continue
			}
		case "check_server", "standalone_storage", "enable_ssd_offload":
			// EnvBool: lower-cased, not trimmed; a bad value falls back to the
			// default with a warning.
			switch strings.ToLower(v) {
			case "true", "1", "yes", "y", "false", "0", "no", "n":
			default:
				l.warn("%s=%q is not a boolean SGLang knows (true/1/yes/y, false/0/no/n); it keeps the default false", e.name, v)
				continue
			}
		}
		if err := l.setEnv(e.key, e.name, v); err != nil {
			return err
		}
	}
	// MOONCAKE_LOCAL_HOSTNAME, else the legacy LOCAL_HOSTNAME, else localhost.
	if v, ok := l.env(envLocalHostname); ok {
		return l.setEnv("local_hostname", envLocalHostname, v)
	}
	if v, ok := l.env(EnvLegacyHostname); ok {
		return l.setEnv("local_hostname", EnvLegacyHostname, v)
	}
	return nil
}

// lmcache follows LMCache's MooncakestoreConnector.__init__.
func (l *loader) lmcache() error {
	ex, present, err := l.extra()
	if err != nil {
		return err
	}
	path, ok, err := l.path(EnvConfigPath)
	if err != nil {
		return err
	}
	l.start(Defaults(LMCache))
	if ok {
		m, err := l.readJSON(path)
		if err != nil {
			return err
		}
		l.rep.Primary = Source{Kind: FromFile, Origin: path}
		if err := l.apply(m, FromFile, path, formFile, reads[LMCache][formFile], ""); err != nil {
			return err
		}
		if present {
			if err := l.apply(ex, FromExtra, "extra", formExtra, nil,
				EnvConfigPath+" is set, so LMCache ignores the Mooncake keys of extra_config"); err != nil {
				return err
			}
		}
	} else {
		if !present {
			return fmt.Errorf("%w: LMCache needs %s or an extra_config", ErrNoSource, EnvConfigPath)
		}
		for _, k := range []string{"local_hostname", "metadata_server", "master_server_address"} {
			if !has(ex, k) {
				return fmt.Errorf("%w: extra:%s", ErrMissingKey, k)
			}
		}
		l.rep.Primary = Source{Kind: FromExtra, Origin: "extra"}
		if err := l.apply(ex, FromExtra, "extra", formExtra, reads[LMCache][formExtra], ""); err != nil {
			return err
		}
	}
	if l.opts.RemoteURL != "" {
		return l.applyURL(l.opts.RemoteURL)
	}
	return nil
}

// applyURL applies remote_url as MooncakestoreConnector does: host:port only
// when no master address is configured; ?device= always when non-empty.
func (l *loader) applyURL(raw string) error {
	if strings.Contains(raw, ",") {
		return fmt.Errorf("%w: remote_url %q: mooncakestore takes one host", ErrBadValue, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: remote_url: %w", ErrBadValue, err)
	}
	if u.Scheme != "mooncakestore" {
		return fmt.Errorf("%w: remote_url %q: want the mooncakestore:// scheme", ErrBadValue, raw)
	}
	port := 0
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("%w: remote_url %q: bad port", ErrBadValue, raw)
		}
	}
	if l.cfg.MasterServerAddress == "" && u.Hostname() != "" && port != 0 {
		l.cfg.MasterServerAddress = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
		l.rep.Sources["master_server_address"] = Source{Kind: FromURL, Origin: raw}
	}
	if dev := u.Query().Get("device"); dev != "" {
		l.cfg.DeviceName = dev
		l.rep.Sources["device_name"] = Source{Kind: FromURL, Origin: raw}
	}
	return nil
}

// tlsFromEnv sets each TLS key that no file or extra config set from its
// MC_* variable, for every integration (the keys are ours: no upstream
// precedence applies).
func (l *loader) tlsFromEnv() error {
	for _, e := range tlsEnv {
		if l.rep.Sources[e.key].Kind != FromDefault {
			continue
		}
		if v, ok := l.env(e.name); ok && v != "" {
			if err := l.setEnv(e.key, e.name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// warnUnreadEnv notes Mooncake variables that are set but that the chosen
// rules never looked at: a common surprise, since a selected file or extra
// config does not fall back to the environment.
func (l *loader) warnUnreadEnv() {
	for _, name := range mooncakeEnv() {
		if _, set := l.opts.Env[name]; !set || l.consulted[name] {
			continue
		}
		switch {
		case name == EnvConfigPath && l.in == SGLang:
			l.warn("%s is set but SGLang does not read it; SGLang's file comes from %s", name, EnvSGLangConfigPath)
		case name == EnvConfigPath && l.opts.File != "":
			l.warn("%s is set but the explicit file %s replaces it", name, l.opts.File)
		case name == EnvSGLangConfigPath && l.in == SGLang && l.opts.File != "":
			l.warn("%s is set but the explicit file %s replaces it", name, l.opts.File)
		default:
			l.warn("%s is set but not read: the %v rules took their settings from %s, and keys missing there take defaults, not environment values", name, l.in, l.rep.Primary)
		}
	}
}
