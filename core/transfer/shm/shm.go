package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// Protocol is the name published in segment descriptors.
const Protocol = "shm"

// AddrPrefix prefixes the socket address published as rpc_meta's
// ip_or_host_name ("unix:@mooncake-shm-..." or "unix:/tmp/...sock").
const AddrPrefix = "unix:"

// Sentinel errors of this package; transfer's sentinels (ErrRejected,
// ErrClosed, ErrInvalidArgument, ErrUnsupported) are used where they apply.
var (
	// ErrPeerGone: the control connection to the target was lost (its
	// transport closed or it refused this process); the peer is unusable.
	ErrPeerGone = errors.New("shm: peer gone")
	// ErrProtocol: a malformed message or a reply that breaks the protocol's
	// guarantees (wrong size, missing or extra descriptor, bounds that do
	// not cover the request, a file that is not a sealed buffer).
	ErrProtocol = errors.New("shm: protocol error")
)

// FDSource is the optional interface a transfer.Target implements to be
// served by this transport: it finds the memory file behind a registered
// buffer.
type FDSource interface {
	// FDFor finds the remote-accessible buffer holding [addr, addr+length)
	// and returns a new close-on-exec descriptor of its memory file, owned
	// by the caller (memory.Region.DupFD), plus the buffer's address and
	// size. The file must be exactly the buffer: its byte 0 is base and it
	// holds size bytes. Errors: one wrapping transfer.ErrAddressNotRegistered
	// (or transfer.ErrInvalidArgument for length 0) when the range is not
	// inside one remote-accessible buffer; any other error when that buffer
	// has no memory file.
	FDFor(addr, length uint64) (fd int, base, size uint64, err error)
}

// Config configures a shm transport. Zero values take the defaults.
type Config struct {
	// SocketDir selects where Listen binds. "" (default): an abstract unix
	// socket "@mooncake-shm-<name>-<random>" (no file; vanishes with the
	// process). A directory, e.g. os.TempDir(): the socket file
	// "<dir>/mooncake-shm-<name>-<random>.sock", mode 0600 unless
	// AllowOtherUsers, removed by Close.
	SocketDir string
	// DialTimeout bounds connecting to a target's socket; default 5 s
	// (upstream MC_HANDSHAKE_CONNECT_TIMEOUT).
	DialTimeout time.Duration
	// AllowOtherUsers serves peers running under any user id. By default
	// only processes with this process's effective uid (SO_PEERCRED) are
	// served: a descriptor grants read-write access to a whole buffer.
	AllowOtherUsers bool
	// Rand supplies the socket name's random suffix; default
	// crypto/rand.Reader.
	Rand io.Reader
}

// Stats counts what the serving side did; see Transport.Stats.
type Stats struct {
	Accepted   uint64 // control connections served
	Refused    uint64 // connections closed at once: peer of another user
	FDRequests uint64 // descriptor requests answered
	FDsSent    uint64 // replies carrying a descriptor
}

// Transport is the shm transport. Create with New; install into one engine.
type Transport struct {
	cfg Config
	uid int // effective uid peers must share (unless AllowOtherUsers)

	accepted, refused, fdRequests, fdsSent atomic.Uint64

	mu struct {
		sync.Mutex
		ln     *net.UnixListener
		addr   string                     // bound socket address ("@..." or a path)
		conns  map[*net.UnixConn]struct{} // served, for Close
		closed bool
	}
	wg sync.WaitGroup // accept loop and connection handlers
}

// New returns an unstarted shm transport.
func New(cfg Config) *Transport {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	t := &Transport{cfg: cfg, uid: os.Geteuid()}
	t.mu.conns = map[*net.UnixConn]struct{}{}
	return t
}

// Protocol implements transfer.Transport ("shm").
func (t *Transport) Protocol() string { return Protocol }

// Listen implements transfer.Transport: binds the unix socket (see
// Config.SocketDir) and serves descriptor requests against target, which
// must implement FDSource. Errors: ErrUnsupported for a target without
// FDSource; ErrInvalidArgument when already listening or the socket path is
// too long; ErrClosed after Close; the bind error naming the address.
func (t *Transport) Listen(name string, target transfer.Target) error {
	src, ok := target.(FDSource)
	if !ok {
		return fmt.Errorf("%w: shm: target %T of segment %q cannot hand out memory files (no FDFor method)", transfer.ErrUnsupported, target, name)
	}
	addr, err := t.socketAddr(name)
	if err != nil {
		return err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: addr, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("shm: listen on %s for segment %q: %w", addr, name, err)
	}
	if !strings.HasPrefix(addr, "@") && !t.cfg.AllowOtherUsers {
		if err := os.Chmod(addr, 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("shm: restrict socket %s of segment %q: %w", addr, name, err)
		}
	}
	t.mu.Lock()
	switch {
	case t.mu.closed:
		t.mu.Unlock()
		ln.Close()
		return transfer.ErrClosed
	case t.mu.ln != nil:
		t.mu.Unlock()
		ln.Close()
		return fmt.Errorf("%w: shm: already listening on %s", transfer.ErrInvalidArgument, t.mu.addr)
	}
	t.mu.ln, t.mu.addr = ln, addr
	t.mu.Unlock()
	t.wg.Add(1)
	go t.accept(ln, src)
	return nil
}

// maxSocketPath is the room in sockaddr_un.sun_path, less the terminating
// NUL (or, for an abstract address, the leading one).
const maxSocketPath = 107

func (t *Transport) socketAddr(name string) (string, error) {
	var rnd [8]byte
	if _, err := io.ReadFull(t.cfg.Rand, rnd[:]); err != nil {
		return "", fmt.Errorf("shm: socket name for segment %q: %w", name, err)
	}
	base := "mooncake-shm-" + sanitize(name) + "-" + hex.EncodeToString(rnd[:])
	addr := "@" + base
	if t.cfg.SocketDir != "" {
		addr = filepath.Join(t.cfg.SocketDir, base+".sock")
	}
	if len(addr) > maxSocketPath {
		return "", fmt.Errorf("%w: shm: socket path %q is longer than %d bytes", transfer.ErrInvalidArgument, addr, maxSocketPath)
	}
	return addr, nil
}

// sanitize keeps a segment name readable in a socket name: at most 40
// bytes of [A-Za-z0-9._-], anything else becoming '_'.
func sanitize(name string) string {
	b := []byte(name)
	if len(b) > 40 {
		b = b[:40]
	}
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// Addr is the bound socket address ("@mooncake-shm-..." for an abstract
// socket, else a path), or "" before Listen.
func (t *Transport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.addr
}

// Stats returns the serving side's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		Accepted:   t.accepted.Load(),
		Refused:    t.refused.Load(),
		FDRequests: t.fdRequests.Load(),
		FDsSent:    t.fdsSent.Load(),
	}
}

// Publish implements transfer.Transport: protocol "shm"; the socket address
// goes into rpc_meta as ip_or_host_name "unix:<address>" with rpc_port 0
// (metadata.SegmentDesc has no field for it). Before Listen the address is
// left empty, which Dial refuses.
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) {
	d.Protocol = Protocol
	rpc.IPOrHostName = ""
	if a := t.Addr(); a != "" {
		rpc.IPOrHostName = AddrPrefix + a
	}
	rpc.RPCPort = 0
}

// Dial implements transfer.Transport: a peer for the segment whose socket is
// published in rpc.IPOrHostName. Nothing is opened until the first request.
// Errors: ErrInvalidArgument when the address lacks the "unix:" prefix;
// ErrUnsupported for a descriptor of another protocol.
func (t *Transport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	if d.Protocol != "" && d.Protocol != Protocol {
		return nil, fmt.Errorf("%w: shm: segment %q speaks %q", transfer.ErrUnsupported, d.Name, d.Protocol)
	}
	addr, ok := strings.CutPrefix(rpc.IPOrHostName, AddrPrefix)
	if !ok || addr == "" {
		return nil, fmt.Errorf("%w: shm: segment %q publishes no unix socket (ip_or_host_name %q)", transfer.ErrInvalidArgument, d.Name, rpc.IPOrHostName)
	}
	return newPeer(d.Name, addr, t.cfg.DialTimeout), nil
}

// Close implements transfer.Transport: stops accepting, closes served
// connections (their peers then fail with ErrPeerGone) and waits for the
// handlers. A second Close returns ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return transfer.ErrClosed
	}
	t.mu.closed = true
	ln := t.mu.ln
	conns := make([]*net.UnixConn, 0, len(t.mu.conns))
	for c := range t.mu.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	t.wg.Wait()
	return err
}

func (t *Transport) accept(ln *net.UnixListener, src FDSource) {
	defer t.wg.Done()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !t.cfg.AllowOtherUsers && !t.sameUser(c) {
			t.refused.Add(1)
			c.Close()
			continue
		}
		t.mu.Lock()
		if t.mu.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.mu.conns[c] = struct{}{}
		t.mu.Unlock()
		t.accepted.Add(1)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c, src)
			t.mu.Lock()
			delete(t.mu.conns, c)
			t.mu.Unlock()
			c.Close()
		}()
	}
}

// sameUser reports whether the connected process runs as t.uid.
func (t *Transport) sameUser(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == t.uid
}

// serve answers descriptor requests on one connection until EOF, an I/O
// error or a malformed request.
func (t *Transport) serve(c *net.UnixConn, src FDSource) {
	var in [msgLen + 1]byte // one spare byte: an oversized packet shows as n > msgLen
	var out [msgLen]byte
	for {
		// No oob buffer: descriptors a client might attach are discarded
		// (closed) by the kernel.
		n, _, flags, _, err := c.ReadMsgUnix(in[:], nil)
		if err != nil || flags&unix.MSG_TRUNC != 0 {
			return
		}
		req, err := decodeRequest(in[:n]) // n == 0 is EOF on a packet socket
		if err != nil {
			return
		}
		t.fdRequests.Add(1)
		resp := answer(src, req)
		resp.encode(&out)
		var oob []byte
		if resp.fd >= 0 {
			oob = unix.UnixRights(resp.fd)
			t.fdsSent.Add(1) // before the reply: the peer may act on it at once
		}
		_, _, err = c.WriteMsgUnix(out[:], oob, nil)
		if resp.fd >= 0 {
			unix.Close(resp.fd) // the kernel holds its own reference in flight
		}
		if err != nil {
			return
		}
	}
}

// answer resolves one request; a returned descriptor (status OK) is owned by
// the caller.
func answer(src FDSource, req request) response {
	resp := response{id: req.id, fd: -1}
	fd, base, size, err := src.FDFor(req.addr, req.length)
	if err != nil {
		resp.status = statusNotShared
		if errors.Is(err, transfer.ErrAddressNotRegistered) || errors.Is(err, transfer.ErrInvalidArgument) {
			resp.status = statusNotRegistered
		}
		return resp
	}
	// Defence in depth: whatever the target says, hand out only a file that
	// is exactly a buffer covering the request and cannot be resized.
	if !covers(base, size, req.addr, req.length) || size > math.MaxInt64 || sealedFile(fd, size, targetSeals) != nil {
		unix.Close(fd)
		resp.status = statusRefused
		return resp
	}
	resp.status, resp.base, resp.size, resp.fd = statusOK, base, size, fd
	return resp
}

// covers reports whether [addr, addr+n) lies inside [base, base+size),
// without overflow.
func covers(base, size, addr, n uint64) bool {
	return n > 0 && addr >= base && addr-base < size && n <= size-(addr-base)
}
