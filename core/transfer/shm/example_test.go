package shm_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/transfer"
	"github.com/mooncake-go/mooncake/core/transfer/shm"
)

// Two transports in one process stand in for two engines on one host: the
// target registers a memfd-backed buffer, the initiator dials it from the
// published address and writes into it.
func Example() {
	target := &testTarget{} // an engine's Registry in real use
	buf, err := memory.MapShared(1<<16, "example")
	if err != nil {
		panic(err)
	}
	defer buf.Close()
	target.add(buf.Bytes(), buf)

	server := shm.New(shm.Config{})
	if err := server.Listen("seg-b", target); err != nil {
		panic(err)
	}
	defer server.Close()
	desc := metadata.SegmentDesc{Name: "seg-b"}
	var rpc metadata.RPCMeta
	server.Publish(&desc, &rpc)
	fmt.Println(desc.Protocol, strings.HasPrefix(rpc.IPOrHostName, "unix:@mooncake-shm-seg-b-"), rpc.RPCPort)

	client := shm.New(shm.Config{})
	peer, err := client.Dial(context.Background(), desc, rpc)
	if err != nil {
		panic(err)
	}
	defer peer.Close()
	if err := peer.Do(context.Background(), transfer.Write, []byte("hello"), buf.Addr()+100); err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", buf.Bytes()[100:105])
	fmt.Println(server.Stats().FDsSent)
	// Output:
	// shm true 0
	// hello
	// 1
}
