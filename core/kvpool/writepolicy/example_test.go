package writepolicy_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/kvpool/writepolicy"
)

// Write-through-selective stores a block on its second hit only.
func Example() {
	pool := map[string]int{}
	store := func(ctx context.Context, keys []string, blocks []int) []error {
		for i, k := range keys {
			pool[k] = blocks[i]
		}
		return make([]error, len(keys))
	}
	w, _ := writepolicy.New(writepolicy.Config[int]{Policy: writepolicy.WriteThroughSelective, Store: store})
	fmt.Println(w.Offer("k1", 7)) // first hit
	fmt.Println(w.Offer("k1", 7)) // second hit
	w.Flush(context.Background())
	fmt.Println(w.Offer("k1", 7)) // already stored
	c := w.Stats()
	fmt.Println(pool, c.Stored, c.FirstHitDeferred, c.DedupSkipped)
	// Output:
	// deferred
	// queued
	// skipped
	// map[k1:7] 1 1 1
}
