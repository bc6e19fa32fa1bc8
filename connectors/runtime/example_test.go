package runtime_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/connectors/runtime"
	"github.com/mooncake-go/mooncake/core/kvpool"
)

// memPool is an in-memory pool: the Exister of the scheduler half and the
// Loader and Saver of the worker half.
type memPool map[string]int

func (m memPool) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		_, out[i] = m[k]
	}
	return out, nil
}

func (m memPool) Load(ctx context.Context, keys []string, blocks []int) []error {
	return make([]error, len(keys)) // copy m[keys[i]] into blocks[i]
}

func (m memPool) Save(ctx context.Context, keys []string, blocks []int) []error {
	return make([]error, len(keys))
}

// One request whose first two blocks are in the pool, loaded
// synchronously within the step.
func Example() {
	ctx := context.Background()
	ns := kvpool.Namespace{Model: "m", DType: "bf16", Layout: "l", TPSize: 1, BlockTokens: 16}
	hashes := [][]byte{{1}, {2}, {3}}
	pool := memPool{ns.Key(hashes[0]): 0, ns.Key(hashes[1]): 0}

	s, _ := runtime.NewScheduler(runtime.SchedulerConfig{Shards: []kvpool.Namespace{ns}, Exister: pool, SyncLoad: true})
	w, _ := runtime.NewWorker(runtime.WorkerConfig{Namespace: ns, Loader: pool, Saver: pool})
	defer w.Close()

	// Scheduler half.
	hit, _ := s.Lookup(ctx, runtime.LookupRequest{ReqID: "r1", BlockHashes: hashes, NumTokens: 50})
	fmt.Printf("hit %d tokens, async %v\n", hit.Tokens, hit.Async)
	_ = s.UpdateAfterAlloc("r1", []int{11, 12, 13, 14}, hit.Tokens)
	plan := s.BuildPlan()
	fmt.Println("load", plan.Loads[0].BlockIDs)

	// Worker half, one step.
	_ = w.Start(plan)
	fmt.Println("loaded:", w.WaitForLoad(ctx), "failed blocks", w.FailedBlocks())
	fmt.Println("hold blocks:", s.RequestFinished("r1"))
	// Output:
	// hit 32 tokens, async false
	// load [11 12]
	// loaded: <nil> failed blocks []
	// hold blocks: false
}
