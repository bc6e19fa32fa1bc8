package engine

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/httpmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// callTimeout bounds the metadata and dial I/O of one C call (create,
// register, unregister, open segment). The HTTP client bounds each request
// to 3 s on its own (upstream's timeouts).
const callTimeout = 30 * time.Second

// teEngine is what an mc_te_engine_t handle refers to.
type teEngine struct {
	e    *transfer.Engine
	meta *httpmeta.Client
}

// newEngine is mc_te_create: it parses the metadata connection string, binds
// the tcp transport on host:port and starts the engine, which publishes its
// descriptor. host "" binds every interface.
func newEngine(connString, name, host string, port uint64) (*teEngine, error) {
	if connString == "" {
		return nil, fmt.Errorf("%w: metadata_conn_string is empty", cbridge.ErrInvalidArgument)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: local_server_name is empty", cbridge.ErrInvalidArgument)
	}
	if port > math.MaxUint16 {
		return nil, fmt.Errorf("%w: rpc_port %d is over 65535", cbridge.ErrInvalidArgument, port)
	}
	kind, _, err := metadata.ParseConnString(connString)
	if err != nil {
		return nil, err
	}
	switch kind {
	case metadata.KindHTTP:
	case metadata.KindP2P:
		return nil, fmt.Errorf("%w: metadata mode %s (descriptors exchanged peer to peer) is not implemented by mooncake-go yet; pass an HTTP metadata server URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one)",
			transfer.ErrUnsupported, metadata.P2PHandshake)
	default:
		return nil, fmt.Errorf("%w: %s metadata backend (%q) is not implemented by mooncake-go yet; pass an HTTP metadata server URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one)",
			transfer.ErrUnsupported, kind, connString)
	}
	client, err := httpmeta.NewClient(connString)
	if err != nil {
		return nil, err
	}
	cfg := tcp.Config{BindAddr: net.JoinHostPort(host, strconv.FormatUint(port, 10))}
	if host == "" {
		cfg.BindAddr = net.JoinHostPort("0.0.0.0", strconv.FormatUint(port, 10))
	} else if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		cfg.Host = host // publish the name as given, as upstream's ip_or_host_name
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	e, err := transfer.New(ctx, transfer.Config{
		Name:      name,
		Metadata:  cbridge.MetaStore{Inner: client},
		Transport: tcp.New(cfg),
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &teEngine{e: e, meta: client}, nil
}

// destroy is mc_te_destroy.
func (t *teEngine) destroy() error {
	err := t.e.Close()
	t.meta.Close()
	return err
}

// installTransport is mc_te_install_transport: tcp is always installed.
func (t *teEngine) installTransport(proto string) error {
	switch proto {
	case "":
		return fmt.Errorf("%w: proto is empty", cbridge.ErrInvalidArgument)
	case "tcp":
		return nil
	}
	return fmt.Errorf("%w: transport %q is not built into mooncake-go (only \"tcp\")", transfer.ErrUnsupported, proto)
}

// register is mc_te_register_local_memory.
func (t *teEngine) register(buf []byte, location string, remote bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return t.e.RegisterLocalMemory(ctx, buf, location, remote)
}

// unregister is mc_te_unregister_local_memory.
func (t *teEngine) unregister(addr uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return t.e.UnregisterLocalMemory(ctx, addr)
}

// openSegment is mc_te_open_segment.
func (t *teEngine) openSegment(name string) (int32, error) {
	if name == "" {
		return 0, fmt.Errorf("%w: segment name is empty", cbridge.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	id, err := t.e.OpenSegment(ctx, name)
	return int32(id), err
}

// closeSegment is mc_te_close_segment.
func (t *teEngine) closeSegment(id int32) error {
	return t.e.CloseSegment(transfer.SegmentID(id))
}

// allocateBatch is mc_te_allocate_batch.
func (t *teEngine) allocateBatch(size uint64) (uint64, error) {
	if size > math.MaxInt {
		return 0, fmt.Errorf("%w: batch_size %d is over %d", cbridge.ErrInvalidArgument, size, math.MaxInt)
	}
	id, err := t.e.AllocateBatch(int(size))
	return uint64(id), err
}

// submit is mc_te_submit.
func (t *teEngine) submit(batch uint64, reqs []transfer.Request) error {
	return t.e.Submit(transfer.BatchID(batch), reqs)
}

// status is mc_te_get_status.
func (t *teEngine) status(batch, task uint64) (transfer.TaskStatus, error) {
	if task > math.MaxInt {
		return transfer.TaskStatus{}, fmt.Errorf("%w: task_id %d was never submitted to batch %d", cbridge.ErrInvalidArgument, task, batch)
	}
	return t.e.Status(transfer.BatchID(batch), int(task))
}

// freeBatch is mc_te_free_batch.
func (t *teEngine) freeBatch(batch uint64) error {
	return t.e.FreeBatch(transfer.BatchID(batch))
}

// opcode converts a C opcode; anything but READ or WRITE becomes an opcode
// the engine rejects, so the request is queued FAILED (its task id stays).
func opcode(op int64) transfer.Opcode {
	switch op {
	case int64(transfer.Read):
		return transfer.Read
	case int64(transfer.Write):
		return transfer.Write
	}
	return transfer.Opcode(math.MaxUint8)
}
