package p2pmeta_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/p2pmeta"
)

// Two engines' stores in P2P handshake mode: each publishes its own
// descriptor locally, and a Get of the peer's segment key fetches it over
// the handshake channel.
func Example() {
	ctx := context.Background()
	a, err := p2pmeta.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := p2pmeta.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// What transfer.New does for engine b (named b.Name()).
	desc := metadata.SegmentDesc{Name: b.Name(), Protocol: "tcp", TCPDataPort: 15100, TCPProtoVersion: 2,
		Buffers: []metadata.BufferDesc{{Name: "cpu:0", Addr: 0x7f0000000000, Length: 1 << 20}}}
	if err := metadata.PutSegment(ctx, b, "", desc); err != nil {
		panic(err)
	}

	// What engine a's OpenSegment(b.Name()) does.
	got, err := metadata.GetSegment(ctx, a, "", b.Name())
	if err != nil {
		panic(err)
	}
	rpc, _ := metadata.GetRPCMeta(ctx, a, "", b.Name())
	fmt.Println(got.Name == b.Name(), got.Protocol, got.TCPDataPort, len(got.Buffers), rpc.IPOrHostName)
	// Output: true tcp 15100 1 127.0.0.1
}
