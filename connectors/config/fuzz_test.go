package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fzFile is the path the fuzzed config file is read from.
const fzFile = "/fuzz/mooncake.json"

// fzEnv parses fuzzed environment text: one NAME=VALUE per line.
func fzEnv(s string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// notFromFile lists, per integration, the fields its rules never take
// from the JSON file (so a marshalled Config does not carry them back).
var notFromFile = map[Integration][]string{
	VLLM:   {"LocalHostname", "PreferredSegment"},
	SGLang: {"ExtraBackendTag", "EnableGroupSemantics", "LocalBufferSize"},
}

// FuzzLoad loads arbitrary file, extra-config, environment and remote_url
// inputs under each integration's rules and checks that Load never
// panics, fails only with its documented errors, and that a Config it
// returns is valid, reports where each value came from, and loads back to
// the same values from its own MarshalJSON under the same rules (the
// fields those rules never read from a file aside). Seeds are every
// upstream config file, extra config and environment snippet in testdata.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob(td("*/*.json"))
	envs, _ := filepath.Glob(td("*/*.env"))
	require.NotEmpty(f, files)
	for _, p := range files {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		for in := range 4 {
			f.Add(uint8(in), b, []byte(nil), EnvConfigPath+"="+fzFile+"\n"+EnvSGLangConfigPath+"="+fzFile, "")
			f.Add(uint8(in), []byte(nil), b, "", "mooncakestore://10.0.0.1:50051/?device=mlx5_0")
		}
	}
	for _, p := range envs {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), `\`))
			l = strings.TrimPrefix(l, "export ")
			if k, v, ok := strings.Cut(l, "="); ok {
				lines = append(lines, k+"="+strings.Trim(v, `"`))
			}
		}
		for in := range 4 {
			f.Add(uint8(in), []byte(nil), []byte(nil), strings.Join(lines, "\n"), "")
		}
	}
	f.Add(uint8(3), []byte(`{"local_hostname":"h","metadata_server":"m","master_server_address":"","transfer_timeout":1e-9}`), []byte(nil), EnvConfigPath+"="+fzFile, "mooncakestore://[::1]:1/?device=x")
	f.Add(uint8(0), []byte(`{"local_hostname":"h","metadata_server":"m","master_server_address":"a:1","global_segment_size":"1.5e3gb"}`), []byte(nil), EnvConfigPath+"="+fzFile, "")

	f.Fuzz(func(t *testing.T, integ uint8, file, extra []byte, envText, remoteURL string) {
		in := Integration(integ % 4)
		read := func(name string) ([]byte, error) {
			if name == fzFile {
				return file, nil
			}
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		opts := LoadOptions{Integration: in, Env: fzEnv(envText), Extra: extra, RemoteURL: remoteURL, ReadFile: read}
		done := make(chan struct{})
		var (
			cfg Config
			rep Report
			err error
		)
		go func() {
			defer close(done)
			cfg, rep, err = Load(opts)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Load did not return within 10 s")
		}
		_ = rep.String()
		if err != nil {
			ok := errors.Is(err, ErrNoSource) || errors.Is(err, ErrMissingKey) || errors.Is(err, ErrBadValue) || errors.Is(err, ErrInvalid) || errors.Is(err, os.ErrNotExist)
			require.True(t, ok, "undocumented error: %v", err)
			return
		}
		require.NoError(t, cfg.Validate())
		require.Equal(t, in, cfg.Integration)
		require.NotEmpty(t, rep.Sources, "no sources reported")

		// MarshalJSON loads back under the same rules.
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		back, _, err := Load(LoadOptions{Integration: in, File: fzFile, Env: map[string]string{},
			ReadFile: func(string) ([]byte, error) { return b, nil }})
		require.NoError(t, err, "reloading %s", b)
		for _, name := range notFromFile[in] {
			copyField(&back, cfg, name)
		}
		require.Empty(t, diffConfig(back, cfg), "reloaded %s", b)
	})
}

// copyField sets dst's field name to src's.
func copyField(dst *Config, src Config, name string) {
	switch name {
	case "LocalHostname":
		dst.LocalHostname = src.LocalHostname
	case "PreferredSegment":
		dst.PreferredSegment = src.PreferredSegment
	case "ExtraBackendTag":
		dst.ExtraBackendTag = src.ExtraBackendTag
	case "EnableGroupSemantics":
		dst.EnableGroupSemantics = src.EnableGroupSemantics
	case "LocalBufferSize":
		dst.LocalBufferSize = src.LocalBufferSize
	}
}
