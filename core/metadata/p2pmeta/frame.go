package p2pmeta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// FrameType is the type byte of a handshake frame (upstream's
// HandShakeRequestType).
type FrameType uint8

// Frame types on the handshake channel. A reply carries the request's type.
const (
	// FrameConnection is RDMA queue-pair setup. This package does not set up
	// queue pairs; a Store answers it with a non-empty reply_msg (an error).
	FrameConnection FrameType = 0
	// FrameMetadata swaps segment descriptors: the request carries the
	// sender's descriptor, the reply the receiver's.
	FrameMetadata FrameType = 1
	// FrameNotify delivers a notification {name, notify_msg}; the reply's
	// notify_msg is "success".
	FrameNotify FrameType = 2
	// FrameProbe is a liveness probe; the reply is {"status":"success"}.
	FrameProbe FrameType = 3
	// FrameLegacy marks a frame of the pre-typed protocol (upstream's
	// OldProtocol): no type byte, the length counts payload bytes only. A
	// receiver treats it as a Connection. It is never sent as a type byte;
	// WriteFrame with FrameLegacy writes the legacy layout.
	FrameLegacy FrameType = 0xFF
)

// maxWireType is the largest type byte this package understands.
const maxWireType = FrameProbe

// Frame size limits (upstream MC_HANDSHAKE_MAX_LENGTH and its bounds). The
// limit applies to the length field: type byte plus payload.
const (
	DefaultMaxFrame = 1 << 20
	MinMaxFrame     = 1 << 20
	MaxMaxFrame     = 128 << 20
)

// headerLen is the size of the length field.
const headerLen = 8

// preallocLimit is the largest payload ReadFrame allocates up front; a
// longer frame's buffer grows as its bytes arrive, so a peer that only
// announces a large frame costs little memory.
const preallocLimit = 64 << 10

func (t FrameType) String() string {
	switch t {
	case FrameConnection:
		return "connection"
	case FrameMetadata:
		return "metadata"
	case FrameNotify:
		return "notify"
	case FrameProbe:
		return "probe"
	case FrameLegacy:
		return "legacy"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// AppendFrame appends the frame of typ and payload to dst: a little-endian
// uint64 length (1 + len(payload), or len(payload) for FrameLegacy), the type
// byte (absent for FrameLegacy), then payload.
func AppendFrame(dst []byte, typ FrameType, payload []byte) []byte {
	n := uint64(len(payload))
	if typ != FrameLegacy {
		n++
	}
	dst = binary.LittleEndian.AppendUint64(dst, n)
	if typ != FrameLegacy {
		dst = append(dst, byte(typ))
	}
	return append(dst, payload...)
}

// WriteFrame writes one frame (see AppendFrame) with a single Write. It
// returns the writer's error.
func WriteFrame(w io.Writer, typ FrameType, payload []byte) error {
	_, err := w.Write(AppendFrame(make([]byte, 0, headerLen+1+len(payload)), typ, payload))
	return err
}

// ReadFrame reads one frame from r and returns its type and payload (a new
// slice the caller owns). A frame whose first byte after the length is a
// known type (0..3) is typed; one whose first byte can start a JSON text is a
// legacy frame (FrameLegacy, the whole body is the payload), as upstream's
// readString decides.
//
// Errors: io.EOF when r ends before the first byte; ErrFrameTooLarge (before
// anything is allocated) when the length exceeds max; ErrBadFrame for an
// empty frame or an unknown type byte; io.ErrUnexpectedEOF for a truncated
// frame; otherwise the reader's error.
func ReadFrame(r io.Reader, max int) (FrameType, []byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	switch {
	case n == 0:
		return 0, nil, fmt.Errorf("%w: empty frame", ErrBadFrame)
	case max <= 0 || n > uint64(max):
		return 0, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	var body []byte
	if n <= preallocLimit {
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return 0, nil, noEOF(err)
		}
	} else {
		var buf bytes.Buffer
		buf.Grow(preallocLimit)
		got, err := io.CopyN(&buf, r, int64(n))
		if got != int64(n) {
			return 0, nil, noEOF(err)
		}
		body = buf.Bytes()
	}
	switch b := body[0]; {
	case b <= byte(maxWireType):
		return FrameType(b), body[1:], nil
	case jsonStart(b):
		return FrameLegacy, body, nil
	default:
		return 0, nil, fmt.Errorf("%w: unknown type byte %d", ErrBadFrame, b)
	}
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// jsonStart reports whether b can begin a JSON text (RFC 8259 whitespace or
// the first byte of a value).
func jsonStart(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '{', '[', '"', '-', 't', 'f', 'n':
		return true
	}
	return b >= '0' && b <= '9'
}
