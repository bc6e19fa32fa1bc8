package policy_test

import (
	"fmt"

	"github.com/mooncake-go/mooncake/core/store/policy"
)

func ExampleLRUBound() {
	full := func(int) int { return 512 }
	l := policy.NewLRUBound(3 * 512) // room for three full blocks
	l.Request([]uint64{0, 1, 2}, full)
	b, tok := l.Request([]uint64{0, 1, 3}, full) // evicts block 2
	fmt.Println(b, tok)
	b, tok = l.Request([]uint64{0, 1, 2}, full) // 2 is gone
	fmt.Println(b, tok)
	r := l.Result()
	fmt.Printf("%d/%d blocks, ratio %.3f\n", r.BlocksHit, r.BlocksTotal, r.BlockHitRatio)
	// Output:
	// 2 1024
	// 2 1024
	// 4/9 blocks, ratio 0.444
}
