package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store"
	"github.com/mooncake-go/mooncake/core/store/client"
	"github.com/mooncake-go/mooncake/core/store/localcluster"
)

// TestCloseDuringStagedCalls closes a client while 4 goroutines keep
// putting and getting 1 MiB values through its local buffer (Put, Get,
// BatchPut, BatchGetAlloc): Close waits for the calls in flight instead of
// unmapping the buffer under their copies (which faulted the process);
// each Get of a value whose Put returned nil gives its bytes; calls after
// Close fail with ILLEGAL_CLIENT and leave no scratch range behind.
func TestCloseDuringStagedCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 2, SegmentSize: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(lc.Close)
	c, err := lc.NewClient(ctx, client.Config{LocalBufferSize: 8 << 20})
	require.NoError(t, err)

	value := func(key string) []byte {
		v := bytes.Repeat([]byte(key+"|"), (1<<20)/(len(key)+1)+1)
		return v[:1<<20]
	}
	const workers = 4
	var started sync.WaitGroup
	started.Add(workers)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("close/%d/%d", w, i)
				if err := c.Put(ctx, key, value(key), nil); err != nil {
					errs <- err
					return
				}
				got, err := c.Get(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, value(key)) {
					errs <- fmt.Errorf("key %s: Get gave other bytes than its Put", key)
					return
				}
				bk := []string{key + "/b"}
				if perr := c.BatchPut(ctx, bk, [][]byte{value(bk[0])}, nil)[0]; perr != nil {
					errs <- perr
					return
				}
				var out []byte
				n, gerrs := c.BatchGetAlloc(ctx, bk, func(_ int, size uint64) ([]byte, error) {
					out = make([]byte, size)
					return out, nil
				})
				if gerrs[0] != nil {
					errs <- gerrs[0]
					return
				}
				if !bytes.Equal(out[:n[0]], value(bk[0])) {
					errs <- fmt.Errorf("key %s: BatchGet gave other bytes than its BatchPut", bk[0])
					return
				}
				if i == 0 {
					started.Done()
				}
			}
		}()
	}
	started.Wait()
	require.NoError(t, c.Close())
	for range workers {
		select {
		case err := <-errs:
			var se *store.Error
			require.True(t, errors.As(err, &se), "after Close: %v (%T)", err, err)
			assert.Contains(t, []store.ErrorCode{store.IllegalClient, store.RPCFail, store.TransferFail}, se.Code, "after Close: %v", err)
		case <-ctx.Done():
			t.Fatal("a call around Close hung")
		}
	}
	err = c.Put(ctx, "after", value("after"), nil)
	var se *store.Error
	require.True(t, errors.As(err, &se), "Put after Close: %v", err)
	assert.Equal(t, store.IllegalClient, se.Code)
	assert.ErrorContains(t, err, "store client is closed")
}
