package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/abi/cbridge"
	"github.com/mooncake-go/mooncake/connectors/poolclient"
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/metaopen"
	mcstore "github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
	"github.com/mooncake-go/mooncake/core/tlsconfig"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// MaxKeyLen is MC_STORE_MAX_KEY_LEN, the master's limit (store.MaxKeyLen).
const MaxKeyLen = mcstore.MaxKeyLen

// setupTimeout bounds mc_store_setup and the registration calls (metadata
// and master I/O). The data calls have no deadline of their own: every
// master RPC is bounded by the client (30 s) and every transfer by the
// engine.
const setupTimeout = 60 * time.Second

// envBindAddress is upstream's variable naming the address the TCP data
// plane listens on (read by poolclient.BindHost).
const envBindAddress = poolclient.EnvBindAddress

// setupArgs are mc_store_setup's arguments (upstream setup()).
type setupArgs struct {
	LocalHostname     string
	MetadataServer    string
	GlobalSegmentSize uint64
	LocalBufferSize   uint64
	Protocol          string
	DeviceName        string
	MasterAddr        string
}

// span is a buffer registered through mc_store_register_buffer.
type span struct{ addr, n uint64 }

// storeClient is what an mc_store_t handle refers to: a pool client and what
// it was built from.
type storeClient struct {
	c    *client.Client
	name string    // segment name
	meta io.Closer // the metadata client, closed after the pool client
	conn *grpc.ClientConn
	rpc  pb.MasterClient // queries the client has no method for (get_size)

	calls sync.WaitGroup // calls in flight; destroy waits for them
	mu    struct {
		sync.Mutex
		closed bool
		bufs   []span // caller buffers registered on this handle
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", cbridge.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", transfer.ErrUnsupported, fmt.Sprintf(format, args...))
}

// checkKey validates a key: any bytes, non-empty (MC_ERR_INVALID_ARGUMENT),
// at most MaxKeyLen bytes (INVALID_KEY).
func checkKey(key string) error {
	if key == "" {
		return invalid("key is empty (a key is 1 to %d bytes)", MaxKeyLen)
	}
	if len(key) > MaxKeyLen {
		return mcstore.Errorf(mcstore.InvalidKey, "key of %d bytes is longer than MC_STORE_MAX_KEY_LEN (%d)", len(key), MaxKeyLen)
	}
	return nil
}

// listenAddr derives where the data plane listens and what it publishes
// from local_hostname ("host" or "host:port", host an IP address or a
// host name, see validHost; anything else is an invalid argument): bind host
// (poolclient.BindHost: MC_TCP_BIND_ADDRESS, else host when it is an IP
// literal, else every interface), port (given, or 0), and the host peers
// dial (host, unless it is an unspecified IP).
func listenAddr(localHostname string) (bindHost string, port int, publish string, err error) {
	host, p, splitErr := net.SplitHostPort(localHostname)
	if splitErr != nil {
		if strings.Contains(localHostname, ":") && net.ParseIP(localHostname) == nil {
			return "", 0, "", invalid("local_hostname %q is neither host nor host:port: %v", localHostname, splitErr)
		}
		host, p = localHostname, ""
	}
	if host == "" {
		return "", 0, "", invalid("local_hostname %q has no host", localHostname)
	}
	if !validHost(host) {
		return "", 0, "", invalid("local_hostname %q: %q is neither an IP address nor a host name (letters, digits, '-', '_', '.')", localHostname, host)
	}
	if p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", 0, "", invalid("local_hostname %q: port %q is not in 0..65535", localHostname, p)
		}
		port = int(n)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		publish = host
	}
	return poolclient.BindHost(host, cbridge.Environ()), port, publish, nil
}

// validHost reports whether host is an IP address (IPv6 with a zone
// included) or a host name of letters, digits, '-', '_' and '.': what
// peers can dial once it is published as ip_or_host_name.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, c := range []byte(host) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// openMetadata connects to metadata_server (metaopen.Open, with opts);
// etcd failures carry MC_ERR_METADATA.
func openMetadata(ctx context.Context, conn, bindHost, publish string, opts ...metaopen.Option) (meta metadata.Store, closer io.Closer, name string, err error) {
	meta, closer, name, err = metaopen.Open(ctx, conn, bindHost, publish, opts...)
	if err != nil {
		if kind, _, perr := metadata.ParseConnString(strings.ReplaceAll(conn, ";", ",")); perr == nil && kind == metadata.KindEtcd {
			err = cbridge.MetadataError(err)
		}
		return nil, nil, "", err
	}
	return meta, closer, name, nil
}

// newStore is mc_store_setup.
func newStore(a setupArgs) (s *storeClient, err error) {
	switch {
	case a.LocalHostname == "":
		return nil, invalid("local_hostname is empty")
	case a.MetadataServer == "":
		return nil, invalid("metadata_server is empty")
	case a.MasterAddr == "":
		return nil, invalid("master_server_addr is empty")
	case a.GlobalSegmentSize > math.MaxInt:
		return nil, invalid("global_segment_size %d is too large", a.GlobalSegmentSize)
	case a.LocalBufferSize > math.MaxInt:
		return nil, invalid("local_buffer_size %d is too large", a.LocalBufferSize)
	}
	switch a.Protocol {
	case "", "tcp":
	default:
		return nil, unsupported("protocol %q is not built into mooncake-go (only \"tcp\")", a.Protocol)
	}
	if strings.Contains(a.MasterAddr, "://") {
		return nil, unsupported("master_server_addr %q: master discovery through etcd (HA) is not implemented by mooncake-go yet; pass the leader's host:port", a.MasterAddr)
	}
	if h, p, err := net.SplitHostPort(a.MasterAddr); err != nil || h == "" || p == "" {
		return nil, invalid("master_server_addr %q is not host:port", a.MasterAddr)
	}
	bindHost, port, publish, err := listenAddr(a.LocalHostname)
	if err != nil {
		return nil, err
	}
	poolTLS, etcdTLS, err := tlsFromEnv(cbridge.Environ())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	meta, closer, name, err := openMetadata(ctx, a.MetadataServer, bindHost, publish, metaopen.WithTLS(poolTLS), metaopen.WithEtcdTLS(etcdTLS))
	if err != nil {
		return nil, err
	}
	s = &storeClient{meta: closer}
	started := s // s is nil by the time an error return runs the defer
	defer func() {
		if err != nil {
			started.teardown()
		}
	}()
	if port == 0 {
		if port, err = pickPort(bindHost); err != nil {
			return nil, err
		}
	}
	if name == "" {
		name = net.JoinHostPort(publishOr(publish, bindHost), strconv.Itoa(port))
	}
	s.name = name
	cfg := tcp.Config{BindAddr: net.JoinHostPort(bindHost, strconv.Itoa(port)), Host: publish}
	// Same-host peers (a mooncake node, another client's segment) over
	// shared memory, the rest over tcp, as connectors/poolclient; only tcp
	// with upstream's MC_FORCE_TCP.
	var local transfer.Transport
	if !forceTCP(cbridge.Environ()) {
		local = shm.New(shm.Config{})
	}
	s.c, err = client.New(ctx, client.Config{
		LocalHostname:     name,
		MasterAddr:        a.MasterAddr,
		Metadata:          cbridge.MetaStore{Inner: meta},
		Transport:         tcp.New(cfg),
		Local:             local,
		GlobalSegmentSize: a.GlobalSegmentSize,
		LocalBufferSize:   a.LocalBufferSize,
		TLS:               poolTLS,
	})
	if err != nil {
		return nil, err
	}
	s.conn, err = grpc.NewClient(a.MasterAddr, tlsconfig.DialOptions(poolTLS)...)
	if err != nil {
		return nil, mcstore.Errorf(mcstore.RPCFail, "master %s: %v", a.MasterAddr, err)
	}
	s.rpc = pb.NewMasterClient(s.conn)
	return s, nil
}

// tlsFromEnv loads the TLS identities the environment names (upstream's
// setup() has no TLS arguments): MC_TLS_CA_FILE, MC_TLS_CERT_FILE,
// MC_TLS_KEY_FILE and MC_TLS_SERVER_NAME for mutual TLS to the master and
// its https:// metadata server, MC_ETCD_TLS_* for an etcd metadata_server
// (tlsconfig). None set: plaintext. Errors: MC_ERR_INVALID_ARGUMENT
// naming the variable and the file.
func tlsFromEnv(env map[string]string) (poolTLS, etcdTLS *tlsconfig.Config, err error) {
	get := func(k string) string { return env[k] }
	if poolTLS, err = tlsconfig.Load(tlsconfig.FromEnv(get)); err != nil {
		return nil, nil, fmt.Errorf("%w: %s/%s/%s: %w", cbridge.ErrInvalidArgument, tlsconfig.EnvCA, tlsconfig.EnvCert, tlsconfig.EnvKey, err)
	}
	if f := tlsconfig.FromEnv(get); f.ServerName != "" && poolTLS == nil {
		return nil, nil, invalid("%s=%q without %s, %s and %s", tlsconfig.EnvServerName, f.ServerName, tlsconfig.EnvCA, tlsconfig.EnvCert, tlsconfig.EnvKey)
	}
	if etcdTLS, err = tlsconfig.LoadClient(tlsconfig.EtcdFromEnv(get)); err != nil {
		return nil, nil, fmt.Errorf("%w: %s/%s/%s: %w", cbridge.ErrInvalidArgument, tlsconfig.EnvEtcdCA, tlsconfig.EnvEtcdCert, tlsconfig.EnvEtcdKey, err)
	}
	return poolTLS, etcdTLS, nil
}

func publishOr(publish, bindHost string) string {
	if publish != "" {
		return publish
	}
	return bindHost
}

// teardown releases what newStore built, in dependency order.
func (s *storeClient) teardown() error {
	var err error
	if s.c != nil {
		err = s.c.Close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.meta != nil {
		s.meta.Close()
	}
	return err
}

// acquire registers a call in flight; it fails once destroy began.
func (s *storeClient) acquire() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return fmt.Errorf("%w: the store is being destroyed", transfer.ErrClosed)
	}
	s.calls.Add(1)
	return nil
}

func (s *storeClient) release() { s.calls.Done() }

// destroy is mc_store_destroy: it waits for the calls in flight, then
// closes the client (unmounting its segment) and the rest.
func (s *storeClient) destroy() error {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.calls.Wait()
	return s.teardown()
}

// zeroCopy validates [addr, addr+n) for a zero-copy call: a valid range
// (MC_ERR_INVALID_ARGUMENT) inside one buffer registered on this handle
// (MC_ERR_ADDRESS_NOT_REGISTERED), and returns it as a slice.
func (s *storeClient) zeroCopy(what string, addr, n uintptr) ([]byte, error) {
	if err := cbridge.CheckRange(what, addr, n); err != nil {
		return nil, err
	}
	a, end := uint64(addr), uint64(addr)+uint64(n)
	s.mu.Lock()
	ok := false
	for _, b := range s.mu.bufs {
		if a >= b.addr && end <= b.addr+b.n {
			ok = true
			break
		}
	}
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s [%#x, +%d) is not inside a buffer registered with mc_store_register_buffer", transfer.ErrAddressNotRegistered, what, a, uint64(n))
	}
	return cbridge.ForeignBytes(what, addr, n)
}

// register is mc_store_register_buffer.
func (s *storeClient) register(buf []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := s.c.RegisterBuffer(ctx, buf); err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.bufs = append(s.mu.bufs, span{addr: memory.AddrOf(buf), n: uint64(len(buf))})
	s.mu.Unlock()
	return nil
}

// unregister is mc_store_unregister_buffer.
func (s *storeClient) unregister(addr uint64) error {
	s.mu.Lock()
	i := -1
	for j, b := range s.mu.bufs {
		if b.addr == addr {
			i = j
			break
		}
	}
	s.mu.Unlock()
	if i < 0 {
		return fmt.Errorf("%w: no buffer registered at %#x", transfer.ErrAddressNotRegistered, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := s.c.Engine().UnregisterLocalMemory(ctx, addr); err != nil {
		return err
	}
	s.mu.Lock()
	for j, b := range s.mu.bufs {
		if b.addr == addr {
			s.mu.bufs = append(s.mu.bufs[:j], s.mu.bufs[j+1:]...)
			break
		}
	}
	s.mu.Unlock()
	return nil
}

// put is mc_store_put.
func (s *storeClient) put(key string, value []byte) error {
	return s.c.Put(context.Background(), key, value, nil)
}

// get is mc_store_get: the value is copied into buf; BUFFER_OVERFLOW when it
// does not fit.
func (s *storeClient) get(key string, buf []byte) (int, error) {
	v, err := s.c.Get(context.Background(), key)
	if err != nil {
		return 0, err
	}
	if len(v) > len(buf) {
		return 0, mcstore.Errorf(mcstore.BufferOverflow, "key %q: value is %d bytes, buffer %d", key, len(v), len(buf))
	}
	return copy(buf, v), nil
}

// batchPutFrom is mc_store_batch_put_from (and put_from, n = 1) over
// validated keys and registered buffers.
func (s *storeClient) batchPutFrom(keys []string, bufs [][]byte) []error {
	return s.c.BatchPutFrom(context.Background(), keys, bufs, nil)
}

// batchGetInto is mc_store_batch_get_into (and get_into).
func (s *storeClient) batchGetInto(keys []string, bufs [][]byte) ([]int, []error) {
	return s.c.BatchGetInto(context.Background(), keys, bufs)
}

// batchIsExist is mc_store_batch_is_exist (and is_exist).
func (s *storeClient) batchIsExist(keys []string) ([]bool, error) {
	return s.c.BatchIsExist(context.Background(), keys)
}

// remove is mc_store_remove.
func (s *storeClient) remove(key string, force bool) error {
	return s.c.Remove(context.Background(), key, force)
}

// getSize is mc_store_get_size: the size of the first replica, from the
// master's replica list (which grants a lease, as upstream's get_size).
func (s *storeClient) getSize(key string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.rpc.BatchGetReplicaList(ctx, &pb.KeysRequest{ClientId: s.c.ID(), Keys: [][]byte{[]byte(key)}})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return 0, mcstore.Errorf(mcstore.RPCTimeout, "get replica list: %v", err)
		}
		return 0, mcstore.Errorf(mcstore.RPCFail, "get replica list: %v", err)
	}
	if len(r.Results) != 1 {
		return 0, mcstore.Errorf(mcstore.RPCFail, "get replica list: %d results for 1 key", len(r.Results))
	}
	res := r.Results[0]
	if c := res.GetStatus().GetCode(); c != 0 {
		return 0, &mcstore.Error{Code: mcstore.ErrorCode(c), Msg: res.GetStatus().GetMessage()}
	}
	if len(res.Replicas) == 0 {
		return 0, mcstore.Errorf(mcstore.InvalidReplica, "key %q has no replica", key)
	}
	return res.Replicas[0].Size, nil
}
