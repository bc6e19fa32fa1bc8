package loopback_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/loopback"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
	"github.com/stretchr/testify/require"
)

func newMeta(t testing.TB) metadata.Store { return memmeta.New() }

func TestConformance(t *testing.T) {
	transfertest.Run(t, newMeta, func(t testing.TB) transfer.Transport {
		// One hub per test pair: both transports of a pair must share it.
		return sharedHub(t).Transport()
	})
}

var hubs = map[testing.TB]*loopback.Hub{}

func sharedHub(t testing.TB) *loopback.Hub {
	if h, ok := hubs[t]; ok {
		return h
	}
	h := loopback.NewHub()
	hubs[t] = h
	t.Cleanup(func() { delete(hubs, t) })
	return h
}

func pair(t *testing.T) (*transfertest.Pair, *loopback.Hub) {
	h := loopback.NewHub()
	return transfertest.NewPair(t, memmeta.New(), func(testing.TB) transfer.Transport { return h.Transport() }), h
}

func TestInjectedFaults(t *testing.T) {
	p, h := pair(t)
	b := p.RB.Bytes()
	a := p.RA.Bytes()
	for i := range a[:4096] {
		a[i] = 0xAB
	}
	req := transfer.Request{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: 4096}

	h.SetHook(func(ctx context.Context, c loopback.Call) loopback.Fault { return loopback.Fail })
	if err := p.A.TransferSync(p.Background, []transfer.Request{req}); !errors.Is(err, loopback.ErrInjected) {
		t.Fatalf("Fail: %v", err)
	}
	if b[0] != 0 {
		t.Fatal("a failed write moved bytes")
	}

	// Drop: the request waits for its deadline and fails; it never hangs.
	h.SetHook(func(ctx context.Context, c loopback.Call) loopback.Fault { return loopback.Drop })
	ctx, cancel := context.WithTimeout(p.Background, 20*time.Second)
	defer cancel()
	start := time.Now()
	err := p.A.TransferSync(ctx, []transfer.Request{req}) // engine RequestTimeout is 5 s in NewPair
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Drop: err %v after %v (ctx %v)", err, time.Since(start), ctx.Err())
	}
	if b[0] != 0 {
		t.Fatal("a dropped write moved bytes")
	}

	// FailAfter: the bytes land but the request is still reported FAILED,
	// never COMPLETED without an acknowledgement.
	h.SetHook(func(ctx context.Context, c loopback.Call) loopback.Fault { return loopback.FailAfter })
	if err := p.A.TransferSync(p.Background, []transfer.Request{req}); !errors.Is(err, loopback.ErrInjected) {
		t.Fatalf("FailAfter: %v", err)
	}

	h.SetHook(nil)
	if err := p.A.TransferSync(p.Background, []transfer.Request{req}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:4096], a[:4096]) {
		t.Fatal("write after faults cleared did not land")
	}
}

func TestFreeBusyBatchRefused(t *testing.T) {
	p, h := pair(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h.SetHook(func(ctx context.Context, c loopback.Call) loopback.Fault {
		entered <- struct{}{}
		<-release
		return loopback.Pass
	})
	id, err := p.A.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.A.Submit(id, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: 8}}); err != nil {
		t.Fatal(err)
	}
	<-entered
	if st, _ := p.A.Status(id, 0); st.Status != transfer.StatusWaiting {
		t.Fatalf("status while blocked = %v, want WAITING", st.Status)
	}
	if err := p.A.FreeBatch(id); !errors.Is(err, transfer.ErrBatchBusy) {
		t.Fatalf("free busy batch = %v, want ErrBatchBusy", err)
	}
	close(release)
	st, err := p.A.Wait(p.Background, id)
	if err != nil || st[0].Status != transfer.StatusCompleted {
		t.Fatalf("after release: %v %v", st, err)
	}
	if err := p.A.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
}

// TestMixedOutcomes: one batch where some requests fail and others complete;
// every request ends in a terminal state and only the passed ones land.
func TestMixedOutcomes(t *testing.T) {
	p, h := pair(t)
	a, b := p.RA.Bytes(), p.RB.Bytes()
	for i := range a[:64*1024] {
		a[i] = byte(i%251 + 1)
	}
	h.SetHook(func(ctx context.Context, c loopback.Call) loopback.Fault {
		if (c.Addr-p.RB.Addr())/4096%3 == 0 {
			return loopback.Fail
		}
		return loopback.Pass
	})
	const n = 16
	reqs := make([]transfer.Request, n)
	for i := range reqs {
		reqs[i] = transfer.Request{Op: transfer.Write, Source: p.RA.Addr() + uint64(i*4096), Target: p.BHandle, TargetOffset: p.RB.Addr() + uint64(i*4096), Length: 4096}
	}
	id, _ := p.A.AllocateBatch(n)
	if err := p.A.Submit(id, reqs); err != nil {
		t.Fatal(err)
	}
	st, err := p.A.Wait(p.Background, id)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		landed := bytes.Equal(b[i*4096:(i+1)*4096], a[i*4096:(i+1)*4096])
		if i%3 == 0 {
			if s.Status != transfer.StatusFailed || landed {
				t.Errorf("req %d: status %v landed %v, want FAILED and untouched", i, s.Status, landed)
			}
		} else if s.Status != transfer.StatusCompleted || !landed {
			t.Errorf("req %d: status %v landed %v, want COMPLETED and landed", i, s.Status, landed)
		}
	}
}

// TestCloseDuringSubmits closes an engine while goroutines keep submitting
// writes through it: every transfer completes with the source's bytes or
// fails with ErrClosed (or the cancellation Close causes), none hangs, and
// -race finds no Submit adding to the in-flight count Close waits on.
func TestCloseDuringSubmits(t *testing.T) {
	p, _ := pair(t)
	a := p.RA.Bytes()
	for i := range a[:64<<10] {
		a[i] = byte(i*7 + 1)
	}
	const workers = 4
	started := make(chan struct{}, workers)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			off := uint64(w) * (16 << 10)
			req := transfer.Request{Op: transfer.Write, Source: p.RA.Addr() + off, Target: p.BHandle, TargetOffset: p.RB.Addr() + off, Length: 16 << 10}
			for n := 0; ; n++ {
				if n == 1 {
					started <- struct{}{}
				}
				if err := p.A.TransferSync(p.Background, []transfer.Request{req}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range workers {
		<-started
	}
	require.NoError(t, p.A.Close())
	for range workers {
		select {
		case err := <-errs:
			require.True(t, errors.Is(err, transfer.ErrClosed) || errors.Is(err, context.Canceled), "after Close: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("a transfer submitted around Close hung")
		}
	}
	require.Equal(t, a[:64<<10], p.RB.Bytes()[:64<<10], "writes that completed before Close")
	require.ErrorIs(t, p.A.TransferSync(p.Background, []transfer.Request{{Op: transfer.Write, Source: p.RA.Addr(), Target: p.BHandle, TargetOffset: p.RB.Addr(), Length: 1}}), transfer.ErrClosed)
}
