package pd

import (
	"context"
	"fmt"
	"net"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// addrOf is the virtual address of a host region's first byte.
func addrOf(b []byte) uint64 { return memory.AddrOf(b) }

// worker is the transfer engine of one Producer or Consumer, in P2P
// handshake mode: no metadata server; the engine's segment name is its
// handshake listener's "host:port" (upstream initialize(local_ip,
// "P2PHANDSHAKE", protocol, device)).
type worker struct {
	store *p2pmeta.Store
	eng   *transfer.Engine
}

// startWorker starts the handshake listener and the engine on cfg.Host and
// registers cfg.Regions (published, so peers may write them, when remote).
// Errors: the listen, engine or registration error, naming the region.
func startWorker(ctx context.Context, cfg Config, remote bool) (*worker, error) {
	store, err := p2pmeta.Listen(net.JoinHostPort(cfg.Host, "0"), p2pmeta.WithHost(cfg.Host))
	if err != nil {
		return nil, fmt.Errorf("pd: engine %q: handshake listener: %w", cfg.EngineID, err)
	}
	eng, err := transfer.New(ctx, transfer.Config{
		Name:      store.Name(),
		Metadata:  store,
		Transport: tcp.New(tcp.Config{BindAddr: net.JoinHostPort(cfg.Host, "0"), Host: cfg.Host}),
		CUDA:      cfg.CUDA,
	})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("pd: engine %q: transfer engine: %w", cfg.EngineID, err)
	}
	w := &worker{store: store, eng: eng}
	for i, r := range cfg.Regions {
		if r.Mem != nil {
			err = eng.RegisterLocalMemory(ctx, r.Mem[:r.size()], "cpu:0", remote)
		} else {
			err = eng.RegisterDeviceMemory(ctx, r.DeviceAddr, r.size(), r.Device, remote)
		}
		if err != nil {
			w.close()
			return nil, fmt.Errorf("pd: engine %q: register region %d (%d blocks of %d bytes at %#x): %w", cfg.EngineID, i, r.NumBlocks, r.BlockBytes, r.base(), err)
		}
	}
	return w, nil
}

// segment is the engine's segment name ("host:port").
func (w *worker) segment() string { return w.store.Name() }

// close stops the engine, then its handshake listener (the engine deletes
// its keys from the store on Close).
func (w *worker) close() error {
	err := w.eng.Close()
	if cerr := w.store.Close(); err == nil {
		err = cerr
	}
	return err
}
