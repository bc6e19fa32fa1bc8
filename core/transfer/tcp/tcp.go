// Package tcp is the transfer engine's TCP transport. It speaks upstream
// Mooncake's TCP data-plane framing, protocol v2 (acknowledged): a 24-byte
// little-endian header (uint64 size, uint64 addr, uint8 opcode with bit 0x80
// set, 7 bytes padding), then for WRITE the payload; the server answers with
// 8-byte status frames whose high 32 bits are the magic "MCTV" (0x4D435456)
// and whose low bits are 0 (OK) or 1 (address rejected). A READ response is a
// status frame followed, when OK, by the bytes. A WRITE is acknowledged only
// after its last byte was copied into the target's registered memory, so a
// COMPLETED write is visible to every later read.
//
// The server checks every request against the engine's registered buffers
// before touching memory; a rejected WRITE's payload is drained and
// discarded, so an out-of-range request changes nothing.
//
// Device (GPU) memory: when the target is a transfer.DeviceTarget and a
// range is one of its device buffers, the server moves the bytes through a
// per-connection host bounce buffer (deviceChunk bytes, off the Go heap,
// page-locked when the runtime can pin, made on first use): a WRITE's
// payload is received in chunks into the buffer's two halves in turn, each
// chunk's host-to-device copy running while the next chunk (of the same
// request or the next one) is received, one copy at a time so they land in
// request order; the WRITE is acknowledged only after its last copy landed
// (by the copy's goroutine, so the peer gets it while the connection waits
// for input), and before anything after it is answered. A READ, after any
// copy in flight landed, is copied device to host into the halves in turn,
// each chunk sent while the next is copied out.
// A failed copy rejects the request (a READ whose first chunk already went
// out drops the connection instead, as does a v1 WRITE), as does a bounce
// buffer that cannot be allocated. Host ranges never take this path.
//
// A request is cut into slices (SliceSize, default 64 KiB as upstream) that
// are dealt over up to Stripe connections of a per-peer pool (opened
// lazily, at most MaxConnsPerPeer open, idle ones closed after IdleTimeout).
// Connections are multiplexed: one carries slices of any number of
// requests, up to Window of them in flight, and a request takes, in the
// order they were opened, connections with fewer than Window slices
// assigned, so concurrent small requests share a few connections. Each
// connection has a writer goroutine, which sends every queued frame the
// window allows in one vectored write, and a reader goroutine, which
// completes slices as status frames arrive. This needs no protocol
// extension: the server answers a connection's requests in order (ours
// and upstream's both serve one request after another), so the k-th
// status frame belongs to the k-th request sent, and a status frame with
// nothing in flight is a protocol error that drops the connection. On the
// server, headers are read through a small buffer, a WRITE's payload
// (beyond the bytes read ahead with its header), when at least 64 KiB and
// the CPU has streaming stores (amd64 with AVX), through a 64 KiB bounce
// buffer copied into registered memory with streaming stores, else
// straight into it (readv; small ones through the header buffer), the next
// header read in the same call as a payload's last bytes, and
// acknowledgements are batched: sent when the socket has nothing more to
// read, once they cover 256 KiB, before a WRITE lands in
// bytes a queued READ answer has yet to send (so a READ answers the bytes
// as they were before every later request on its connection), and when
// the connection ends (a peer that half-closes after its last request
// still gets every answer).
//
// A slice whose connection fails is resent on another connection, up to
// RetryCount attempts (upstream retries 9 times); then the request fails
// with the cause. An attempt is a slice that was sent, or queued on (or
// dealt to) a connection that never answered at all, so a target that
// closes every connection as it accepts it exhausts the retries; slices
// queued behind the window
// of a connection that worked are resent for free. Slices are idempotent
// (same bytes, same address). A refused slice fails its request only; the
// connection stays in use. A request whose context ends closes the
// connections holding its slices (only that guarantees nothing touches its
// buffer any more); other requests' slices on them are resent. A request
// never returns while one of its slices can still touch the caller's
// buffer.
//
// Concurrency: a Transport and its peers are safe for concurrent use; a
// peer's connections are shared by all its requests.
package tcp

import (
	"fmt"
	"net"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

const (
	headerLen   = 24
	statusLen   = 8
	protoV2     = 0x80
	statusMagic = uint64(0x4D435456) << 32
	statusOK    = 0
	statusRej   = 1
)

// deviceChunk caps a connection's bounce buffer for device memory.
const deviceChunk = 1 << 20

// Config configures a TCP transport. Zero values take the defaults.
type Config struct {
	// BindAddr is the listen address of the data plane; default
	// "127.0.0.1:0" (an ephemeral port on loopback). Upstream:
	// MC_TCP_BIND_ADDRESS.
	BindAddr string
	// Host is the address peers dial, published as ip_or_host_name; default
	// the host part of the bound address.
	Host string
	// MaxConnsPerPeer caps open connections to one peer; default 16.
	MaxConnsPerPeer int
	// MaxIdlePerPeer caps connections kept open per peer while carrying
	// nothing; the others are closed when the next request picks
	// connections. Default MaxConnsPerPeer (a lower cap closes and redials
	// connections between bursts).
	MaxIdlePerPeer int
	// IdleTimeout closes a pooled connection unused for this long; default 30 s.
	IdleTimeout time.Duration
	// SliceSize is the unit a request is cut into, in bytes; default 64 KiB
	// (upstream MC_TCP_SLICE_SIZE). A tail of at most SliceSize/4 is merged
	// into the previous slice (upstream MC_FRAGMENT_RATIO 4).
	SliceSize int
	// Stripe is how many connections one request's slices are spread over;
	// default 2.
	Stripe int
	// Window is how many slices one connection has in flight (sent, not yet
	// acknowledged, of any requests); default 8, at most 256. A request
	// prefers connections with fewer than Window slices assigned and opens
	// a new one when none has room.
	Window int
	// RetryCount is the attempts per slice before the request fails;
	// default 9 (upstream MC_RETRY_CNT). Each retry uses a fresh connection.
	RetryCount int
	// DialTimeout bounds connecting; default 5 s (upstream
	// MC_HANDSHAKE_CONNECT_TIMEOUT).
	DialTimeout time.Duration
}

// Transport is the TCP transport. Create with New; install into one engine.
type Transport struct {
	cfg Config
	srv transfer.ConnServer // data-plane listener and connection handlers
}

// New returns an unstarted TCP transport.
func New(cfg Config) *Transport {
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	if cfg.MaxConnsPerPeer <= 0 {
		cfg.MaxConnsPerPeer = 16
	}
	if cfg.MaxIdlePerPeer <= 0 {
		cfg.MaxIdlePerPeer = cfg.MaxConnsPerPeer
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.SliceSize <= 0 {
		cfg.SliceSize = 64 << 10
	}
	if cfg.Stripe <= 0 {
		cfg.Stripe = 2
	}
	if cfg.Window <= 0 {
		cfg.Window = 8
	}
	if cfg.Window > maxWindow {
		cfg.Window = maxWindow
	}
	if cfg.RetryCount <= 0 {
		cfg.RetryCount = 9
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	return &Transport{cfg: cfg}
}

// Protocol implements transfer.Transport ("tcp").
func (t *Transport) Protocol() string { return "tcp" }

// Listen implements transfer.Transport: binds BindAddr and serves requests
// against target. Errors: ErrClosed after Close; the listen error naming
// the address.
func (t *Transport) Listen(name string, target transfer.Target) error {
	if err := t.srv.Listen(t.cfg.BindAddr, func(c net.Conn) { serve(c, target) }); err != nil {
		return fmt.Errorf("tcp: segment %q: %w", name, err)
	}
	return nil
}

// Addr is the bound data-plane address (nil before Listen).
func (t *Transport) Addr() net.Addr { return t.srv.Addr() }

// Publish implements transfer.Transport: protocol "tcp", tcp_data_port,
// tcp_proto_version 2, and the host peers dial.
func (t *Transport) Publish(d *metadata.SegmentDesc, rpc *metadata.RPCMeta) {
	d.Protocol = "tcp"
	d.TCPProtoVersion = 2
	host, port := t.srv.Endpoint(t.cfg.Host)
	d.TCPDataPort, rpc.RPCPort = port, port
	rpc.IPOrHostName = host
}

// Close implements transfer.Transport: stops accepting, closes served
// connections and waits for their handlers. Peers dialled from this
// transport are closed by their owners (the engine).
func (t *Transport) Close() error { return t.srv.Close() }
