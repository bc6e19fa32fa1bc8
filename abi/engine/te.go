package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// callTimeout bounds the metadata and dial I/O of one C call (create,
// register, unregister, open segment, probe, notify). The HTTP client
// bounds each request to 3 s on its own (upstream's timeouts).
const callTimeout = 30 * time.Second

// HandshakeDir is the metadata sub-directory under which an engine that
// uses a metadata service (HTTP or etcd) publishes the address of its
// handshake endpoint: "mooncake/[<cluster>/]mc_handshake/<segment name>"
// holds {"ip_or_host_name": host, "rpc_port": port}. It is a Mooncake-Go
// key (upstream keeps that address in rpc_meta, which our transports use
// for their data plane); in P2P handshake mode the segment name is itself
// the handshake address and nothing is published.
const HandshakeDir = "mc_handshake/"

// handshakeKey is the key of server's handshake address.
func handshakeKey(cluster, server string) string {
	return metadata.ClusterPrefix(cluster) + HandshakeDir + server
}

// teEngine is what an mc_te_engine_t handle refers to: the engine, the
// metadata service it publishes to, and its handshake endpoint (upstream's
// handshake daemon: it answers Probe and Notify frames and queues the
// notifications peers send).
type teEngine struct {
	e    *transfer.Engine
	meta metadata.Store // the service (cbridge.MetaStore-wrapped)
	// metaCloser releases the metadata connection (for P2P mode it is hs).
	metaCloser io.Closer
	p2p        bool             // P2PHANDSHAKE mode: hs is also the metadata store
	hs         *p2pmeta.Store   // handshake endpoint; its port is the rpc port
	tcp        *tcp.Transport   // the data plane
	name       string           // segment name (in P2P mode hs.Name())
	hsKey      string           // handshake key published ("" in P2P mode)
	hsAddr     metadata.RPCMeta // what hsKey holds
}

// engineArgs are mc_te_create's arguments.
type engineArgs struct {
	Conn, Name, Host string
	Port             uint64
	Env              map[string]string // process environment (MC_TCP_BIND_ADDRESS); nil: os.Getenv
}

// newEngine is mc_te_create: it opens the metadata service the connection
// string names (metaopen.Open: HTTP, etcd or P2PHANDSHAKE), binds the tcp
// transport on the bind host (poolclient.BindHost: MC_TCP_BIND_ADDRESS,
// else host when it is an IP literal, else every interface) and port,
// starts the handshake endpoint on the same host, and starts the engine,
// which publishes its descriptor.
//
// In P2P mode the segment name is "<host>:<handshake port>" whatever name
// says, as upstream (get it back with localName).
//
// With MC_TLS_CA_FILE, MC_TLS_CERT_FILE and MC_TLS_KEY_FILE in a.Env, an
// HTTP metadata server is reached over mutual TLS (the connection string
// must then be https://; P2PHANDSHAKE is refused as unsupported), and
// with MC_ETCD_TLS_* an etcd one over TLS; a bad file is
// MC_ERR_INVALID_ARGUMENT naming it.
func newEngine(a engineArgs) (t *teEngine, err error) {
	switch {
	case a.Conn == "":
		return nil, fmt.Errorf("%w: metadata_conn_string is empty", cbridge.ErrInvalidArgument)
	case a.Name == "":
		return nil, fmt.Errorf("%w: local_server_name is empty", cbridge.ErrInvalidArgument)
	case a.Port > math.MaxUint16:
		return nil, fmt.Errorf("%w: rpc_port %d is over 65535", cbridge.ErrInvalidArgument, a.Port)
	}
	conn := a.Conn
	if !strings.HasPrefix(conn, "http://") && !strings.HasPrefix(conn, "https://") {
		conn = strings.ReplaceAll(conn, ";", ",")
	}
	kind, _, err := metadata.ParseConnString(conn)
	if err != nil {
		return nil, err
	}
	if kind == metadata.KindRedis {
		return nil, fmt.Errorf("%w: redis metadata backend (%q) is not implemented by mooncake-go; pass an HTTP metadata server URL such as http://127.0.0.1:8080/metadata (`mooncake master` serves one), an etcd endpoint list or P2PHANDSHAKE",
			transfer.ErrUnsupported, a.Conn)
	}
	host := a.Host
	bind := poolclient.BindHost(host, a.Env)
	publish := host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		publish = ""
	}
	// Upstream's mc_te_create has no TLS arguments: MC_TLS_*_FILE name
	// the identity for a master's https:// metadata server, MC_ETCD_TLS_*
	// etcd's. The data plane stays plaintext.
	getenv := os.Getenv
	if a.Env != nil {
		getenv = func(k string) string { return a.Env[k] }
	}
	tc, err := tlsconfig.Load(tlsconfig.FromEnv(getenv))
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s/%s: %w", cbridge.ErrInvalidArgument, tlsconfig.EnvCA, tlsconfig.EnvCert, tlsconfig.EnvKey, err)
	}
	etc, err := tlsconfig.LoadClient(tlsconfig.EtcdFromEnv(getenv))
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s/%s: %w", cbridge.ErrInvalidArgument, tlsconfig.EnvEtcdCA, tlsconfig.EnvEtcdCert, tlsconfig.EnvEtcdKey, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	meta, closer, p2pName, err := metaopen.Open(ctx, conn, bind, publish, metaopen.WithTLS(tc), metaopen.WithEtcdTLS(etc))
	if err != nil {
		if kind == metadata.KindEtcd {
			err = cbridge.MetadataError(err)
		}
		return nil, err
	}
	t = &teEngine{meta: cbridge.MetaStore{Inner: meta}, metaCloser: closer, name: a.Name}
	started := t // t is nil by the time an error return runs the defer
	defer func() {
		if err != nil {
			started.teardown()
		}
	}()
	if p2pName != "" {
		t.p2p, t.hs, t.name = true, meta.(*p2pmeta.Store), p2pName
	} else {
		var opts []p2pmeta.Option
		if publish != "" {
			opts = append(opts, p2pmeta.WithHost(publish))
		}
		if t.hs, err = p2pmeta.Listen(net.JoinHostPort(bind, "0"), opts...); err != nil {
			return nil, err
		}
	}
	cfg := tcp.Config{BindAddr: net.JoinHostPort(bind, strconv.FormatUint(a.Port, 10)), Host: publish}
	t.tcp = tcp.New(cfg)
	t.e, err = transfer.New(ctx, transfer.Config{Name: t.name, Metadata: t.meta, Transport: t.tcp})
	if err != nil {
		return nil, err
	}
	if !t.p2p {
		h, p, _ := p2pmeta.SplitName(t.hs.Name())
		t.hsAddr = metadata.RPCMeta{IPOrHostName: h, RPCPort: p}
		v, _ := json.Marshal(t.hsAddr)
		t.hsKey = handshakeKey("", t.name)
		if err := t.meta.Put(ctx, t.hsKey, v); err != nil {
			t.hsKey = ""
			return nil, fmt.Errorf("transfer: engine %q: publish handshake address: %w", t.name, err)
		}
	}
	return t, nil
}

// teardown releases what newEngine built, in dependency order; errors of
// the engine's Close are returned.
func (t *teEngine) teardown() error {
	var err error
	if t.e != nil {
		err = t.e.Close()
	}
	if t.hsKey != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = t.meta.Delete(ctx, t.hsKey)
		cancel()
	}
	if t.hs != nil && !t.p2p {
		t.hs.Close()
	}
	if t.metaCloser != nil {
		t.metaCloser.Close()
	}
	return err
}

// destroy is mc_te_destroy.
func (t *teEngine) destroy() error { return t.teardown() }

// localName is mc_te_get_local_name.
func (t *teEngine) localName() string { return t.name }

// rpcPort is mc_te_get_rpc_port: the handshake endpoint's port (in P2P
// mode the port of the segment name), as upstream's getRpcPort.
func (t *teEngine) rpcPort() int {
	_, p, _ := p2pmeta.SplitName(t.hs.Name())
	return p
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

// refreshSegment is mc_te_refresh_segment: the local segment has nothing
// to re-read.
func (t *teEngine) refreshSegment(id int32) error {
	if transfer.SegmentID(id) == transfer.LocalSegment {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return t.e.RefreshSegment(ctx, transfer.SegmentID(id))
}

// segmentBuffers is mc_te_get_segment_buffers: the buffers of segment id as
// peers see them, sorted by address for the local segment (its
// remote-accessible registrations), in the order of the descriptor last
// read for a peer.
func (t *teEngine) segmentBuffers(id int32) ([]metadata.BufferDesc, error) {
	if transfer.SegmentID(id) == transfer.LocalSegment {
		var out []metadata.BufferDesc
		for _, b := range t.e.Registry().Buffers() {
			if b.Remote {
				out = append(out, metadata.BufferDesc{Name: b.Location, Addr: b.Addr, Length: b.Length})
			}
		}
		return out, nil
	}
	d, err := t.e.SegmentDesc(transfer.SegmentID(id))
	if err != nil {
		return nil, err
	}
	return d.Buffers, nil
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

// batchStatus is mc_te_wait_batch: it waits up to timeout for every
// request of batch to finish and folds their states into one, as
// upstream's getBatchTransferStatus: FAILED if any failed (Err is the
// first failure, naming its task), else WAITING if any is still running,
// else COMPLETED (an empty batch is COMPLETED); TransferredBytes is the
// sum over the requests.
func (t *teEngine) batchStatus(batch uint64, timeout time.Duration) (transfer.TaskStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sts, err := t.e.Wait(ctx, transfer.BatchID(batch))
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return transfer.TaskStatus{}, err
	}
	out := transfer.TaskStatus{Status: transfer.StatusCompleted}
	for i, s := range sts {
		out.TransferredBytes += s.TransferredBytes
		switch {
		case s.Status == transfer.StatusFailed && out.Status != transfer.StatusFailed:
			out.Status, out.Err = transfer.StatusFailed, fmt.Errorf("task %d: %w", i, s.Err)
		case s.Status == transfer.StatusWaiting && out.Status == transfer.StatusCompleted:
			out.Status = transfer.StatusWaiting
		}
	}
	return out, nil
}

// freeBatch is mc_te_free_batch.
func (t *teEngine) freeBatch(batch uint64) error {
	return t.e.FreeBatch(transfer.BatchID(batch))
}

// handshakeAddr is the handshake endpoint of the engine named name: the
// name itself in P2P mode, else the address it published under
// handshakeKey. Errors: metadata.ErrNotFound (wrapped with
// transfer.ErrSegmentNotFound) when nothing is published; the metadata
// service's.
func (t *teEngine) handshakeAddr(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: segment name is empty", cbridge.ErrInvalidArgument)
	}
	if t.p2p {
		if _, _, err := p2pmeta.SplitName(name); err != nil {
			return "", fmt.Errorf("%w: %q is not a P2P segment name (host:port): %v", transfer.ErrSegmentNotFound, name, err)
		}
		return name, nil
	}
	v, err := t.meta.Get(ctx, handshakeKey("", name))
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return "", fmt.Errorf("%w: %q has published no handshake address (not running, or not a mooncake-go engine): %v", transfer.ErrSegmentNotFound, name, err)
		}
		return "", err
	}
	var r metadata.RPCMeta
	if err := json.Unmarshal(v, &r); err != nil || r.IPOrHostName == "" || r.RPCPort <= 0 {
		return "", fmt.Errorf("%w: handshake address of %q is malformed: %q", cbridge.ErrMetadata, name, v)
	}
	return net.JoinHostPort(r.IPOrHostName, strconv.Itoa(r.RPCPort)), nil
}

// peerError names the peer in a handshake exchange failure; a peer whose
// address refuses connections is gone (MC_ERR_NOT_FOUND, as an unpublished
// one). Other failures keep their cause (cbridge maps an unreachable peer
// to MC_ERR_SOCKET, a refused request to MC_ERR_REJECT_HANDSHAKE).
func peerError(name string, err error) error {
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return fmt.Errorf("%w: %q: %v", transfer.ErrSegmentNotFound, name, err)
	case err != nil:
		return fmt.Errorf("engine %q: %w", name, err)
	}
	return nil
}

// probe is mc_te_probe: a Probe frame to name's handshake endpoint, as
// upstream's sendProbe.
func (t *teEngine) probe(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	addr, err := t.handshakeAddr(ctx, name)
	if err != nil {
		return err
	}
	return peerError(name, p2pmeta.Probe(ctx, addr))
}

// sendNotify is mc_te_send_notify: it delivers {notifyName, msg} to the
// engine name, which queues it for its mc_te_get_notifies (upstream's
// sendNotifyByName).
func (t *teEngine) sendNotify(name, notifyName, msg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	addr, err := t.handshakeAddr(ctx, name)
	if err != nil {
		return err
	}
	return peerError(name, p2pmeta.SendNotify(ctx, addr, notifyName, msg))
}

// notifies is mc_te_get_notifies: the notifications received since the
// last call, oldest first, as a JSON array of {"name", "notify_msg"}
// (never null).
func (t *teEngine) notifies() []byte {
	n := t.hs.Notifies()
	if n == nil {
		n = []p2pmeta.Notify{}
	}
	b, _ := json.Marshal(n) // plain strings: cannot fail
	return b
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
