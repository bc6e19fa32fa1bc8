package metadata

import "strings"

// Key-layout constants, as upstream's TransferMetadata.
const (
	// KeyPrefix is the common prefix of every metadata key ("mooncake/").
	KeyPrefix = "mooncake/"
	// SegmentDir is the sub-directory of RAM segment descriptors ("ram/").
	SegmentDir = "ram/"
	// RPCMetaDir is the sub-directory of RPC endpoint records ("rpc_meta/").
	RPCMetaDir = "rpc_meta/"
)

// ClusterPrefix returns the key prefix of a cluster: "mooncake/" when cluster
// is empty, else "mooncake/<cluster>/". As upstream (MC_METADATA_CLUSTER_ID),
// a trailing '/' is added to cluster only if it is missing.
func ClusterPrefix(cluster string) string {
	if cluster == "" {
		return KeyPrefix
	}
	if !strings.HasSuffix(cluster, "/") {
		cluster += "/"
	}
	return KeyPrefix + cluster
}

// SegmentKey returns the key of a segment descriptor, mirroring upstream's
// TransferMetadata::getFullMetadataKey: "mooncake/[<cluster>/]ram/<segment>"
// for a plain name, and "mooncake/[<cluster>/]<segment>" verbatim for a name
// that already contains '/' (e.g. "nvmeof/host1"). An empty segment yields
// the bare "…/ram/" directory key, as upstream does; the descriptor helpers
// reject an empty name before calling it. It never fails.
func SegmentKey(cluster, segment string) string {
	if strings.Contains(segment, "/") {
		return ClusterPrefix(cluster) + segment
	}
	return ClusterPrefix(cluster) + SegmentDir + segment
}

// RPCMetaKey returns the key of a server's RPC endpoint record,
// "mooncake/[<cluster>/]rpc_meta/<server>", as upstream's rpc_meta_prefix_.
// The server name is used verbatim, '/' included. It never fails.
func RPCMetaKey(cluster, server string) string {
	return ClusterPrefix(cluster) + RPCMetaDir + server
}
