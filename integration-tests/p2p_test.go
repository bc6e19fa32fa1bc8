package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

// p2pStore starts a P2P handshake store on 127.0.0.1, closed when t ends
// (after the engine using it: cleanups run last-in first-out).
func p2pStore(t testing.TB) *p2pmeta.Store {
	t.Helper()
	s, err := p2pmeta.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatalf("p2pmeta.Listen: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// p2pBackend gives every engine its own P2P store and the segment name that
// store dictates; an unknown segment is a listening store that publishes
// nothing.
func p2pBackend(testing.TB) transfertest.Backend {
	return func(t testing.TB, _ string) (string, metadata.Store) {
		s := p2pStore(t)
		return s.Name(), s
	}
}

// TestTransferConformanceP2PMetadata runs the transfer conformance suite in
// upstream's P2PHANDSHAKE mode: no metadata server, segment names are
// host:port, descriptors are fetched from the peer on OpenSegment.
func TestTransferConformanceP2PMetadata(t *testing.T) {
	transfertest.RunBackend(t, p2pBackend, newTCP)
}

// TestP2PUnknownPeer opens a segment whose address has no engine (nothing
// listens there): the engine reports ErrSegmentNotFound promptly.
func TestP2PUnknownPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	p := transfertest.NewPairBackend(t, p2pBackend(t), newTCP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{dead, "127.0.0.1:1"} {
		if _, err := p.A.OpenSegment(ctx, name); !errors.Is(err, transfer.ErrSegmentNotFound) {
			t.Errorf("OpenSegment(%q) = %v, want ErrSegmentNotFound", name, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("opening an unreachable segment hung")
	}
	if _, err := p.A.OpenSegment(ctx, "not-host-port"); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf("OpenSegment of a malformed name = %v, want ErrInvalidKey", err)
	}
}

// TestP2PProbeAndNotifyEngines exercises the handshake side channel between
// two running engines: liveness probes and notifications.
func TestP2PProbeAndNotifyEngines(t *testing.T) {
	a, b := p2pStore(t), p2pStore(t)
	p := transfertest.NewPairBackend(t, func(t testing.TB, logical string) (string, metadata.Store) {
		if logical == "seg-a" {
			return a.Name(), a
		}
		return b.Name(), b
	}, newTCP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p2pmeta.Probe(ctx, p.NameB); err != nil {
		t.Fatalf("probe %s: %v", p.NameB, err)
	}
	if err := p2pmeta.SendNotify(ctx, p.NameB, p.NameA, "kv-ready"); err != nil {
		t.Fatalf("notify %s: %v", p.NameB, err)
	}
	if got := b.Notifies(); len(got) != 1 || got[0] != (p2pmeta.Notify{Name: p.NameA, Msg: "kv-ready"}) {
		t.Fatalf("b's notifies = %v", got)
	}
	// The engine is unchanged by P2P mode: memory B registers after A opened
	// it becomes reachable once A refreshes, which re-fetches B's
	// descriptor over the handshake channel.
	r, err := memory.Map(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := p.B.RegisterLocalMemory(ctx, r.Bytes(), "cpu:0", true); err != nil {
		t.Fatal(err)
	}
	write := []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: r.Addr(), Length: 4096}}
	if err := p.A.TransferSync(ctx, write); !errors.Is(err, transfer.ErrAddressNotRegistered) {
		t.Fatalf("write before refresh = %v, want ErrAddressNotRegistered (cached descriptor)", err)
	}
	if err := p.A.RefreshSegment(ctx, p.BHandle); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	copy(p.RA.Bytes()[:4096], bytes.Repeat([]byte("p2p!"), 1024))
	if err := p.A.TransferSync(ctx, write); err != nil {
		t.Fatalf("write into memory registered after open: %v", err)
	}
	if !bytes.Equal(r.Bytes()[:4096], p.RA.Bytes()[:4096]) {
		t.Fatal("write landed wrong")
	}
}
