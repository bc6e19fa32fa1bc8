package vllm

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store/client"
)

// gatedPool holds every BatchPutFromParts until release is closed,
// telling entered when one arrives; released is set just before the held
// puts go on.
type gatedPool struct {
	Pool
	entered  chan struct{}
	release  chan struct{}
	released atomic.Bool
}

func (g *gatedPool) BatchPutFromParts(ctx context.Context, keys []string, parts [][][]byte, opts *client.PutOptions) []error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
	return g.Pool.BatchPutFromParts(ctx, keys, parts, opts)
}

// TestWorkerSaveAsyncSetting checks mc_save_async: by default
// wait_for_save returns while the step's save still runs; with false it
// returns only after the save is in the pool, and the same step's
// get_finished reports the request finished-sending.
func TestWorkerSaveAsyncSetting(t *testing.T) {
	cl := startPool(t, 16<<20, false)
	c := newPoolClient(t, cl)
	for _, async := range []bool{true, false} {
		t.Run(fmt.Sprintf("mc_save_async=%v", async), func(t *testing.T) {
			s := mustSettings(t, KVBoth, map[string]any{"mc_save_async": async}, nil)
			require.Equal(t, async, s.SaveAsync)
			ctx := testContext(t)
			g := &gatedPool{entered: make(chan struct{}, 1), release: make(chan struct{})}
			open := poolOpener(cl)
			kc := newKVCache(t, 70, testBlocks, testBlockBytes...)
			w := newWorker(s, func(ctx context.Context) (Pool, func() error, error) {
				p, closer, err := open(ctx)
				g.Pool = p
				return g, closer, err
			}, nil)
			t.Cleanup(func() { assert.NoError(t, w.Close()) })
			require.NoError(t, w.RegisterKVCaches(ctx, kc.regions))

			hs := hashes(fmt.Sprintf("sync-save-%v", async), 2)
			require.NoError(t, w.StartLoad(ctx, saveMeta(t, "req", hs, []int{3, 4})))
			returned := make(chan bool, 1) // whether the save was let go before wait_for_save returned
			go func() {
				assert.NoError(t, w.WaitForSave())
				returned <- g.released.Load()
			}()
			<-g.entered // the save runs and is held
			if async {
				assert.False(t, <-returned, "wait_for_save waited for the save")
			}
			g.released.Store(true)
			close(g.release)
			if !async {
				require.True(t, <-returned, "wait_for_save returned before the save")
				found, err := c.BatchIsExist(ctx, s.Namespace(0, 0).Keys(hs))
				require.NoError(t, err)
				assert.Equal(t, []bool{true, true}, found, "keys in the pool when wait_for_save returned")
				f, err := w.GetFinished()
				require.NoError(t, err)
				assert.True(t, slices.Contains(f.Sending, "req"), "the same step's get_finished reports the request: %+v", f)
				return
			}
			collect(t, w, sendingHas("req"))
		})
	}
}
