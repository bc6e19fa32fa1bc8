package abitest

import (
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata/etcdmeta/etcdtest"
)

// TestP2PCaller runs a C program against the P2P store's ABI (p2p.h) and
// an embedded etcd: register, list, get from the seed, unregister, get
// from a peer, the error codes, destroy.
func TestP2PCaller(t *testing.T) {
	ep := etcdtest.Start(t)
	out := buildAndRun(t, "gcc", []string{"-std=gnu11"}, "p2p_smoke.c", ep)
	if !strings.Contains(out, "p2p_smoke: ok") {
		t.Fatalf("output: %s", out)
	}
}
