package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// ReadFrame reads one frame's length and bytes from r. Errors: r's; a
// length above limit (nothing more is read).
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("framed session: frame of %d bytes exceeds the %d-byte limit", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
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
