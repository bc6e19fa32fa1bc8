// Package localcluster starts a whole KV-cache pool inside one process on
// 127.0.0.1: a master (gRPC, embedded HTTP metadata server) and N storage
// nodes over the tcp transport (plus same-host shm with Options.Shm). The
// nodes mount standalone segments, as `mooncake node` does; clients started
// with NewClient mount embedded ones unless their config says otherwise.
// `mooncake replay` runs on it by default and the integration tests use it.
//
// Concurrency: Start and Close are not concurrent with each other; the
// clients it returns are safe for concurrent use.
package localcluster

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/master"
	"github.com/mooncake-go/mooncake/core/store/server"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// Options configures a local pool.
type Options struct {
	Nodes       int    // storage nodes; default 2
	SegmentSize uint64 // bytes of DRAM per node; required
	Master      master.Config
	// Shm also offers the same-host shm transport: nodes listen on it and
	// NewClient gives clients one (Config.Local) unless set, so data moves
	// by memory copy instead of over loopback tcp. Default false (pure tcp).
	Shm bool
	// StorageRootDir gives every node a disk tier (client.Config
	// StorageRootDir) in its own subdirectory node-<i> of this directory;
	// "" = none. The master needs Master.EnableOffload.
	StorageRootDir string
	// StorageQuota is each node's disk tier size limit in bytes
	// (client.Config.StorageQuota).
	StorageQuota uint64
	// PingInterval is the nodes' heartbeat period (client.Config
	// PingInterval); default the client's (1 s).
	PingInterval time.Duration
	// TLS, when set, runs the pool with mutual TLS: the master's
	// listeners require it (server.ProcessConfig.TLS) and the nodes, and
	// clients from NewClient that name no TLS of their own, use it as
	// their identity, for the master and for the metadata server. The
	// data plane (tcp, shm) stays plaintext. nil = plaintext.
	TLS *tlsconfig.Config
	// Prefault makes every node allocate its whole segment at start
	// (client.Config.PrefaultSegment), as `mooncake node` does; default
	// false, so tests hold only the memory they touch.
	Prefault bool
}

// Cluster is a running local pool.
type Cluster struct {
	Master *server.Process
	Nodes  []*client.Client
	shm    bool              // Options.Shm
	master master.Config     // Options.Master, for RestartMaster
	tls    *tlsconfig.Config // Options.TLS
}

// Start runs a master and the nodes. Errors: INVALID_PARAMS for a zero
// segment size; any start-up error (everything started is stopped again).
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 2
	}
	if opts.SegmentSize == 0 {
		return nil, fmt.Errorf("localcluster: segment size 0")
	}
	p, err := server.Start(server.ProcessConfig{Master: opts.Master, RPCAddr: "127.0.0.1:0", MetadataAddr: "127.0.0.1:0", TLS: opts.TLS})
	if err != nil {
		return nil, err
	}
	c = &Cluster{Master: p, shm: opts.Shm, master: opts.Master, tls: opts.TLS}
	started := c // c is nil by the time an error return runs the defer
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	for i := 0; i < opts.Nodes; i++ {
		ncfg := client.Config{LocalHostname: fmt.Sprintf("node-%d", i), GlobalSegmentSize: opts.SegmentSize, StorageQuota: opts.StorageQuota,
			SegmentKind: store.SegmentStandalone, PingInterval: opts.PingInterval, PrefaultSegment: opts.Prefault}
		if opts.StorageRootDir != "" {
			ncfg.StorageRootDir = filepath.Join(opts.StorageRootDir, ncfg.LocalHostname)
		}
		n, err := c.NewClient(ctx, ncfg)
		if err != nil {
			return nil, fmt.Errorf("localcluster: node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// NewClient starts a client of this pool; MasterAddr, Metadata and Transport
// are filled in when empty (tcp on 127.0.0.1), Local (shm) too when the
// pool was started with Options.Shm, and TLS with Options.TLS (which also
// opens the metadata server with it). The caller closes it.
func (c *Cluster) NewClient(ctx context.Context, cfg client.Config) (*client.Client, error) {
	if cfg.MasterAddr == "" {
		cfg.MasterAddr = c.Master.RPCAddr
	}
	if cfg.TLS == nil {
		cfg.TLS = c.tls
	}
	if cfg.Metadata == nil {
		var opts []httpmeta.ClientOption
		if cfg.TLS != nil {
			opts = append(opts, httpmeta.WithTLSConfig(cfg.TLS.Client()))
		}
		m, err := httpmeta.NewClient(c.Master.MetadataURL, opts...)
		if err != nil {
			return nil, err
		}
		cfg.Metadata = m
	}
	if cfg.Transport == nil {
		cfg.Transport = tcp.New(tcp.Config{})
	}
	if cfg.Local == nil && c.shm {
		cfg.Local = shm.New(shm.Config{})
	}
	return client.New(ctx, cfg)
}

// RestartMaster stops the master and starts a fresh one on the same gRPC
// and metadata addresses, as a supervisor restarts a master process: its
// object table, segments, clients and metadata server are empty. Nodes
// and clients find it again through their heartbeats (they remount and
// publish their descriptors again). Errors: a listen error (the cluster
// then has no master; Close still works).
func (c *Cluster) RestartMaster() error {
	rpcAddr := c.Master.RPCAddr
	var metaAddr string
	if c.Master.MetadataURL != "" {
		u, err := url.Parse(c.Master.MetadataURL)
		if err != nil {
			return fmt.Errorf("localcluster: restart master: metadata URL: %w", err)
		}
		metaAddr = u.Host
	}
	c.Master.Close()
	c.Master = nil
	p, err := server.Start(server.ProcessConfig{Master: c.master, RPCAddr: rpcAddr, MetadataAddr: metaAddr, TLS: c.tls})
	if err != nil {
		return fmt.Errorf("localcluster: restart master: %w", err)
	}
	c.Master = p
	return nil
}

// Close stops the nodes, then the master.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
	c.Nodes = nil
	if c.Master != nil {
		c.Master.Close()
	}
}

var _ transfer.Transport = (*tcp.Transport)(nil)
