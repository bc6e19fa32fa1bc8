package transfer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/tcp"
)

// hookTransport runs before on every request its peers carry (the
// request's opcode and length; a non-nil error fails the request).
type hookTransport struct {
	transfer.Transport
	before func(op transfer.Opcode, n int) error
}

func (h *hookTransport) Dial(ctx context.Context, d metadata.SegmentDesc, rpc metadata.RPCMeta) (transfer.Peer, error) {
	p, err := h.Transport.Dial(ctx, d, rpc)
	if err != nil {
		return nil, err
	}
	return &hookPeer{Peer: p, h: h}, nil
}

type hookPeer struct {
	transfer.Peer
	h *hookTransport
}

func (p *hookPeer) Do(ctx context.Context, op transfer.Opcode, local []byte, remote uint64) error {
	if p.h.before != nil {
		if err := p.h.before(op, len(local)); err != nil {
			return err
		}
	}
	return p.Peer.Do(ctx, op, local, remote)
}

// stagingRig is engine "gpu" (device memory, fakeGPU, DeviceSlice slice)
// and engine "host" on another host (host memory only), over tcp.
type stagingRig struct {
	g      *fakeGPU
	gpu    *transfer.Engine
	tr     *hookTransport
	dev    uint64 // gpu's registered device buffer
	host   []byte // host's registered buffer
	hostID transfer.SegmentID
	size   int
}

func newStagingRig(t *testing.T, slice, size int) *stagingRig {
	t.Helper()
	ctx := context.Background()
	meta := memmeta.New()
	r := &stagingRig{g: newFakeGPU(), size: size}
	r.tr = &hookTransport{Transport: tcp.New(tcp.Config{})}
	var err error
	r.gpu, err = transfer.New(ctx, transfer.Config{Name: "gpu", Metadata: meta, Transport: r.tr, HostID: "host-a", CUDA: r.g, DeviceSlice: slice, RequestTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { r.gpu.Close() })
	h := newNode(t, meta, "host", "host-b", nil, tcp.Config{})
	r.host = hostRegion(t, h.e, size).Bytes()
	r.dev = r.g.malloc(t, size)
	require.NoError(t, r.gpu.RegisterDeviceMemory(ctx, r.dev, uint64(size), 0, false))
	r.hostID, err = r.gpu.OpenSegment(ctx, "host")
	require.NoError(t, err)
	return r
}

func (r *stagingRig) devBytes(t *testing.T) []byte {
	m, _, err := r.g.mem(r.dev, uint64(r.size))
	require.NoError(t, err)
	return m
}

func (r *stagingRig) do(op transfer.Opcode, n int) error {
	return r.gpu.TransferSync(context.Background(), []transfer.Request{{Op: op, Source: r.dev, Target: r.hostID, TargetOffset: hostAddr(r.host), Length: uint64(n)}})
}

func hostAddr(b []byte) uint64 { return memory.AddrOf(b) }

// TestDeviceStagingSlices moves requests between device memory and a
// remote host segment over tcp and checks the bytes and the staging: one
// device copy per slice, in order, each of min(slice, rest) bytes, from
// pinned host memory, for requests smaller than, equal to and not a
// multiple of the slice.
func TestDeviceStagingSlices(t *testing.T) {
	const slice = 64 << 10
	const size = 10*slice + 7
	r := newStagingRig(t, slice, size)
	for i, n := range []int{1, slice - 1, slice, slice + 1, 2 * slice, 3*slice + 123, size} {
		for _, op := range []transfer.Opcode{transfer.Write, transfer.Read} {
			t.Run(fmt.Sprintf("%s/%d", op, n), func(t *testing.T) {
				seed := uint64(2*i + int(op) + 10)
				dev, host := r.devBytes(t), r.host
				fillRand(dev, seed)
				fillRand(host, seed+100)
				wantDev, wantHost := bytes.Clone(dev), bytes.Clone(host)
				kind := "dtoh"
				if op == transfer.Write {
					copy(wantHost[:n], dev[:n])
				} else {
					copy(wantDev[:n], host[:n])
					kind = "htod"
				}
				r.g.takeLog()
				require.NoError(t, r.do(op, n))
				require.True(t, bytes.Equal(dev, wantDev), "device bytes")
				require.True(t, bytes.Equal(host, wantHost), "host bytes")
				log := r.g.takeLog()
				require.Len(t, log, (n+slice-1)/slice, "one device copy per slice")
				for k, c := range log {
					require.Equal(t, kind, c.kind, "copy %d", k)
					require.Equal(t, r.dev+uint64(k*slice), c.addr, "copy %d in order", k)
					require.Equal(t, min(slice, n-k*slice), c.n, "copy %d length", k)
					require.True(t, c.pinned, "copy %d stages through pinned memory", k)
				}
			})
		}
	}
	// One stager (two slices) was pinned: requests run one at a time here.
	require.Equal(t, 2*slice, r.g.pinnedBytes())
	require.NoError(t, r.gpu.Close())
	require.Zero(t, r.g.pinnedBytes(), "Close unpins the staging buffers")
}

// TestDeviceStagingOverlap proves the pipeline: a WRITE's send of slice 0
// waits until the device copy of slice 1 has started, and a READ's
// host-to-device copy of slice 0 waits until the receive of slice 1 has
// been asked for. Without overlap either would stall until its deadline.
func TestDeviceStagingOverlap(t *testing.T) {
	const slice = 32 << 10
	const size = 4 * slice
	r := newStagingRig(t, slice, size)
	wait := func(ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the next slice never started: no overlap")
		}
	}

	var copies, sends atomic.Int64
	copied1, sent1 := make(chan struct{}), make(chan struct{})
	r.g.onCopy = func(kind string, addr uint64, n int) error {
		switch k := copies.Add(1); {
		case kind == "dtoh" && k == 2:
			close(copied1)
		case kind == "htod" && k == 1:
			return wait(sent1)
		}
		return nil
	}
	r.tr.before = func(op transfer.Opcode, n int) error {
		switch k := sends.Add(1); {
		case op == transfer.Write && k == 1:
			return wait(copied1)
		case op == transfer.Read && k == 2:
			close(sent1)
		}
		return nil
	}
	fillRand(r.devBytes(t), 1)
	require.NoError(t, r.do(transfer.Write, size))
	require.Equal(t, r.devBytes(t), r.host)

	copies.Store(0)
	sends.Store(0)
	fillRand(r.host, 2)
	require.NoError(t, r.do(transfer.Read, size))
	require.Equal(t, r.host, r.devBytes(t))
}

// TestDeviceStagingErrors fails a device copy or a network request in the
// middle of a request's slices: the request fails with that error, and the
// next request (reusing the staging buffers) moves all its bytes.
func TestDeviceStagingErrors(t *testing.T) {
	const slice = 16 << 10
	const size = 5*slice + 99
	errNet := errors.New("injected network failure")
	for _, tc := range []struct {
		name    string
		op      transfer.Opcode
		copyAt  int64 // fail this device copy
		sendAt  int64 // fail this network request
		wantErr error
	}{
		{"write copy 1", transfer.Write, 1, 0, errCopy},
		{"write copy 3", transfer.Write, 3, 0, errCopy},
		{"write last copy", transfer.Write, 6, 0, errCopy},
		{"write send 2", transfer.Write, 0, 2, errNet},
		{"read copy 2", transfer.Read, 2, 0, errCopy},
		{"read last copy", transfer.Read, 6, 0, errCopy},
		{"read receive 1", transfer.Read, 0, 1, errNet},
		{"read receive 4", transfer.Read, 0, 4, errNet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStagingRig(t, slice, size)
			var sends atomic.Int64
			r.tr.before = func(op transfer.Opcode, n int) error {
				if sends.Add(1) == tc.sendAt {
					return errNet
				}
				return nil
			}
			r.g.failAt.Store(tc.copyAt)
			err := r.do(tc.op, size)
			require.ErrorIs(t, err, tc.wantErr)
			if tc.copyAt > 0 {
				require.Contains(t, err.Error(), "device memory [+")
			}

			sends.Store(-1 << 40) // no more failures
			fillRand(r.devBytes(t), 3)
			fillRand(r.host, 4)
			require.NoError(t, r.do(tc.op, size))
			require.Equal(t, r.devBytes(t), r.host)
		})
	}
}

// TestDeviceSliceConfig rejects a slice over 1 GiB or negative.
func TestDeviceSliceConfig(t *testing.T) {
	for _, n := range []int{2 << 30, -1} {
		_, err := transfer.New(context.Background(), transfer.Config{Name: "x", Metadata: memmeta.New(), Transport: tcp.New(tcp.Config{}), DeviceSlice: n})
		require.ErrorIs(t, err, transfer.ErrInvalidArgument, n)
		require.Contains(t, err.Error(), fmt.Sprintf("device slice of %d bytes", n))
	}
}
