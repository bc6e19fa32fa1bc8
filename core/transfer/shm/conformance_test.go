package shm_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

var _ shm.FDSource = (*transfer.Registry)(nil)

func TestConformance(t *testing.T) {
	transfertest.Run(t, func(testing.TB) metadata.Store { return memmeta.New() },
		func(testing.TB) transfer.Transport { return shm.New(shm.Config{}) })
}

// TestEngineChoosesShmOnSameHost: engines with tcp as their network
// transport and shm as their same-host transport move bytes over shm when
// both descriptors carry the same host id, over tcp otherwise, and fall back
// to tcp for a buffer that is not memfd backed.
func TestEngineChoosesShmOnSameHost(t *testing.T) {
	for _, tc := range []struct {
		name             string
		hostA, hostB     string
		shared           bool
		wantShmTransfers bool
	}{
		{"same host", "h1", "h1", true, true},
		{"other host", "h1", "h2", true, false},
		{"same host, anonymous buffer falls back to tcp", "h1", "h1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			meta := memmeta.New()
			shmB := shm.New(shm.Config{})
			mk := func(name, host string, local *shm.Transport, shared bool) (*transfer.Engine, *memory.Region) {
				e, err := transfer.New(ctx, transfer.Config{Name: name, Metadata: meta, Transport: tcp.New(tcp.Config{}), Local: local, HostID: host})
				if err != nil {
					t.Fatal(err)
				}
				var r *memory.Region
				if shared {
					r, err = memory.MapShared(1<<20, name)
				} else {
					r, err = memory.Map(1 << 20)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := e.RegisterRegion(ctx, r, "cpu:0", true); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close(); r.Close() })
				return e, r
			}
			a, ra := mk("a", tc.hostA, shm.New(shm.Config{}), true)
			_, rb := mk("b", tc.hostB, shmB, tc.shared)
			id, err := a.OpenSegment(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			src := ra.Bytes()[:300000]
			for i := range src {
				src[i] = byte(i * 13)
			}
			if err := a.TransferSync(ctx, []transfer.Request{{Op: transfer.Write, Source: ra.Addr(), Target: id, TargetOffset: rb.Addr() + 100, Length: uint64(len(src))}}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rb.Bytes()[100:100+len(src)], src) {
				t.Fatal("bytes did not land")
			}
			if got := shmB.Stats().FDsSent > 0; got != tc.wantShmTransfers {
				t.Fatalf("shm used = %v (stats %+v), want %v", got, shmB.Stats(), tc.wantShmTransfers)
			}
		})
	}
}
