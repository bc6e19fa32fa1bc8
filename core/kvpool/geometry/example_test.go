package geometry_test

import (
	"fmt"

	"github.com/mooncake-go/mooncake/core/kvpool/geometry"
)

func Example() {
	m, err := geometry.Lookup("llama3-70b")
	if err != nil {
		panic(err)
	}
	block := 512 * m.BytesPerToken() // one trace block
	fmt.Println(geometry.FormatSize(m.BytesPerToken()), "per token,", geometry.FormatSize(block), "per block")

	seg, err := geometry.ParseSize("4gb") // binary, as in MOONCAKE_GLOBAL_SEGMENT_SIZE
	if err != nil {
		panic(err)
	}
	fmt.Println(seg, "bytes hold", seg/block, "blocks")
	// Output:
	// 320.0 KiB per token, 160.0 MiB per block
	// 4294967296 bytes hold 25 blocks
}
