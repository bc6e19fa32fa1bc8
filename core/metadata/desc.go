package metadata

import (
	"context"
	"encoding/json"
	"fmt"
)

// BufferDesc is one registered buffer of a segment, as upstream's
// TransferMetadata::BufferDesc for the TCP transport. Name is the buffer's
// location (e.g. "cpu:0", "cuda:1"), Addr its virtual address in the owning
// process and Length its size in bytes. Fields other transports add (rkey,
// lkey, shm_name, offset) are ignored on decode and not written.
//
// IPCHandle is a Mooncake-Go extension (our prefix; upstream ignores it):
// for a device buffer, the opaque token with which a process on the same
// host maps it (the CUDA IPC handle, hex, and the buffer's offset in its
// allocation; see package transfer/cuda). Empty for host memory.
type BufferDesc struct {
	Name      string `json:"name"`
	Addr      uint64 `json:"addr"`
	Length    uint64 `json:"length"`
	IPCHandle string `json:"mc_cuda_ipc,omitempty"`
}

// SegmentDesc is a RAM segment descriptor, the JSON document upstream
// publishes under SegmentKey (TransferMetadata::SegmentDesc, encoded by
// encodeSegmentDesc) with the same field names.
//
// Only the fields every transport shares and the TCP transport needs are
// modelled; fields of other transports (devices, priority_matrix,
// rdma_server_name, cxl_*) are ignored on decode. Upstream writes a
// multi-protocol segment's protocol as a JSON array; decoding such a
// document fails with a *json.UnmarshalTypeError wrapped by GetSegment.
//
// TCPProtoVersion 0 means the field was absent; upstream reads an absent
// tcp_proto_version as 1 (legacy framing) and so should callers.
//
// Timestamp is upstream's "last encode time" and is not part of a
// descriptor's identity; the helpers neither set nor compare it (the caller
// owns the clock).
type SegmentDesc struct {
	Name            string       `json:"name"`
	Protocol        string       `json:"protocol"`
	TCPDataPort     int          `json:"tcp_data_port,omitempty"`
	TCPProtoVersion int          `json:"tcp_proto_version,omitempty"`
	Timestamp       string       `json:"timestamp,omitempty"`
	Buffers         []BufferDesc `json:"buffers"`

	// Mooncake-Go extensions, with our own prefix (upstream ignores unknown
	// fields). HostID identifies the machine (equal ids = same host);
	// ShmSocket is the unix socket of the engine's shm transport, offered to
	// same-host peers.
	HostID    string `json:"mc_host_id,omitempty"`
	ShmSocket string `json:"mc_shm_socket,omitempty"`
}

// MarshalJSON encodes d with upstream's field names. A nil Buffers slice is
// written as [] (upstream always writes an array), never null. It fails only
// if encoding/json does.
func (d SegmentDesc) MarshalJSON() ([]byte, error) {
	type plain SegmentDesc // drops the method set, so no recursion
	p := plain(d)
	if p.Buffers == nil {
		p.Buffers = []BufferDesc{}
	}
	return json.Marshal(p)
}

// RPCMeta is the RPC endpoint record upstream's TransferMetadata publishes
// under RPCMetaKey at init and removes on destroy (RpcMetaDesc).
type RPCMeta struct {
	IPOrHostName string `json:"ip_or_host_name"`
	RPCPort      int    `json:"rpc_port"`
}

// PutSegment encodes desc as JSON and stores it under
// SegmentKey(cluster, desc.Name), as upstream's updateSegmentDesc. It returns
// an error wrapping ErrInvalidKey if desc.Name is empty, and otherwise the
// Store's error, wrapped with the key. It does not retry.
func PutSegment(ctx context.Context, s Store, cluster string, desc SegmentDesc) error {
	if desc.Name == "" {
		return fmt.Errorf("metadata: put segment: empty segment name: %w", ErrInvalidKey)
	}
	return putJSON(ctx, s, "segment descriptor", SegmentKey(cluster, desc.Name), desc)
}

// GetSegment reads and decodes the descriptor stored under
// SegmentKey(cluster, segment), as upstream's getSegmentDesc. It returns an
// error wrapping ErrNotFound when the key is absent, ErrInvalidKey for an
// empty name, and a decode error naming the key for a document that is not a
// segment descriptor.
func GetSegment(ctx context.Context, s Store, cluster, segment string) (*SegmentDesc, error) {
	if segment == "" {
		return nil, fmt.Errorf("metadata: get segment: empty segment name: %w", ErrInvalidKey)
	}
	var desc SegmentDesc
	if err := getJSON(ctx, s, "segment descriptor", SegmentKey(cluster, segment), &desc); err != nil {
		return nil, err
	}
	return &desc, nil
}

// DeleteSegment removes the descriptor under SegmentKey(cluster, segment), as
// upstream's removeSegmentDesc. It returns an error wrapping ErrNotFound when
// the backend reports the key absent, and ErrInvalidKey for an empty name.
func DeleteSegment(ctx context.Context, s Store, cluster, segment string) error {
	if segment == "" {
		return fmt.Errorf("metadata: delete segment: empty segment name: %w", ErrInvalidKey)
	}
	return deleteKey(ctx, s, "segment descriptor", SegmentKey(cluster, segment))
}

// PutRPCMeta encodes meta and stores it under RPCMetaKey(cluster, server), as
// upstream's addRpcMetaEntry. It returns an error wrapping ErrInvalidKey for
// an empty server name, otherwise the Store's error wrapped with the key.
func PutRPCMeta(ctx context.Context, s Store, cluster, server string, meta RPCMeta) error {
	if server == "" {
		return fmt.Errorf("metadata: put rpc meta: empty server name: %w", ErrInvalidKey)
	}
	return putJSON(ctx, s, "rpc meta", RPCMetaKey(cluster, server), meta)
}

// GetRPCMeta reads the RPC endpoint record of server, as upstream's
// getRpcMetaEntry. It returns an error wrapping ErrNotFound when the key is
// absent, ErrInvalidKey for an empty server name, and a decode error naming
// the key for a malformed document.
func GetRPCMeta(ctx context.Context, s Store, cluster, server string) (RPCMeta, error) {
	if server == "" {
		return RPCMeta{}, fmt.Errorf("metadata: get rpc meta: empty server name: %w", ErrInvalidKey)
	}
	var meta RPCMeta
	if err := getJSON(ctx, s, "rpc meta", RPCMetaKey(cluster, server), &meta); err != nil {
		return RPCMeta{}, err
	}
	return meta, nil
}

// DeleteRPCMeta removes the RPC endpoint record of server, as upstream's
// removeRpcMetaEntry on engine destroy. It returns an error wrapping
// ErrNotFound when the backend reports the key absent, and ErrInvalidKey for
// an empty server name.
func DeleteRPCMeta(ctx context.Context, s Store, cluster, server string) error {
	if server == "" {
		return fmt.Errorf("metadata: delete rpc meta: empty server name: %w", ErrInvalidKey)
	}
	return deleteKey(ctx, s, "rpc meta", RPCMetaKey(cluster, server))
}

func putJSON(ctx context.Context, s Store, what, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("metadata: encode %s for key %q: %w", what, key, err)
	}
	if err := s.Put(ctx, key, b); err != nil {
		return fmt.Errorf("metadata: put %s at key %q: %w", what, key, err)
	}
	return nil
}

func getJSON(ctx context.Context, s Store, what, key string, v any) error {
	b, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("metadata: get %s at key %q: %w", what, key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("metadata: decode %s at key %q: %w", what, key, err)
	}
	return nil
}

func deleteKey(ctx context.Context, s Store, what, key string) error {
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("metadata: delete %s at key %q: %w", what, key, err)
	}
	return nil
}
