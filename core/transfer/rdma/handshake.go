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
	opConnect  = "connect"  // QP exchange: request and response carry a qpInfo; the request's Dev names the target's device
	opMR       = "mr"       // rkeys for [addr, addr+length): response carries the MR, one rkey per target device, and its location
	opTopology = "topology" // the target's priority matrix and devices (upstream publishes these in the segment descriptor)
	opError    = "error"    // failure: Code and Error set
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
	Op string  `json:"op"`
	QP *qpInfo `json:"qp,omitempty"`
	// Dev names, in an opConnect request, the target device that holds
	// the target's end of the QP; empty: its first device.
	Dev    string `json:"dev,omitempty"`
	Addr   uint64 `json:"addr,omitempty"`   // opMR request: range start; response: MR start
	Length uint64 `json:"length,omitempty"` // opMR request: range length; response: MR length
	// RKeys (opMR response) holds the region's rkey on each target device,
	// in the order of Devices.
	RKeys []uint32 `json:"rkeys,omitempty"`
	// Devices (opMR and opTopology responses) lists the target's opened
	// devices.
	Devices []string `json:"devices,omitempty"`
	// Location (opMR response) is the location tag of the target buffer
	// ("cpu:0", "*"), which selects its entry in the target's matrix.
	Location string `json:"location,omitempty"`
	// ReadOnly (opMR response) says the region was registered for remote
	// reads only (the target buffer is read-only to peers): the
	// initiator refuses WRITEs to it with transfer.ErrRejected, and the
	// target's NIC would refuse them too. Absent: reads and writes.
	ReadOnly bool `json:"read_only,omitempty"`
	// Matrix (opTopology response) is the target's priority matrix.
	Matrix map[string][2][]string `json:"matrix,omitempty"`
	// Release lists target QPs the initiator abandoned (opConnect
	// request); the target destroys them.
	Release []qpRef `json:"release,omitempty"`
	Code    string  `json:"code,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// qpRef names a target-side QP: QP numbers are unique per device only.
type qpRef struct {
	Dev string `json:"dev"`
	QPN uint32 `json:"qpn"`
}

// checkMR validates an opMR answer and returns the remote region it
// describes. Errors: ErrHandshake (wrapped) for keys that do not match the
// device list or a region that does not cover [addr, addr+n).
func checkMR(m *message, addr, n uint64) (region, error) {
	if len(m.Devices) == 0 || len(m.RKeys) != len(m.Devices) {
		return region{}, fmt.Errorf("%w: %d rkeys for devices %v", ErrHandshake, len(m.RKeys), m.Devices)
	}
	loc := m.Location
	if loc == "" {
		loc = "*"
	}
	acc := accRemoteRead | accRemoteWrite
	if m.ReadOnly {
		acc = accRemoteRead
	}
	r := region{addr: m.Addr, length: m.Length, rkeys: m.RKeys, devices: m.Devices, location: loc, access: acc}
	if !r.covers(addr, n) {
		return region{}, fmt.Errorf("%w: target region [%#x,+%d) does not cover [%#x,+%d)", ErrHandshake, r.addr, r.length, addr, n)
	}
	return r, nil
}

// mrMessage is the opMR answer for the local region r, registered on
// the devices named: its range, one rkey per device, location, and
// whether peers may only read it.
func mrMessage(r region, devices []string) *message {
	return &message{Op: opMR, Addr: r.addr, Length: r.length, RKeys: r.rkeys, Devices: devices, Location: r.location,
		ReadOnly: !r.access.has(accRemoteWrite)}
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
