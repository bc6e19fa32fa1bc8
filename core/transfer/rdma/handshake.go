package rdma

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// Control-channel operations. Each request is answered by exactly one
// response with the same op, or with op "error".
const (
	opConnect = "connect" // QP exchange: request and response carry a qpInfo
	opMR      = "mr"      // rkey for [addr, addr+length): response carries the MR
	opError   = "error"   // failure: Code and Error set
)

// Error codes in an opError response.
const (
	codeRejected = "rejected" // range not remote-accessible: transfer.ErrRejected
	codeInternal = "internal" // verbs failure on the target
	codeBadReq   = "bad-request"
)

// qpInfo is one side's end of an RC connection.
type qpInfo struct {
	Device    string `json:"device"`     // verbs device name, for logs
	LinkLayer string `json:"link_layer"` // "InfiniBand" or "Ethernet"
	LID       uint16 `json:"lid"`
	GID       string `json:"gid"` // 32 hex digits
	QPN       uint32 `json:"qpn"`
	PSN       uint32 `json:"psn"` // 24 bits
	MTU       int    `json:"mtu"` // enum ibv_mtu
}

// message is one control-channel message, one JSON object per line.
type message struct {
	Op     string  `json:"op"`
	QP     *qpInfo `json:"qp,omitempty"`
	Addr   uint64  `json:"addr,omitempty"`   // opMR request: range start; response: MR start
	Length uint64  `json:"length,omitempty"` // opMR request: range length; response: MR length
	RKey   uint32  `json:"rkey,omitempty"`
	// Release lists target QPNs the initiator abandoned (opConnect
	// request); the target destroys them.
	Release []uint32 `json:"release,omitempty"`
	Code    string   `json:"code,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// writeMessage sends m as one line. Errors: the encoder's or writer's.
func writeMessage(w io.Writer, m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readMessage reads one line of at most max bytes and decodes it. Errors:
// io.EOF at a clean end; ErrHandshake (wrapped) for an oversized or
// undecodable line or a missing op; the reader's error otherwise.
func readMessage(r *bufio.Reader, max int) (*message, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("%w: message longer than %d bytes", ErrHandshake, max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return nil, fmt.Errorf("%w: truncated message", ErrHandshake)
			}
			return nil, err
		}
		break
	}
	var m message
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: bad message: %v", ErrHandshake, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after message", ErrHandshake)
	}
	if m.Op == "" {
		return nil, fmt.Errorf("%w: message without op", ErrHandshake)
	}
	return &m, nil
}

// encodeGID and decodeGID convert a raw 16-byte GID to and from hex.
func encodeGID(g [16]byte) string { return hex.EncodeToString(g[:]) }

func decodeGID(s string) ([16]byte, error) {
	var g [16]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return g, fmt.Errorf("%w: bad GID %q", ErrHandshake, s)
	}
	copy(g[:], b)
	return g, nil
}

// checkQPInfo validates a peer's connect data.
func checkQPInfo(q *qpInfo) ([16]byte, error) {
	if q == nil {
		return [16]byte{}, fmt.Errorf("%w: connect without qp info", ErrHandshake)
	}
	if q.QPN == 0 || q.QPN > 0xffffff || q.PSN > 0xffffff || q.MTU < 1 || q.MTU > 5 {
		return [16]byte{}, fmt.Errorf("%w: bad qp info %+v", ErrHandshake, *q)
	}
	return decodeGID(q.GID)
}
