// Package xferagent is the engine-neutral transfer agent behind the
// agent-style adapters: NIXL's backend plugin (libplugin_MOONCAKE_GO.so,
// nixl/capi: one Engine per nixlBackendEngine) and TensorRT-LLM's transfer
// agent (libtensorrt_llm_mooncake_wrapper.so, trtllm/capi: one Engine per
// BaseTransferAgent). An Engine moves bytes with mooncake-go's transfer
// engine over tcp, or by cross-memory attach to a process of the same host
// (cma.go), with P2P handshake metadata (no metadata server: peers find
// each other through the connection info the host framework exchanges
// between agents).
//
// The method names below are NIXL's backend methods each one backs
// (contract: shared/specs/nixl-plugin.md, NIXL 1.5.1 "family D"); the
// TensorRT-LLM adapter maps its calls onto the same methods
// (shared/specs/trtllm-agent.md), with PrepRaw for its requests, which name
// remote ranges without per-region metadata.
//
// What an Engine keeps, all under one mutex:
//   - registrations (registerMem): ranges of this process's memory,
//     registered with the transfer engine so peers can reach them;
//   - metadata ids (loadLocalMD, loadRemoteMD): a local id aliases a
//     registration for loopback; a remote id names [addr, addr+len) of a
//     peer agent, taken from the peer's public data;
//   - peers (loadRemoteConnInfo): agent name -> transfer segment name;
//   - requests (prepXfer): the descriptor pairs and the op, posted any
//     number of times (postXfer), each post one transfer batch followed,
//     when asked, by one notification.
//
// Notifications travel over the P2P handshake channel of the target
// engine (p2pmeta FrameNotify), sent by the goroutine that waited for the
// batch: every byte of a WRITE is acknowledged by the target only after it
// landed in the target's memory, so a notification never overtakes its
// data. Agent names and messages are base64-encoded on that channel, so
// any bytes (NUL included) arrive unchanged.
//
// Memory: DRAM always; VRAM only when a CUDA runtime loads
// (core/transfer/cuda), else registerMem fails with "unsupported: ...".
// BLK, OBJ and FILE are unsupported.
package xferagent
