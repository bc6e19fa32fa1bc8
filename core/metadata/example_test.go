package metadata_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

func ExamplePutSegment() {
	ctx := context.Background()
	store := memmeta.New()

	desc := metadata.SegmentDesc{
		Name:            "10.0.0.1:15000",
		Protocol:        "tcp",
		TCPDataPort:     15001,
		TCPProtoVersion: 2,
		Buffers:         []metadata.BufferDesc{{Name: "cpu:0", Addr: 0x7f0000000000, Length: 1 << 20}},
	}
	if err := metadata.PutSegment(ctx, store, "prod", desc); err != nil {
		panic(err)
	}

	key := metadata.SegmentKey("prod", desc.Name)
	raw, _ := store.Get(ctx, key)
	fmt.Println(key)
	fmt.Println(string(raw))

	got, _ := metadata.GetSegment(ctx, store, "prod", desc.Name)
	fmt.Println(got.Buffers[0].Name, got.Buffers[0].Length)
	// Output:
	// mooncake/prod/ram/10.0.0.1:15000
	// {"name":"10.0.0.1:15000","protocol":"tcp","tcp_data_port":15001,"tcp_proto_version":2,"buffers":[{"name":"cpu:0","addr":139637976727552,"length":1048576}]}
	// cpu:0 1048576
}

func ExampleParseConnString() {
	for _, s := range []string{"P2PHANDSHAKE", "etcd://h1:2379,h2:2379", "10.0.0.1:2379", "http://10.0.0.1:8080/metadata"} {
		kind, target, err := metadata.ParseConnString(s)
		fmt.Printf("%s -> %s %q %v\n", s, kind, target, err)
	}
	// Output:
	// P2PHANDSHAKE -> p2p "" <nil>
	// etcd://h1:2379,h2:2379 -> etcd "h1:2379,h2:2379" <nil>
	// 10.0.0.1:2379 -> etcd "10.0.0.1:2379" <nil>
	// http://10.0.0.1:8080/metadata -> http "http://10.0.0.1:8080/metadata" <nil>
}
