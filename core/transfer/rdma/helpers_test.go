package rdma

import "github.com/mooncake-go/mooncake/core/metadata"

func metadataDesc() metadata.SegmentDesc {
	return metadata.SegmentDesc{Name: "seg", Protocol: Protocol}
}

func metadataRPC() metadata.RPCMeta { return metadata.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 1} }
