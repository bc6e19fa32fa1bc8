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
// per-connection host bounce buffer (at most deviceChunk bytes): a WRITE's
// payload is received chunk by chunk and copied host to device, and
// acknowledged only after the last copy landed; a READ is copied device to
// host chunk by chunk and sent. A failed copy rejects the request (a READ
// whose first chunk already went out drops the connection instead). Host
// ranges never take this path.
//
// A request is cut into slices (SliceSize, default 64 KiB as upstream) that
// are striped over up to Stripe connections of a per-peer pool (opened
// lazily, at most MaxConnsPerPeer open, idle ones closed after IdleTimeout);
// each connection keeps up to Window slices in flight, so acknowledgements
// do not stall the stream. A slice whose connection fails is resent on a
// fresh connection, up to RetryCount attempts (upstream retries 9 times);
// then the request fails with the cause. Slices are idempotent (same bytes,
// same address). A request never returns while one of its slices can still
// touch the caller's buffer.
//
// Concurrency: a Transport and its peers are safe for concurrent use; a
// connection belongs to one request at a time.
package tcp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
)

const (
	// serverReadBuffer is the per-connection read buffer of the server.
	serverReadBuffer = 256 << 10
	headerLen        = 24
	statusLen        = 8
	protoV2          = 0x80
	statusMagic      = uint64(0x4D435456) << 32
	statusOK         = 0
	statusRej        = 1
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
	// MaxIdlePerPeer caps idle pooled connections kept per peer; default 8.
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
	// acknowledged); default 8.
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
		cfg.MaxIdlePerPeer = 8
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

// serve handles requests on one connection until EOF or an error. Reads go
// through a buffer, so several small frames (and the head of a payload)
// cost one system call; acknowledgements are buffered and flushed whenever
// no further request bytes are already buffered (the peer may be waiting
// for them), and always before a READ response.
func serve(c net.Conn, target transfer.Target) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(c, serverReadBuffer)
	bw := bufio.NewWriterSize(c, 512)
	dt, _ := target.(transfer.DeviceTarget)
	var bounce []byte // device memory staging, allocated on first use
	var hdr [headerLen]byte
	var st [statusLen]byte
	var resp [2][]byte // status frame + READ payload, one vectored write
	ack := func(code uint64) error {
		binary.LittleEndian.PutUint64(st[:], statusMagic|code)
		if _, err := bw.Write(st[:]); err != nil {
			return err
		}
		if br.Buffered() == 0 {
			return bw.Flush()
		}
		return nil
	}
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		size := binary.LittleEndian.Uint64(hdr[0:])
		addr := binary.LittleEndian.Uint64(hdr[8:])
		op := hdr[16]
		v2 := op&protoV2 != 0
		op &^= protoV2
		buf, rerr := target.Resolve(addr, size)
		if rerr != nil && dt != nil {
			if dr, err := dt.ResolveDevice(addr, size); err == nil {
				if !serveDevice(c, br, bw, ack, &bounce, dr, transfer.Opcode(op), v2) {
					return
				}
				continue
			}
		}
		switch transfer.Opcode(op) {
		case transfer.Write:
			if rerr != nil {
				// Drain the payload so nothing lands, then refuse.
				if _, err := io.CopyN(io.Discard, br, int64(size)); err != nil || !v2 {
					return
				}
				if ack(statusRej) != nil {
					return
				}
				continue
			}
			if readPayload(br, c, buf) != nil {
				return
			}
			if v2 && ack(statusOK) != nil {
				return
			}
			if !v2 && br.Buffered() == 0 && bw.Flush() != nil {
				return
			}
		case transfer.Read:
			if rerr != nil {
				if v2 && ack(statusRej) == nil {
					continue
				}
				return // v1 has no way to refuse a read: drop the connection
			}
			if bw.Buffered() > 0 && bw.Flush() != nil { // earlier acks go first
				return
			}
			if v2 {
				binary.LittleEndian.PutUint64(st[:], statusMagic|statusOK)
				resp[0], resp[1] = st[:], buf
				nb := net.Buffers(resp[:])
				if _, err := nb.WriteTo(c); err != nil {
					return
				}
			} else if _, err := c.Write(buf); err != nil {
				return
			}
		default:
			return // unknown opcode: protocol error, drop the connection
		}
	}
}

// serveDevice serves one request on the device range dr through the
// connection's bounce buffer (grown to at most deviceChunk bytes). It
// returns false when the connection must be dropped.
func serveDevice(c net.Conn, br *bufio.Reader, bw *bufio.Writer, ack func(uint64) error, bounce *[]byte, dr transfer.DeviceRange, op transfer.Opcode, v2 bool) bool {
	size := dr.Length
	if want := int(min(size, deviceChunk)); len(*bounce) < want {
		*bounce = make([]byte, want)
	}
	b := *bounce
	switch op {
	case transfer.Write:
		var cerr error
		for off := uint64(0); off < size; {
			n := min(size-off, uint64(len(b)))
			if _, err := io.ReadFull(br, b[:n]); err != nil {
				return false
			}
			if cerr == nil {
				cerr = dr.CopyIn(off, b[:n])
			}
			off += n
		}
		if !v2 {
			return cerr == nil && (br.Buffered() > 0 || bw.Flush() == nil)
		}
		if cerr != nil {
			return ack(statusRej) == nil
		}
		return ack(statusOK) == nil
	case transfer.Read:
		n := min(size, uint64(len(b)))
		if err := dr.CopyOut(b[:n], 0); err != nil {
			return v2 && ack(statusRej) == nil
		}
		if bw.Buffered() > 0 && bw.Flush() != nil { // earlier acks go first
			return false
		}
		if v2 {
			var st [statusLen]byte
			binary.LittleEndian.PutUint64(st[:], statusMagic|statusOK)
			nb := net.Buffers{st[:], b[:n]}
			if _, err := nb.WriteTo(c); err != nil {
				return false
			}
		} else if _, err := c.Write(b[:n]); err != nil {
			return false
		}
		for off := n; off < size; off += n {
			n = min(size-off, uint64(len(b)))
			if dr.CopyOut(b[:n], off) != nil {
				return false // part of the response is out: only dropping the connection tells the peer
			}
			if _, err := c.Write(b[:n]); err != nil {
				return false
			}
		}
		return true
	}
	return false // unknown opcode: protocol error
}

// Close implements transfer.Transport: stops accepting, closes served
// connections and waits for their handlers. Peers dialled from this
// transport are closed by their owners (the engine).
func (t *Transport) Close() error { return t.srv.Close() }

// readPayload fills buf with the next len(buf) bytes of the stream: what
// br already buffered, then the rest straight from c, so payload bytes are
// copied once (into registered memory), not through br's buffer.
func readPayload(br *bufio.Reader, c net.Conn, buf []byte) error {
	n := min(br.Buffered(), len(buf))
	if n > 0 {
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return err
		}
	}
	_, err := io.ReadFull(c, buf[n:])
	return err
}
