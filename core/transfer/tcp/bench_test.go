package tcp_test

import (
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/transfertest"
)

func BenchmarkTCP(b *testing.B) {
	for _, op := range []transfer.Opcode{transfer.Write, transfer.Read} {
		for _, bs := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/block=%dKiB/batch=128", op, bs>>10), func(b *testing.B) {
				transfertest.BenchWrite(b, newTCP, op, bs, 128)
			})
		}
	}
}

func BenchmarkMemcpy(b *testing.B) {
	for _, bs := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("block=%dKiB/batch=128", bs>>10), func(b *testing.B) {
			src, dst := make([]byte, bs*128), make([]byte, bs*128)
			b.SetBytes(int64(len(src)))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}
