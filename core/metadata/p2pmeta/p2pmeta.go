package p2pmeta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// Sentinel errors of the package; match with errors.Is.
var (
	// ErrPeerKey is returned (wrapped, naming the key) by Put and Delete of a
	// key that belongs to another engine: in P2P mode nobody can write it.
	ErrPeerKey = errors.New("p2p: cannot write peer key")
	// ErrUnreachable is returned (wrapped, naming the address and carrying
	// the dial error) when a peer could not be connected to within the
	// connect timeout. When the peer actively refused the connection (nothing
	// listens there) the error also wraps metadata.ErrNotFound: no engine, so
	// no segment.
	ErrUnreachable = errors.New("p2p: peer unreachable")
	// ErrFrameTooLarge is returned (wrapped) by ReadFrame for a frame whose
	// length exceeds the limit.
	ErrFrameTooLarge = errors.New("p2p: handshake frame too large")
	// ErrBadFrame is returned (wrapped) by ReadFrame for an empty frame or an
	// unknown type byte, and by the client helpers for a reply of the wrong
	// type or a malformed reply.
	ErrBadFrame = errors.New("p2p: bad handshake frame")
	// ErrRejected is returned (wrapped, with the peer's message) when a peer
	// answered a Probe or Notify with something other than success.
	ErrRejected = errors.New("p2p: peer rejected request")
	// ErrClosed is returned (wrapped) by peer operations of a closed Store.
	ErrClosed = errors.New("p2p: store closed")
	// ErrInvalidOption is returned (wrapped) by Listen for a bad option.
	ErrInvalidOption = errors.New("p2p: invalid option")
)

// Upstream's RPC port range (MC_MIN_RPC_PORT, MC_MAX_RPC_PORT); pass it to
// WithPortRange to bind the way upstream does.
const (
	MinRPCPort = 15000
	MaxRPCPort = 17000
)

// Defaults of the options.
const (
	DefaultAddr           = "127.0.0.1:0"
	DefaultConnectTimeout = 5 * time.Second  // upstream MC_HANDSHAKE_CONNECT_TIMEOUT
	DefaultIOTimeout      = 60 * time.Second // upstream client SO_RCVTIMEO
	DefaultServerTimeout  = 5 * time.Second  // upstream server SO_RCVTIMEO
	// MaxQueuedNotifies bounds the notifications a Store holds until
	// Notifies drains them; a Notify beyond it is answered with an error.
	MaxQueuedNotifies = 1 << 16
)

// Option configures Listen, Probe and SendNotify.
type Option func(*options)

type options struct {
	portLo, portHi int
	host           string
	maxFrame       int
	connectTimeout time.Duration
	ioTimeout      time.Duration
	serverTimeout  time.Duration
	rand           *rand.Rand
}

func defaultOptions() options {
	return options{
		maxFrame:       DefaultMaxFrame,
		connectTimeout: DefaultConnectTimeout,
		ioTimeout:      DefaultIOTimeout,
		serverTimeout:  DefaultServerTimeout,
	}
}

// WithPortRange makes Listen bind a free port in [lo, hi], trying the ports
// in random order, instead of the port in addr (which must then be 0 or
// absent). Upstream binds in [MinRPCPort, MaxRPCPort]. Listen rejects a range
// outside 1..65535 or with lo > hi.
func WithPortRange(lo, hi int) Option {
	return func(o *options) { o.portLo, o.portHi = lo, hi }
}

// WithRand gives the source of the port order WithPortRange uses (default:
// a generator seeded from the clock).
func WithRand(r *rand.Rand) Option {
	return func(o *options) { o.rand = r }
}

// WithHost sets the host part of Name (default: the bound IP, or the first
// non-loopback IPv4 address of the host when bound to all interfaces).
func WithHost(host string) Option {
	return func(o *options) { o.host = host }
}

// WithMaxFrame sets the largest frame accepted, type byte included (default
// DefaultMaxFrame; upstream MC_HANDSHAKE_MAX_LENGTH). Listen rejects n
// outside [MinMaxFrame, MaxMaxFrame].
func WithMaxFrame(n int) Option {
	return func(o *options) { o.maxFrame = n }
}

// WithConnectTimeout bounds connecting to a peer (default
// DefaultConnectTimeout). It must be positive.
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) { o.connectTimeout = d }
}

// WithIOTimeout bounds one exchange with a peer once connected (default
// DefaultIOTimeout), in addition to the caller's ctx. It must be positive.
func WithIOTimeout(d time.Duration) Option {
	return func(o *options) { o.ioTimeout = d }
}

// WithServerTimeout bounds how long the listener waits for a request on an
// accepted connection (default DefaultServerTimeout). It must be positive.
func WithServerTimeout(d time.Duration) Option {
	return func(o *options) { o.serverTimeout = d }
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	switch {
	case o.maxFrame < MinMaxFrame || o.maxFrame > MaxMaxFrame:
		return o, fmt.Errorf("%w: max frame %d outside [%d, %d]", ErrInvalidOption, o.maxFrame, MinMaxFrame, MaxMaxFrame)
	case o.connectTimeout <= 0 || o.ioTimeout <= 0 || o.serverTimeout <= 0:
		return o, fmt.Errorf("%w: timeouts must be positive", ErrInvalidOption)
	case (o.portLo != 0 || o.portHi != 0) && (o.portLo < 1 || o.portHi > 65535 || o.portLo > o.portHi):
		return o, fmt.Errorf("%w: port range [%d, %d]", ErrInvalidOption, o.portLo, o.portHi)
	}
	return o, nil
}

// Notify is one notification received from a peer (upstream's
// NotifyDesc).
type Notify struct {
	Name string `json:"name"`
	Msg  string `json:"notify_msg"`
}

// Store is a metadata.Store for P2P handshake mode. See the package doc.
type Store struct {
	opts   options
	name   string // "<host>:<port>", the engine's segment name
	ln     net.Listener
	ctx    context.Context // cancelled by Close: aborts outbound exchanges
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop and connection handlers

	mu struct {
		sync.Mutex
		// own holds this engine's keys (its ram and rpc_meta keys, any
		// cluster) and their values, never mutated once stored.
		own map[string][]byte
		// descKey is the own ram key last Put; its value is what peers get
		// in a Metadata reply ("" or absent from own: none yet).
		descKey string
		// notifies queues received notifications until Notifies.
		notifies []Notify
		// conns are the accepted connections, closed by Close.
		conns  map[net.Conn]struct{}
		closed bool
	}
}

var _ metadata.Store = (*Store)(nil)

// Listen starts the handshake listener on addr (default DefaultAddr when
// empty) and returns the Store serving it. The engine using the Store must
// take Name as its segment name (transfer.Config.Name).
//
// Errors: ErrInvalidOption for a bad option or an addr that is not
// host:port; the listen error naming the address (with WithPortRange: when
// no port of the range was free).
func Listen(addr string, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := listen(addr, &o)
	if err != nil {
		return nil, err
	}
	tcpAddr, _ := ln.Addr().(*net.TCPAddr)
	host := o.host
	if host == "" {
		host = advertisedHost(tcpAddr.IP)
	}
	s := &Store{opts: o, name: net.JoinHostPort(host, strconv.Itoa(tcpAddr.Port)), ln: ln}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.own = map[string][]byte{}
	s.mu.conns = map[net.Conn]struct{}{}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func listen(addr string, o *options) (net.Listener, error) {
	if o.portLo == 0 {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("p2p: listen %s: %w", addr, err)
		}
		return ln, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %v", ErrInvalidOption, addr, err)
	}
	if port != "" && port != "0" {
		return nil, fmt.Errorf("%w: address %q has a port and a port range was given", ErrInvalidOption, addr)
	}
	r := o.rand
	if r == nil {
		seed := uint64(time.Now().UnixNano())
		r = rand.New(rand.NewPCG(seed, seed>>17^0x9e3779b97f4a7c15))
	}
	n := o.portHi - o.portLo + 1
	start := r.IntN(n)
	var lastErr error
	for i := range n {
		p := o.portLo + (start+i)%n
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("p2p: listen %s: no free port in [%d, %d]: %w", host, o.portLo, o.portHi, lastErr)
}

// advertisedHost is ip, or for an unspecified address the first
// non-loopback IPv4 address of this host (127.0.0.1 when there is none), as
// upstream publishes its first LAN address.
func advertisedHost(ip net.IP) string {
	if ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// Name is this engine's segment name, "<ip>:<port>" ("[<ipv6>]:<port>").
func (s *Store) Name() string { return s.name }

// Addr is the bound listen address.
func (s *Store) Addr() net.Addr { return s.ln.Addr() }

// Notifies returns the notifications received since the last call, oldest
// first, and empties the queue (upstream getNotifies).
func (s *Store) Notifies() []Notify {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.mu.notifies
	s.mu.notifies = nil
	return n
}

// Close stops the listener, closes accepted connections, aborts outbound
// exchanges in flight and waits for the handlers to return. Own keys stay
// readable and writable (an engine closed after its Store can still delete
// them); peer operations fail with ErrClosed. A second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	conns := s.mu.conns
	s.mu.conns = nil
	s.mu.Unlock()
	s.cancel()
	err := s.ln.Close()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return err
}

// keyKind classifies a key.
type keyKind int

const (
	kindSegment keyKind = iota + 1
	kindRPCMeta
)

// parseKey splits "mooncake/[<cluster>/]ram/<name>" or
// "mooncake/[<cluster>/]rpc_meta/<name>" into its kind and name. Errors wrap
// metadata.ErrInvalidKey.
func parseKey(op, key string) (keyKind, string, error) {
	if key == "" {
		return 0, "", fmt.Errorf("p2p: %s: empty key: %w", op, metadata.ErrInvalidKey)
	}
	rest, ok := strings.CutPrefix(key, metadata.KeyPrefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return 0, "", fmt.Errorf("p2p: %s %q: not a segment or rpc_meta key: %w", op, key, metadata.ErrInvalidKey)
	}
	dir, name := "/"+rest[:i+1], rest[i+1:]
	var kind keyKind
	switch {
	case strings.HasSuffix(dir, "/"+metadata.SegmentDir):
		kind = kindSegment
	case strings.HasSuffix(dir, "/"+metadata.RPCMetaDir):
		kind = kindRPCMeta
	default:
		return 0, "", fmt.Errorf("p2p: %s %q: not a segment or rpc_meta key: %w", op, key, metadata.ErrInvalidKey)
	}
	if _, _, err := SplitName(name); err != nil {
		return 0, "", fmt.Errorf("p2p: %s %q: %w", op, key, err)
	}
	return kind, name, nil
}

// SplitName splits a P2P segment name "host:port" ("[ipv6]:port") into its
// host (brackets removed) and port. Errors wrap metadata.ErrInvalidKey.
func SplitName(name string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(name)
	if err != nil {
		return "", 0, fmt.Errorf("segment name %q is not host:port (%v): %w", name, err, metadata.ErrInvalidKey)
	}
	n, perr := strconv.ParseUint(p, 10, 16)
	if h == "" || strings.ContainsAny(h, " \t\r\n/") || perr != nil || n == 0 {
		return "", 0, fmt.Errorf("segment name %q is not host:port: %w", name, metadata.ErrInvalidKey)
	}
	return h, int(n), nil
}

func checkCtx(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("p2p: %s %q: %w", op, key, err)
	}
	return nil
}

// Get returns the value under key. This engine's own keys are read from
// memory. For a peer's segment key it connects to the peer named in the key,
// sends this engine's descriptor in a Metadata frame and returns the peer's
// descriptor; for a peer's rpc_meta key it returns {"ip_or_host_name",
// "rpc_port"} derived from the name, without I/O. Nothing is cached.
//
// Errors: metadata.ErrInvalidKey for a key that is not a ram or rpc_meta key
// of a host:port name; metadata.ErrNotFound (naming the key) for an absent
// own key or a peer without a descriptor (or with nothing listening at its
// address); ErrUnreachable when the peer cannot be reached; ErrBadFrame for a
// malformed reply; ErrClosed after Close; ctx's error.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkCtx(ctx, "get", key); err != nil {
		return nil, err
	}
	kind, name, err := parseKey("get", key)
	if err != nil {
		return nil, err
	}
	if name == s.name {
		s.mu.Lock()
		v, ok := s.mu.own[key]
		s.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("p2p: get %q: %w", key, metadata.ErrNotFound)
		}
		return bytes.Clone(v), nil
	}
	host, port, _ := SplitName(name) // parseKey checked it
	if kind == kindRPCMeta {
		return json.Marshal(metadata.RPCMeta{IPOrHostName: host, RPCPort: port})
	}
	s.mu.Lock()
	closed := s.mu.closed
	desc := s.mu.own[s.mu.descKey]
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("p2p: get %q: %w", key, ErrClosed)
	}
	if len(desc) == 0 {
		desc = []byte("{}")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	reply, err := exchange(ctx, &s.opts, name, FrameMetadata, desc)
	if err != nil {
		if s.ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ErrClosed, err)
		}
		return nil, fmt.Errorf("p2p: get %q: %w", key, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(reply, &fields); err != nil {
		return nil, fmt.Errorf("p2p: get %q: %w: reply of %s is not a JSON object: %v", key, ErrBadFrame, name, err)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("p2p: get %q: peer %s has no segment descriptor: %w", key, name, metadata.ErrNotFound)
	}
	return bytes.TrimSpace(reply), nil
}

// Put stores value under one of this engine's own keys; it is served to
// peers when it is the segment key. Errors: metadata.ErrInvalidKey for a
// malformed key; ErrPeerKey for another engine's key; ctx's error.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	if err := checkCtx(ctx, "put", key); err != nil {
		return err
	}
	kind, name, err := parseKey("put", key)
	if err != nil {
		return err
	}
	if name != s.name {
		return fmt.Errorf("%w %q (this engine is %q)", ErrPeerKey, key, s.name)
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	s.mu.Lock()
	s.mu.own[key] = v
	if kind == kindSegment {
		s.mu.descKey = key
	}
	s.mu.Unlock()
	return nil
}

// Delete removes one of this engine's own keys; a deleted segment key is no
// longer served (peers get metadata.ErrNotFound). Errors:
// metadata.ErrNotFound for an absent key; metadata.ErrInvalidKey;
// ErrPeerKey for another engine's key; ctx's error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkCtx(ctx, "delete", key); err != nil {
		return err
	}
	_, name, err := parseKey("delete", key)
	if err != nil {
		return err
	}
	if name != s.name {
		return fmt.Errorf("%w %q (this engine is %q)", ErrPeerKey, key, s.name)
	}
	s.mu.Lock()
	_, ok := s.mu.own[key]
	delete(s.mu.own, key)
	if s.mu.descKey == key {
		s.mu.descKey = ""
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("p2p: delete %q: %w", key, metadata.ErrNotFound)
	}
	return nil
}

func (s *Store) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(c)
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// serve answers frames on one connection until EOF, an error, a malformed
// frame or the server timeout. Upstream peers send one frame per
// connection and close after the reply.
func (s *Store) serve(c net.Conn) {
	for {
		c.SetDeadline(time.Now().Add(s.opts.serverTimeout))
		typ, payload, err := ReadFrame(c, s.opts.maxFrame)
		if err != nil {
			return
		}
		reply, ok := s.handle(typ, payload)
		if !ok {
			return
		}
		if err := WriteFrame(c, typ, reply); err != nil {
			return
		}
	}
}

// handle computes the reply to one request; ok false closes the
// connection.
func (s *Store) handle(typ FrameType, payload []byte) (reply []byte, ok bool) {
	if !json.Valid(payload) {
		return nil, false
	}
	switch typ {
	case FrameConnection, FrameLegacy:
		return []byte(`{"reply_msg":"p2p: this endpoint does not set up RDMA connections"}`), true
	case FrameMetadata:
		// The sender's descriptor is not kept: the engine caches what it
		// fetches itself.
		s.mu.Lock()
		desc := s.mu.own[s.mu.descKey]
		s.mu.Unlock()
		if len(desc) == 0 {
			return []byte("{}"), true
		}
		return desc, true
	case FrameNotify:
		var n Notify
		if err := json.Unmarshal(payload, &n); err != nil {
			return nil, false
		}
		s.mu.Lock()
		full := len(s.mu.notifies) >= MaxQueuedNotifies
		if !full {
			s.mu.notifies = append(s.mu.notifies, n)
		}
		s.mu.Unlock()
		if full {
			return []byte(`{"notify_msg":"p2p: notify queue full"}`), true
		}
		return []byte(`{"notify_msg":"success"}`), true
	case FrameProbe:
		return []byte(`{"status":"success"}`), true
	}
	return nil, false
}

// exchange connects to addr, sends one frame of typ and returns the reply's
// payload (whitespace-trimmed). ctx, the connect timeout and the I/O
// timeout bound it.
func exchange(ctx context.Context, o *options, addr string, typ FrameType, payload []byte) ([]byte, error) {
	d := net.Dialer{Timeout: o.connectTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect %s: %w", addr, ctx.Err())
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w %s: nothing listens there (%w): %w", ErrUnreachable, addr, err, metadata.ErrNotFound)
		}
		return nil, fmt.Errorf("%w %s: %w", ErrUnreachable, addr, err)
	}
	defer c.Close()
	// ctx is honoured through AfterFunc rather than by copying its deadline,
	// so an exchange cut short by ctx always reports ctx's error.
	c.SetDeadline(time.Now().Add(o.ioTimeout))
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	rtyp, reply, err := func() (FrameType, []byte, error) {
		if err := WriteFrame(c, typ, payload); err != nil {
			return 0, nil, err
		}
		return ReadFrame(c, o.maxFrame)
	}()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s request to %s: %w", typ, addr, ctx.Err())
		}
		return nil, fmt.Errorf("%s request to %s: %w", typ, addr, err)
	}
	if rtyp != typ {
		return nil, fmt.Errorf("%w: %s request to %s answered with a %s frame", ErrBadFrame, typ, addr, rtyp)
	}
	return bytes.TrimSpace(reply), nil
}

// Probe checks that a handshake endpoint answers at addr ("host:port"), as
// upstream's send_probe. opts may set the connect and I/O timeouts and the
// frame limit. Errors: metadata.ErrInvalidKey for a malformed addr;
// ErrUnreachable; ErrRejected for a reply other than {"status":"success"};
// ErrBadFrame; ctx's error.
func Probe(ctx context.Context, addr string, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	if _, _, err := SplitName(addr); err != nil {
		return fmt.Errorf("p2p: probe: %w", err)
	}
	reply, err := exchange(ctx, &o, addr, FrameProbe, []byte("{}"))
	if err != nil {
		return fmt.Errorf("p2p: probe: %w", err)
	}
	var r struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(reply, &r); err != nil {
		return fmt.Errorf("p2p: probe %s: %w: %v", addr, ErrBadFrame, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("p2p: probe %s: %w: status %q", addr, ErrRejected, r.Status)
	}
	return nil
}

// SendNotify delivers the notification {name, msg} to the engine at addr
// ("host:port"), as upstream's sendNotifyByName; name is conventionally the
// sender's segment name. Errors: metadata.ErrInvalidKey for a malformed
// addr; ErrUnreachable; ErrRejected when the reply's notify_msg is not
// "success"; ErrBadFrame; ctx's error.
func SendNotify(ctx context.Context, addr, name, msg string, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	if _, _, err := SplitName(addr); err != nil {
		return fmt.Errorf("p2p: notify: %w", err)
	}
	payload, err := json.Marshal(Notify{Name: name, Msg: msg})
	if err != nil {
		return fmt.Errorf("p2p: notify %s: %w", addr, err)
	}
	reply, err := exchange(ctx, &o, addr, FrameNotify, payload)
	if err != nil {
		return fmt.Errorf("p2p: notify: %w", err)
	}
	var r Notify
	if err := json.Unmarshal(reply, &r); err != nil {
		return fmt.Errorf("p2p: notify %s: %w: %v", addr, ErrBadFrame, err)
	}
	if r.Msg != "success" {
		return fmt.Errorf("p2p: notify %s: %w: %q", addr, ErrRejected, r.Msg)
	}
	return nil
}
