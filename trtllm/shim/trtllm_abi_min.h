// trtllm_abi_min.h - the part of TensorRT-LLM's transfer-agent interface
// (namespace tensorrt_llm::executor::kv_cache) that a KV-cache transfer
// agent library implements, written from shared/specs/trtllm-agent.md for
// one interface generation, chosen with MCGO_TRTLLM_GEN:
//
//   2 (G2b): TransferStatus::wait(timeout_ms) -> TransferState; AgentDesc
//            holds one string; BaseAgentConfig up to backendParams.
//   3 (G3, TensorRT-LLM main in 2026): + TransferStatus::release() and
//            getLastStatusStr(); AgentDesc with VRAM regions and a bounce
//            handshake; BaseAgentConfig with rank, worldSize,
//            agentBufferSizeMb, bounceParams.
//
// TensorRT-LLM ships no such header to us; this one is ours and only
// layout-compatible: the same data members in the same order with the same
// standard-library types, and the same virtual methods in the same order
// (BaseTransferAgent slots 2-12, TransferStatus 2-5), so the same vtables.
// Nothing here is defined out of line in TensorRT-LLM: the wrapper does not
// link libtensorrt_llm.
#ifndef MOONCAKE_GO_TRTLLM_ABI_MIN_H
#define MOONCAKE_GO_TRTLLM_ABI_MIN_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#ifndef MCGO_TRTLLM_GEN
#define MCGO_TRTLLM_GEN 3
#endif
#if MCGO_TRTLLM_GEN != 2 && MCGO_TRTLLM_GEN != 3
#error "MCGO_TRTLLM_GEN must be 2 (G2b) or 3 (G3)"
#endif

namespace tensorrt_llm::executor::kv_cache {

enum class MemoryType : uint8_t { kDRAM, kVRAM, kBLK, kOBJ, kFILE };
enum class TransferOp : uint8_t { kREAD, kWRITE };
enum class TransferState : uint8_t { kIN_PROGRESS, kSUCCESS, kFAILURE };

class MemoryDesc {
 public:
  MemoryDesc(uintptr_t addr, size_t len, uint32_t deviceId) : mAddr(addr), mLen(len), mDeviceId(deviceId) {}
  MemoryDesc(void* addr, size_t len, uint32_t deviceId)
      : mAddr(reinterpret_cast<uintptr_t>(addr)), mLen(len), mDeviceId(deviceId) {}
  uintptr_t getAddr() const noexcept { return mAddr; }
  size_t getLen() const noexcept { return mLen; }
  uint32_t getDeviceId() const noexcept { return mDeviceId; }

 private:
  uintptr_t mAddr;
  size_t mLen;
  uint32_t mDeviceId;
};

class MemoryDescs {
 public:
  MemoryDescs(MemoryType type, std::vector<MemoryDesc> descs) : mType(type), mDescs(std::move(descs)) {}
  MemoryType getType() const noexcept { return mType; }
  std::vector<MemoryDesc> const& getDescs() const noexcept { return mDescs; }

 private:
  MemoryType mType;
  std::vector<MemoryDesc> mDescs;
};

using TransferDescs = MemoryDescs;
using RegisterDescs = MemoryDescs;
using SyncMessage = std::string;
using ConnectionInfoType = std::string;

#if MCGO_TRTLLM_GEN >= 3
struct VramRegionMeta {
  uintptr_t baseAddr;
  size_t totalLen;
  size_t chunkSize;
};
#endif

class AgentDesc {
 public:
  explicit AgentDesc(std::string backendAgentDesc) : mBackendAgentDesc(std::move(backendAgentDesc)) {}
  std::string const& getBackendAgentDesc() const noexcept { return mBackendAgentDesc; }

 private:
  std::string mBackendAgentDesc;
#if MCGO_TRTLLM_GEN >= 3
  std::vector<VramRegionMeta> mVramRegions;
  std::string mBounceHandshake;
#endif
};

class TransferRequest {
 public:
  TransferRequest(TransferOp op, TransferDescs src, TransferDescs dst, std::string const& remoteName,
                  std::optional<SyncMessage> syncMessage = std::nullopt)
      : mOp(op), mSrcDescs(std::move(src)), mDstDescs(std::move(dst)), mRemoteName(remoteName),
        mSyncMessage(std::move(syncMessage)) {}
  TransferOp getOp() const noexcept { return mOp; }
  TransferDescs const& getSrcDescs() const noexcept { return mSrcDescs; }
  TransferDescs const& getDstDescs() const noexcept { return mDstDescs; }
  std::string const& getRemoteName() const noexcept { return mRemoteName; }
  std::optional<SyncMessage> getSyncMessage() const noexcept { return mSyncMessage; }

 private:
  TransferOp mOp;
  TransferDescs mSrcDescs;
  TransferDescs mDstDescs;
  std::string mRemoteName;
  std::optional<SyncMessage> mSyncMessage;
};

struct BaseAgentConfig {
  std::string mName;
  bool useProgThread;
  bool multiThread;
  bool useListenThread;
  bool enableTelemetry;
  std::unordered_map<std::string, std::string> backendParams;
#if MCGO_TRTLLM_GEN >= 3
  std::optional<int> rank;
  std::optional<int> worldSize;
  size_t agentBufferSizeMb{0};
  std::unordered_map<std::string, std::string> bounceParams;
#endif
};

class TransferStatus {
 public:
  virtual ~TransferStatus() = default;                                      // 0, 1
  virtual bool isCompleted() const = 0;                                     // 2
  virtual TransferState wait(int64_t timeout_ms = -1) const = 0;            // 3
#if MCGO_TRTLLM_GEN >= 3
  virtual bool release() { return false; }                                  // 4
  virtual std::string getLastStatusStr() const { return {}; }               // 5
#endif
};

class BaseTransferAgent {
 public:
  virtual ~BaseTransferAgent() = default;                                                           // 0, 1
  virtual void registerMemory(RegisterDescs const& descs) = 0;                                      // 2
  virtual void deregisterMemory(RegisterDescs const& descs) = 0;                                    // 3
  virtual void loadRemoteAgent(std::string const& name, AgentDesc const& agentDesc) = 0;           // 4
  virtual void loadRemoteAgent(std::string const& name, ConnectionInfoType const& connectionInfo) = 0;  // 5
  virtual void invalidateRemoteAgent(std::string const& name) = 0;                                  // 6
  virtual AgentDesc getLocalAgentDesc() = 0;                                                        // 7
  virtual ConnectionInfoType getLocalConnectionInfo() = 0;                                          // 8
  virtual std::unique_ptr<TransferStatus> submitTransferRequests(TransferRequest const& request) = 0;  // 9
  virtual void notifySyncMessage(std::string const& name, SyncMessage const& syncMessage) = 0;     // 10
  virtual std::unordered_map<std::string, std::vector<SyncMessage>> getNotifiedSyncMessages() = 0;  // 11
  virtual bool checkRemoteDescs(std::string const& name, MemoryDescs const& memoryDescs) = 0;       // 12
};

// Layout checks against shared/specs/trtllm-agent.md section 2.
static_assert(sizeof(MemoryDesc) == 24);
static_assert(sizeof(MemoryDescs) == 32);
static_assert(sizeof(TransferRequest) == 144);
#if MCGO_TRTLLM_GEN >= 3
static_assert(sizeof(AgentDesc) == 88);
static_assert(sizeof(BaseAgentConfig) == 176);
#else
static_assert(sizeof(AgentDesc) == 32);
static_assert(sizeof(BaseAgentConfig) == 96);
#endif

}  // namespace tensorrt_llm::executor::kv_cache

// The factory TensorRT-LLM looks up in libtensorrt_llm_mooncake_wrapper.so
// (extern "C", returning a C++ object by value, as TensorRT-LLM declares it).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type-c-linkage"
extern "C" std::unique_ptr<tensorrt_llm::executor::kv_cache::BaseTransferAgent> createMooncakeTransferAgent(
    tensorrt_llm::executor::kv_cache::BaseAgentConfig const* config);
#pragma GCC diagnostic pop

#endif  // MOONCAKE_GO_TRTLLM_ABI_MIN_H
