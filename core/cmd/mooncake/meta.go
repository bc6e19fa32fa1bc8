package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
)

// openMetadata opens the transfer-engine metadata store named by conn
// (upstream metadata_server forms: http(s)://..., etcd://h1:2379,h2:2379 or
// host:port for etcd; metaopen.Open). With conn empty it derives one from
// the master address: etcd://... masters share their etcd, host:port
// masters serve http://host:8080/metadata. Errors name the input;
// P2PHANDSHAKE and redis are unsupported here.
func openMetadata(ctx context.Context, conn, masterAddr string) (metadata.Store, error) {
	if conn == "" {
		if strings.HasPrefix(masterAddr, "etcd://") {
			conn = masterAddr
		} else {
			u, err := metaopen.DefaultURL(masterAddr)
			if err != nil {
				return nil, fmt.Errorf("--master %q: %v", masterAddr, err)
			}
			conn = u
		}
	}
	if conn == metadata.P2PHandshake {
		return nil, fmt.Errorf("unsupported: metadata server %q (use http://host:port/metadata or etcd://host:port)", conn)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	meta, _, _, err := metaopen.Open(ctx, conn, "", "")
	return meta, err
}
