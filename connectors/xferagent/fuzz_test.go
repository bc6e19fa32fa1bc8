package xferagent

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
)

// FuzzWire feeds what a peer controls - connection info, public data, a
// notification on the handshake channel, a packed notification list - to
// the decoders: they must refuse or round-trip, never panic.
func FuzzWire(f *testing.F) {
	f.Add("mcgo-nixl1:127.0.0.1:4000|cma=12:7f0000001000:00112233445566778899aabbccddeeff", publicData(4096, 8192), "", "")
	f.Add("mcgo-nixl1:127.0.0.1:4000", publicData(4096, 8192), "nixl:QQ==", "aGk=")
	f.Add("ucx:xx", []byte("MCN1"), "x", "")
	f.Fuzz(func(t *testing.T, info string, pub []byte, name, msg string) {
		if seg, c, err := parseConnInfo(info); err == nil {
			if seg2, c2, err := parseConnInfo(connInfo(seg, c)); err != nil || seg2 != seg || (c == nil) != (c2 == nil) || (c != nil && *c != *c2) {
				t.Fatalf("conn info %q parsed to %q %v, which does not round-trip", info, seg, c)
			}
		}
		if a, n, err := parsePublicData(pub); err == nil {
			if string(publicData(a, n)) != string(pub) {
				t.Fatalf("public data %x does not round-trip", pub)
			}
		}
		if a, m, ok := decodeNotify(p2pmeta.Notify{Name: name, Msg: msg}); ok {
			n2, m2 := encodeNotify(a, m)
			if a2, mm, ok2 := decodeNotify(p2pmeta.Notify{Name: n2, Msg: m2}); !ok2 || a2 != a || string(mm) != string(m) {
				t.Fatalf("notification (%q, %q) does not round-trip", a, m)
			}
		}
		if ns, err := UnpackNotifs(pub); err == nil {
			if string(PackNotifs(ns)) != string(pub) {
				t.Fatalf("notification list %x does not round-trip", pub)
			}
		}
	})
}
