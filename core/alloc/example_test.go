package alloc_test

import (
	"errors"
	"fmt"

	"github.com/mooncake-go/mooncake/core/alloc"
)

func ExampleAllocator() {
	// One 64 KiB segment; the caller would hold the segment's lock here.
	a, err := alloc.New(64 << 10)
	if err != nil {
		panic(err)
	}
	small, _ := a.Alloc(100, 0)      // a partial block at offset 0
	block, _ := a.Alloc(8<<10, 4096) // padded to the next 4 KiB boundary
	fmt.Println(small, block)        // the 100..4095 padding stays free
	pad, _ := a.Alloc(3000, 0)       // best fit: goes into the padding
	fmt.Println(pad)

	if _, err := a.Alloc(1<<20, 0); errors.Is(err, alloc.ErrNoSpace) {
		fmt.Println(err)
	}
	for _, off := range []uint64{small, block, pad} {
		if err := a.Free(off); err != nil {
			panic(err)
		}
	}
	s := a.Stats()
	fmt.Println(s.Used, s.Free, s.FreeRanges, s.LargestFree)
	// Output:
	// 0 4096
	// 100
	// alloc: no space: size 1048576 bytes, align 1 bytes (largest free range 53248 bytes)
	// 0 65536 1 65536
}
