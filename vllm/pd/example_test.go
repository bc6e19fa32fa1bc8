package pd_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/vllm/pd"
)

// Example pushes one request's KV (blocks 1-3 of one region) from a
// prefill worker into blocks 4-6 of a decode worker, on 127.0.0.1.
func Example() {
	const blockBytes, numBlocks = 4096, 8
	pm, _ := memory.Map(blockBytes * numBlocks) // producer KV region
	defer pm.Close()
	cm, _ := memory.Map(blockBytes * numBlocks) // consumer KV region
	defer cm.Close()
	copy(pm.Bytes()[1*blockBytes:], "kv of the prompt")

	ctx := context.Background()
	prod, err := pd.NewProducer(ctx, pd.Config{
		EngineID:      "prefill-0",
		BootstrapAddr: "127.0.0.1:0", // this worker serves it (DP 0, TP 0); port 0 picks one
		Regions:       []pd.Region{{Mem: pm.Bytes(), BlockBytes: blockBytes, NumBlocks: numBlocks}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer prod.Close()
	cons, err := pd.NewConsumer(ctx, pd.Config{
		EngineID: "decode-0",
		Regions:  []pd.Region{{Mem: cm.Bytes(), BlockBytes: blockBytes, NumBlocks: numBlocks}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cons.Close()

	_ = prod.Ready("xfer-1", []int{1, 2, 3})                                   // prefill done
	_ = cons.Recv("xfer-1", prod.BootstrapAddr(), "prefill-0", []int{4, 5, 6}) // decode asks
	tick := time.NewTicker(time.Millisecond)                                   // poll Finished once per engine step
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-tick.C {
		done, failed := cons.Finished()
		if len(done) > 0 {
			fmt.Println(done, len(failed), string(cm.Bytes()[4*blockBytes:][:16]))
			break
		}
	}
	// Output: [xfer-1] 0 kv of the prompt
}
