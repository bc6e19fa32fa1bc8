package nixl

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
)

// FuzzWire feeds what a peer controls - connection info, public data, a
// notification on the handshake channel, a packed notification list - to
// the decoders: they must refuse or round-trip, never panic.
func FuzzWire(f *testing.F) {
	f.Add("mcgo-nixl1:127.0.0.1:4000", publicData(4096, 8192), "nixl:QQ==", "aGk=")
	f.Add("ucx:xx", []byte("MCN1"), "x", "")
	f.Fuzz(func(t *testing.T, info string, pub []byte, name, msg string) {
		if seg, err := parseConnInfo(info); err == nil && connInfo(seg) != info {
			t.Fatalf("conn info %q parsed to %q", info, seg)
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
