package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"
)

// FramedSessionMagic opens every framed session connection (ours; see
// core/store/server ServeFramedSessions): the client's first 8 bytes.
// Anything else makes the master close the connection.
const FramedSessionMagic = "MCSESS01"

// FramedSessionPortMethod is the full gRPC method name of the master's
// unary call answering its framed session listener's TCP port (request
// google.protobuf.Empty, answer google.protobuf.UInt32Value); it fails
// Unimplemented when the master serves none (an older master, or one
// started with the listener off).
const FramedSessionPortMethod = "/mooncake_go.FramedSession/Port"

// A frame of a framed session is a uint32 little-endian length and that
// many bytes: one protobuf message.

// ReadFrame reads one frame's length and bytes from r, allocating as the
// bytes arrive. Errors: r's (io.ErrUnexpectedEOF for a frame cut short);
// a length above limit (nothing more is read).
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("framed session: frame of %d bytes exceeds the %d-byte limit", n, limit)
	}
	if n <= frameChunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpectedEOF(err)
		}
		return b, nil
	}
	// A large frame's buffer grows with the bytes that arrive, so that a
	// peer announcing large frames and sending little holds little memory.
	b := make([]byte, 0, frameChunk)
	for len(b) < int(n) {
		k := min(int(n)-len(b), max(frameChunk, len(b)))
		b = slices.Grow(b, k)
		if _, err := io.ReadFull(r, b[len(b):len(b)+k]); err != nil {
			return nil, unexpectedEOF(err)
		}
		b = b[:len(b)+k]
	}
	return b, nil
}

// frameChunk is the most bytes ReadFrame allocates ahead of the bytes
// that arrived (then it doubles what it holds at most).
const frameChunk = 64 << 10

// unexpectedEOF is err, with io.EOF (a frame cut short) as
// io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends m as one frame (length, then its encoding) to b.
func AppendFrame(b []byte, m proto.Message) ([]byte, error) {
	b = append(b, 0, 0, 0, 0)
	start := len(b)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b[:start-4], err
	}
	binary.LittleEndian.PutUint32(b[start-4:], uint32(len(b)-start))
	return b, nil
}
