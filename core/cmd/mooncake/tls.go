package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/mooncake-go/mooncake/core/tlsconfig"
)

// tlsFlags are the TLS flags of master, node, ctl and replay: the pool's
// mutual TLS (master gRPC, HTTP metadata, /metrics) and etcd's. Each
// defaults to its MC_* environment variable (tlsconfig.EnvCA and
// friends), so one environment serves every process of a host.
type tlsFlags struct {
	pool, etcd tlsconfig.Files
}

// register adds --tls-ca, --tls-cert, --tls-key; with client,
// --tls-server-name; with etcd, --etcd-tls-ca, --etcd-tls-cert,
// --etcd-tls-key. who is what the pool's identity is for, in the help.
func (f *tlsFlags) register(fs *pflag.FlagSet, who string, client, etcd bool) {
	fs.StringVar(&f.pool.CA, tlsconfig.FlagCA, os.Getenv(tlsconfig.EnvCA), "mutual TLS ("+who+"): CA bundle (PEM) that issued the peers' certificates; with --tls-cert and --tls-key turns TLS on (default $"+tlsconfig.EnvCA+"; off = plaintext, as upstream)")
	fs.StringVar(&f.pool.Cert, tlsconfig.FlagCert, os.Getenv(tlsconfig.EnvCert), "mutual TLS: this process's certificate (PEM, issued by a CA of --tls-ca) (default $"+tlsconfig.EnvCert+")")
	fs.StringVar(&f.pool.Key, tlsconfig.FlagKey, os.Getenv(tlsconfig.EnvKey), "mutual TLS: the private key of --tls-cert (PEM) (default $"+tlsconfig.EnvKey+")")
	if client {
		fs.StringVar(&f.pool.ServerName, tlsconfig.FlagServerName, os.Getenv(tlsconfig.EnvServerName), "mutual TLS: name to verify in the master's certificate instead of the host dialled (default $"+tlsconfig.EnvServerName+")")
	}
	if etcd {
		fs.StringVar(&f.etcd.CA, tlsconfig.FlagEtcdCA, os.Getenv(tlsconfig.EnvEtcdCA), "etcd over TLS: CA bundle (PEM) of etcd's server certificate (default $"+tlsconfig.EnvEtcdCA+"; off = plaintext)")
		fs.StringVar(&f.etcd.Cert, tlsconfig.FlagEtcdCert, os.Getenv(tlsconfig.EnvEtcdCert), "etcd over TLS: client certificate (PEM) for etcd's --client-cert-auth (default $"+tlsconfig.EnvEtcdCert+")")
		fs.StringVar(&f.etcd.Key, tlsconfig.FlagEtcdKey, os.Getenv(tlsconfig.EnvEtcdKey), "etcd over TLS: the private key of --etcd-tls-cert (PEM) (default $"+tlsconfig.EnvEtcdKey+")")
	}
}

// load reads the files: the pool's identity (nil = plaintext) and etcd's
// (nil = plaintext). A missing, unreadable or wrong file is a usage
// error (exit status 2) naming the command, the flags and the file.
func (f *tlsFlags) load(cmd string) (pool, etcd *tlsconfig.Config, err error) {
	if f.pool.ServerName != "" && !f.pool.Enabled() {
		return nil, nil, &exitError{2, fmt.Sprintf("mooncake %s: --%s %q without --%s, --%s and --%s", cmd, tlsconfig.FlagServerName, f.pool.ServerName, tlsconfig.FlagCA, tlsconfig.FlagCert, tlsconfig.FlagKey)}
	}
	if pool, err = tlsconfig.Load(f.pool); err != nil {
		return nil, nil, &exitError{2, fmt.Sprintf("mooncake %s: --%s/--%s/--%s: %v", cmd, tlsconfig.FlagCA, tlsconfig.FlagCert, tlsconfig.FlagKey, err)}
	}
	if etcd, err = tlsconfig.LoadClient(f.etcd); err != nil {
		return nil, nil, &exitError{2, fmt.Sprintf("mooncake %s: --%s/--%s/--%s: %v", cmd, tlsconfig.FlagEtcdCA, tlsconfig.FlagEtcdCert, tlsconfig.FlagEtcdKey, err)}
	}
	return pool, etcd, nil
}
