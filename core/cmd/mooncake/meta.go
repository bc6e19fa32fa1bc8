package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// openMetadata opens the transfer-engine metadata store named by conn
// (upstream metadata_server forms: http(s)://..., etcd://h1:2379,h2:2379 or
// host:port for etcd; metaopen.Open). With conn empty it derives one from
// the master address: etcd://... masters share their etcd, host:port
// masters serve http://host:8080/metadata (https:// with poolTLS, which
// it is then opened with; etcd with etcdTLS). Errors name the input; a
// malformed one wraps metadata.ErrInvalidConnString, P2PHANDSHAKE and
// redis transfer.ErrUnsupported (both usage errors, metaExit); others are
// the backend's (an unreachable etcd).
func openMetadata(ctx context.Context, conn, masterAddr string, poolTLS, etcdTLS *tlsconfig.Config) (metadata.Store, error) {
	if conn == "" {
		if strings.HasPrefix(masterAddr, "etcd://") {
			conn = masterAddr
		} else {
			defaultURL := metaopen.DefaultURL
			if poolTLS != nil {
				defaultURL = metaopen.DefaultTLSURL
			}
			u, err := defaultURL(masterAddr)
			if err != nil {
				return nil, fmt.Errorf("%w: --master %q: %v", metadata.ErrInvalidConnString, masterAddr, err)
			}
			conn = u
		}
	}
	if conn == metadata.P2PHandshake {
		return nil, fmt.Errorf("%w: metadata server %q (use http://host:port/metadata or etcd://host:port)", transfer.ErrUnsupported, conn)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	meta, _, _, err := metaopen.Open(ctx, conn, "", "", metaopen.WithTLS(poolTLS), metaopen.WithEtcdTLS(etcdTLS))
	return meta, err
}

// metaExit is openMetadata's error as cmd's exit: status 2 for what the
// command line got wrong (a malformed or unsupported metadata server, a
// --master that is not host:port), 1 for a backend that failed.
func metaExit(cmd string, err error) error {
	msg := "mooncake " + cmd + ": --metadata_server: " + oneLineErr(err)
	if errors.Is(err, metadata.ErrInvalidConnString) || errors.Is(err, transfer.ErrUnsupported) {
		return &exitError{2, msg}
	}
	return &exitError{1, msg}
}
