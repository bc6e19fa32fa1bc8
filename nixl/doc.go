// Package nixl is the Go side of mooncake-go's NIXL backend plugin
// (libplugin_MOONCAKE_GO.so, issue 14): one Engine per nixlBackendEngine
// that NIXL creates, moving bytes with mooncake-go's transfer engine over
// tcp, with P2P handshake metadata (no metadata server: peers find each
// other through the connection info NIXL exchanges between agents).
//
// The C++ shim in nixl/plugin implements NIXL's backend class and calls the
// mc_nixl_* functions of abi/include/mooncake/nixl.h (package nixl/capi),
// which call the methods here one for one. Contract: shared/specs/nixl-plugin.md
// (NIXL 1.5.1, "family D" ABI); method names below name the backend method
// each one backs.
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
package nixl
