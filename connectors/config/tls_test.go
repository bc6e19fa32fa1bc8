package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// The TLS keys are ours: every integration reads them from the file or
// extra config it reads Mooncake keys from, and from MC_TLS_* variables
// for keys those leave unset.
func TestTLSKeys(t *testing.T) {
	files := mem{
		"/g.json": `{"local_hostname":"h","metadata_server":"https://m:8080/metadata","master_server_address":"m:50051",
			"mc_tls_ca_file":"/pki/ca.pem","mc_tls_cert_file":"/pki/c.pem","mc_tls_key_file":"/pki/c-key.pem"}`,
		"/v.json": `{"metadata_server":"https://m:8080/metadata","master_server_address":"m:50051",
			"mc_tls_ca_file":"/pki/ca.pem","mc_tls_cert_file":"/pki/c.pem","mc_tls_key_file":"/pki/c-key.pem","mc_tls_server_name":"master.pool"}`,
		"/plain.json": `{"local_hostname":"h","metadata_server":"P2PHANDSHAKE","master_server_address":"m:50051"}`,
	}
	envTLS := map[string]string{tlsconfig.EnvCA: "/env/ca.pem", tlsconfig.EnvCert: "/env/c.pem", tlsconfig.EnvKey: "/env/c-key.pem",
		tlsconfig.EnvEtcdCA: "/env/etcd-ca.pem"}
	fileTLS := tlsconfig.Files{CA: "/pki/ca.pem", Cert: "/pki/c.pem", Key: "/pki/c-key.pem"}
	env := func(m map[string]string, more ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(more); i += 2 {
			out[more[i]] = more[i+1]
		}
		return out
	}
	cases := []struct {
		name     string
		opts     LoadOptions
		tls      tlsconfig.Files
		etcd     tlsconfig.Files
		caSource string
	}{
		{"generic file", LoadOptions{Integration: Generic, File: "/g.json"}, fileTLS, tlsconfig.Files{}, "/g.json:mc_tls_ca_file"},
		{"generic file beats env", LoadOptions{Integration: Generic, File: "/g.json", Env: envTLS}, fileTLS,
			tlsconfig.Files{CA: "/env/etcd-ca.pem"}, "/g.json:mc_tls_ca_file"},
		{"generic env", LoadOptions{Integration: Generic, Env: env(envTLS, "MOONCAKE_MASTER", "m:50051")},
			tlsconfig.Files{CA: "/env/ca.pem", Cert: "/env/c.pem", Key: "/env/c-key.pem"}, tlsconfig.Files{CA: "/env/etcd-ca.pem"}, "env MC_TLS_CA_FILE"},
		{"file without TLS keys takes env", LoadOptions{Integration: Generic, File: "/plain.json", Env: envTLS},
			tlsconfig.Files{CA: "/env/ca.pem", Cert: "/env/c.pem", Key: "/env/c-key.pem"}, tlsconfig.Files{CA: "/env/etcd-ca.pem"}, "env MC_TLS_CA_FILE"},
		{"vllm file", LoadOptions{Integration: VLLM, File: "/v.json"},
			tlsconfig.Files{CA: "/pki/ca.pem", Cert: "/pki/c.pem", Key: "/pki/c-key.pem", ServerName: "master.pool"}, tlsconfig.Files{}, "/v.json:mc_tls_ca_file"},
		{"vllm extra beside the file", LoadOptions{Integration: VLLM, File: "/v.json", Extra: []byte(`{"mc_etcd_tls_ca_file":"/x/etcd.pem"}`)},
			tlsconfig.Files{CA: "/pki/ca.pem", Cert: "/pki/c.pem", Key: "/pki/c-key.pem", ServerName: "master.pool"}, tlsconfig.Files{CA: "/x/etcd.pem"}, "/v.json:mc_tls_ca_file"},
		{"sglang extra", LoadOptions{Integration: SGLang, Extra: []byte(`{"master_server_address":"m:50051","metadata_server":"https://m:8080/metadata",
			"mc_tls_ca_file":"/pki/ca.pem","mc_tls_cert_file":"/pki/c.pem","mc_tls_key_file":"/pki/c-key.pem"}`)}, fileTLS, tlsconfig.Files{}, "extra:mc_tls_ca_file"},
		{"lmcache extra", LoadOptions{Integration: LMCache, Extra: []byte(`{"local_hostname":"h","master_server_address":"m:50051","metadata_server":"https://m:8080/metadata",
			"mc_tls_ca_file":"/pki/ca.pem","mc_tls_cert_file":"/pki/c.pem","mc_tls_key_file":"/pki/c-key.pem"}`)}, fileTLS, tlsconfig.Files{}, "extra:mc_tls_ca_file"},
		{"plaintext", LoadOptions{Integration: Generic, File: "/plain.json"}, tlsconfig.Files{}, tlsconfig.Files{}, "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ReadFile = files.read
			c, rep, err := Load(tc.opts)
			require.NoError(t, err, "%v", rep)
			assert.Equal(t, tc.tls, c.TLSFiles())
			assert.Equal(t, tc.etcd, c.EtcdTLSFiles())
			assert.Equal(t, tc.caSource, rep.Sources[KeyTLSCA].String())
			for _, u := range rep.Unknown {
				assert.NotContains(t, u.Key, "tls", "a TLS key reported unknown")
			}
			for _, i := range rep.Ignored {
				assert.NotContains(t, i.Key, "tls", "a TLS key reported ignored")
			}
		})
	}
}

func TestTLSKeysValidate(t *testing.T) {
	base := Defaults(Generic)
	base.MasterServerAddress = "m:50051"
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want string // "" = valid
	}{
		{"none", func(c *Config) {}, ""},
		{"all three", func(c *Config) { c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = "a", "b", "c" }, ""},
		{"no key", func(c *Config) { c.TLSCAFile, c.TLSCertFile = "a", "b" }, "mc_tls_ca_file, mc_tls_cert_file and mc_tls_key_file go together"},
		{"server name alone", func(c *Config) { c.TLSServerName = "m" }, `mc_tls_server_name "m" needs`},
		{"etcd CA alone", func(c *Config) { c.EtcdTLSCAFile = "a" }, ""},
		{"etcd cert without key", func(c *Config) { c.EtcdTLSCAFile, c.EtcdTLSCertFile = "a", "b" }, "mc_etcd_tls_ca_file is required with"},
		{"etcd cert without CA", func(c *Config) { c.EtcdTLSCertFile, c.EtcdTLSKeyFile = "b", "c" }, "mc_etcd_tls_ca_file is required with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
