package xferagent

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
)

// connPrefix starts every connection info string this backend hands NIXL
// (getConnInfo): "mcgo-nixl1:<host>:<port>", the transfer segment name of
// the engine (its P2P handshake endpoint) after the prefix.
const connPrefix = "mcgo-nixl1:"

// connInfo is getConnInfo's string for the engine whose segment is seg,
// with its CMA info when cma is not nil: "mcgo-nixl1:<host>:<port>" then
// "|cma=<pid>:<cookie address>:<cookie>".
func connInfo(seg string, cma *cmaInfo) string {
	if cma == nil {
		return connPrefix + seg
	}
	return connPrefix + seg + cma.format()
}

// parseConnInfo returns the segment name and CMA info (nil if none) in a
// peer's connection info. Errors: ErrMismatch naming what is wrong (not
// ours, malformed host:port or cma field).
func parseConnInfo(info string) (string, *cmaInfo, error) {
	rest, ok := strings.CutPrefix(info, connPrefix)
	if !ok {
		return "", nil, fmt.Errorf("%w: connection info %.40q is not a mooncake-go NIXL engine's (want %q...)", ErrMismatch, info, connPrefix)
	}
	seg, extra, hasExtra := strings.Cut(rest, "|")
	if _, _, err := p2pmeta.SplitName(seg); err != nil {
		return "", nil, fmt.Errorf("%w: connection info %.60q: %v", ErrMismatch, info, err)
	}
	if !hasExtra {
		return seg, nil, nil
	}
	f, ok := strings.CutPrefix(extra, "cma=")
	if !ok {
		return "", nil, fmt.Errorf("%w: connection info %.80q: unknown field after %q", ErrMismatch, info, seg)
	}
	c, err := parseCMA(f)
	if err != nil {
		return "", nil, err
	}
	return seg, &c, nil
}

// publicMagic starts a registration's public data (getPublicData): magic,
// then the registered range as u64 address and u64 length, little endian:
// 20 bytes.
const publicMagic = "MCN1"

// publicLen is the size of a public data blob in bytes.
const publicLen = len(publicMagic) + 16

// publicData encodes the registered range [addr, addr+n).
func publicData(addr, n uint64) []byte {
	b := make([]byte, publicLen)
	copy(b, publicMagic)
	binary.LittleEndian.PutUint64(b[4:], addr)
	binary.LittleEndian.PutUint64(b[12:], n)
	return b
}

// parsePublicData decodes a peer's public data. Errors: ErrMismatch.
func parsePublicData(b []byte) (addr, n uint64, err error) {
	if len(b) != publicLen || string(b[:4]) != publicMagic {
		return 0, 0, fmt.Errorf("%w: public data of %d bytes is not a mooncake-go NIXL registration's (want %d bytes starting %q)", ErrMismatch, len(b), publicLen, publicMagic)
	}
	return binary.LittleEndian.Uint64(b[4:]), binary.LittleEndian.Uint64(b[12:]), nil
}

// notifyTag starts the name field of a notification sent by this backend
// on the P2P channel; the base64 (std, padded) of the sender's agent name
// follows it, and the message field is the base64 of the message.
const notifyTag = "nixl:"

// encodeNotify turns (sender agent, message) into the fields of a P2P
// notification.
func encodeNotify(agent string, msg []byte) (name, body string) {
	return notifyTag + base64.StdEncoding.EncodeToString([]byte(agent)), base64.StdEncoding.EncodeToString(msg)
}

// decodeNotify reverses encodeNotify; ok is false for a notification that
// is not a NIXL one (another kind of peer wrote to the channel), which the
// engine drops.
func decodeNotify(n p2pmeta.Notify) (agent string, msg []byte, ok bool) {
	rest, found := strings.CutPrefix(n.Name, notifyTag)
	if !found {
		return "", nil, false
	}
	a, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return "", nil, false
	}
	m, err := base64.StdEncoding.DecodeString(n.Msg)
	if err != nil {
		return "", nil, false
	}
	return string(a), m, true
}

// Notif is one notification received by an engine (getNotifs): the
// sender's agent name and its message, any bytes.
type Notif struct {
	Agent string
	Msg   []byte
}

// PackNotifs encodes ns as mc_nixl_get_notifs hands them over: for each,
// u32 name length, name, u32 message length, message (little endian).
func PackNotifs(ns []Notif) []byte {
	size := 0
	for _, n := range ns {
		size += 8 + len(n.Agent) + len(n.Msg)
	}
	b := make([]byte, 0, size)
	for _, n := range ns {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(n.Agent)))
		b = append(b, n.Agent...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(n.Msg)))
		b = append(b, n.Msg...)
	}
	return b
}

// UnpackNotifs decodes PackNotifs' encoding (tests and tools). Errors:
// ErrMismatch for a truncated buffer.
func UnpackNotifs(b []byte) ([]Notif, error) {
	var out []Notif
	field := func() ([]byte, error) {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: notification list truncated", ErrMismatch)
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n) {
			return nil, fmt.Errorf("%w: notification list truncated", ErrMismatch)
		}
		f := b[:n]
		b = b[n:]
		return f, nil
	}
	for len(b) > 0 {
		a, err := field()
		if err != nil {
			return nil, err
		}
		m, err := field()
		if err != nil {
			return nil, err
		}
		out = append(out, Notif{Agent: string(a), Msg: append([]byte(nil), m...)})
	}
	return out, nil
}

// PackParams encodes backend options as mc_nixl_backend_options hands
// them over: for each, u32 key length, key, u32 value length, value (little
// endian), keys in sorted order.
func PackParams(keys []string, values map[string]string) []byte {
	var b []byte
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		v := values[k]
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}
