// libtensorrt_llm_mooncake_wrapper.so: mooncake-go's KV-cache transfer
// agent for TensorRT-LLM's MOONCAKE cache transceiver backend. TensorRT-LLM
// dlopens this file by name and calls createMooncakeTransferAgent; the
// classes below implement its BaseTransferAgent and TransferStatus
// (trtllm_abi_min.h, the generation chosen at build time) over the
// mc_trtllm_* functions of libmooncake.so (abi/include/mooncake/trtllm.h),
// found through this file's RUNPATH. Errors become std::runtime_error
// carrying mc_last_error(), as TensorRT-LLM's callers expect; destructors
// and TransferStatus::wait never throw (wait reports kFAILURE).
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "mooncake/trtllm.h"
#include "trtllm_abi_min.h"

#define MCGO_EXPORT __attribute__((visibility("default")))

namespace kvc = tensorrt_llm::executor::kv_cache;

namespace {

[[noreturn]] void raise(const char* what, int rc) {
  throw std::runtime_error(std::string("mooncake-go transfer agent: ") + what + " failed (" + std::to_string(rc) +
                           "): " + mc_last_error());
}

void check(const char* what, int rc) {
  if (rc != MC_OK) raise(what, rc);
}

std::string take(mc_buf_t& b) {
  std::string s;
  if (b.data != nullptr && b.len > 0) s.assign(static_cast<const char*>(b.data), b.len);
  mc_buf_free(&b);
  return s;
}

std::vector<mc_trtllm_desc_t> flat(kvc::MemoryDescs const& d) {
  std::vector<mc_trtllm_desc_t> out;
  out.reserve(d.getDescs().size());
  for (auto const& m : d.getDescs()) out.push_back(mc_trtllm_desc_t{m.getAddr(), m.getLen(), m.getDeviceId(), 0});
  return out;
}

uint32_t u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Agent handles are shared with the status objects, so a status that
// outlives its agent still holds a valid (destroyed-in-Go) handle value:
// the library answers FAILURE for it instead of touching freed memory.
struct Handle {
  mc_trtllm_agent_t* a = nullptr;
  ~Handle() {
    if (a != nullptr) mc_trtllm_agent_destroy(a);
  }
};

class GoTransferStatus final : public kvc::TransferStatus {
 public:
  GoTransferStatus(std::shared_ptr<Handle> h, uint64_t x) : h_(std::move(h)), x_(x) {}
  ~GoTransferStatus() override {
    if (!released_) mc_trtllm_xfer_release(h_->a, x_);
  }

  bool isCompleted() const override {
    int32_t st = MC_TRTLLM_STATE_FAILURE;
    if (mc_trtllm_xfer_test(h_->a, x_, &st) != MC_OK) return true;
    return st != MC_TRTLLM_STATE_IN_PROGRESS;
  }

  kvc::TransferState wait(int64_t timeout_ms) const override {
    int32_t st = MC_TRTLLM_STATE_FAILURE;
    if (mc_trtllm_xfer_wait(h_->a, x_, timeout_ms, &st) != MC_OK) return kvc::TransferState::kFAILURE;
    switch (st) {
      case MC_TRTLLM_STATE_IN_PROGRESS:
        return kvc::TransferState::kIN_PROGRESS;
      case MC_TRTLLM_STATE_SUCCESS:
        return kvc::TransferState::kSUCCESS;
    }
    return kvc::TransferState::kFAILURE;
  }

#if MCGO_TRTLLM_GEN >= 3
  bool release() override {
    if (released_) return true;
    released_ = mc_trtllm_xfer_release(h_->a, x_) == MC_OK;
    return released_;
  }

  std::string getLastStatusStr() const override {
    try {
      mc_buf_t b{nullptr, 0};
      if (mc_trtllm_xfer_error(h_->a, x_, &b) != MC_OK) return mc_last_error();
      return take(b);
    } catch (...) {
      return {};
    }
  }
#endif

 private:
  std::shared_ptr<Handle> h_;
  uint64_t x_;
  bool released_ = false;
};

class GoTransferAgent final : public kvc::BaseTransferAgent {
 public:
  explicit GoTransferAgent(kvc::BaseAgentConfig const& c) : h_(std::make_shared<Handle>()) {
    uint32_t flags = (c.useProgThread ? MC_TRTLLM_FLAG_PROG_THREAD : 0) | (c.multiThread ? MC_TRTLLM_FLAG_MULTI_THREAD : 0) |
                     (c.useListenThread ? MC_TRTLLM_FLAG_LISTEN_THREAD : 0) | (c.enableTelemetry ? MC_TRTLLM_FLAG_TELEMETRY : 0);
    std::vector<mc_trtllm_kv_t> kvs;
    for (auto const& [k, v] : c.backendParams) kvs.push_back(mc_trtllm_kv_t{k.data(), k.size(), v.data(), v.size()});
    check("createMooncakeTransferAgent", mc_trtllm_agent_create(c.mName.data(), c.mName.size(), flags, kvs.data(),
                                                                kvs.size(), &h_->a));
  }

  void registerMemory(kvc::RegisterDescs const& descs) override {
    auto d = flat(descs);
    check("registerMemory", mc_trtllm_register(h_->a, int(descs.getType()), d.data(), d.size()));
  }

  void deregisterMemory(kvc::RegisterDescs const& descs) override {
    auto d = flat(descs);
    check("deregisterMemory", mc_trtllm_deregister(h_->a, int(descs.getType()), d.data(), d.size()));
  }

  void loadRemoteAgent(std::string const& name, kvc::AgentDesc const& agentDesc) override {
    auto const& b = agentDesc.getBackendAgentDesc();
    check("loadRemoteAgent", mc_trtllm_load_remote_desc(h_->a, name.data(), name.size(), b.data(), b.size()));
  }

  void loadRemoteAgent(std::string const& name, kvc::ConnectionInfoType const& connectionInfo) override {
    check("loadRemoteAgent", mc_trtllm_load_remote_conn(h_->a, name.data(), name.size(), connectionInfo.data(),
                                                        connectionInfo.size()));
  }

  void invalidateRemoteAgent(std::string const& name) override {
    check("invalidateRemoteAgent", mc_trtllm_invalidate_remote(h_->a, name.data(), name.size()));
  }

  kvc::AgentDesc getLocalAgentDesc() override {
    mc_buf_t b{nullptr, 0};
    check("getLocalAgentDesc", mc_trtllm_local_agent_desc(h_->a, &b));
    return kvc::AgentDesc(take(b));
  }

  kvc::ConnectionInfoType getLocalConnectionInfo() override {
    mc_buf_t b{nullptr, 0};
    check("getLocalConnectionInfo", mc_trtllm_local_conn_info(h_->a, &b));
    return take(b);
  }

  std::unique_ptr<kvc::TransferStatus> submitTransferRequests(kvc::TransferRequest const& r) override {
    auto src = flat(r.getSrcDescs());
    auto dst = flat(r.getDstDescs());
    if (src.size() != dst.size()) {
      throw std::runtime_error("mooncake-go transfer agent: submitTransferRequests: " + std::to_string(src.size()) +
                               " src descriptors for " + std::to_string(dst.size()) + " dst ones");
    }
    auto msg = r.getSyncMessage();
    uint64_t x = 0;
    check("submitTransferRequests",
          mc_trtllm_submit(h_->a, int(r.getOp()), int(r.getSrcDescs().getType()), src.data(), int(r.getDstDescs().getType()),
                           dst.data(), src.size(), r.getRemoteName().data(), r.getRemoteName().size(),
                           msg ? (msg->empty() ? "" : msg->data()) : nullptr, msg ? msg->size() : 0, &x));
    return std::make_unique<GoTransferStatus>(h_, x);
  }

  void notifySyncMessage(std::string const& name, kvc::SyncMessage const& m) override {
    check("notifySyncMessage", mc_trtllm_notify(h_->a, name.data(), name.size(), m.data(), m.size()));
  }

  std::unordered_map<std::string, std::vector<kvc::SyncMessage>> getNotifiedSyncMessages() override {
    mc_buf_t b{nullptr, 0};
    check("getNotifiedSyncMessages", mc_trtllm_get_notifs(h_->a, &b));
    std::string s = take(b);
    std::unordered_map<std::string, std::vector<kvc::SyncMessage>> out;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size(), i = 0;
    while (n - i >= 4) {
      uint32_t nl = u32(p + i);
      i += 4;
      if (n - i < nl + 4) break;
      std::string name(s.data() + i, nl);
      i += nl;
      uint32_t ml = u32(p + i);
      i += 4;
      if (n - i < ml) break;
      out[name].emplace_back(s.data() + i, ml);
      i += ml;
    }
    return out;
  }

  bool checkRemoteDescs(std::string const& name, kvc::MemoryDescs const& descs) override {
    auto d = flat(descs);
    int rc = mc_trtllm_check_remote(h_->a, name.data(), name.size(), int(descs.getType()), d.data(), d.size());
    if (rc < 0) raise("checkRemoteDescs", rc);
    return rc == 1;
  }

 private:
  std::shared_ptr<Handle> h_;
};

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type-c-linkage"
extern "C" MCGO_EXPORT std::unique_ptr<kvc::BaseTransferAgent> createMooncakeTransferAgent(
    kvc::BaseAgentConfig const* config) {
  if (config == nullptr) throw std::invalid_argument("createMooncakeTransferAgent: config is NULL");
  if ((mc_trtllm_abi_version() >> 16) != MC_TRTLLM_ABI_VERSION_MAJOR) {
    throw std::runtime_error("mooncake-go transfer agent: libmooncake.so's mc_trtllm ABI major differs from the wrapper's");
  }
  check("createMooncakeTransferAgent", mc_trtllm_check_host(MC_TRTLLM_ABI_VERSION, MCGO_TRTLLM_GEN));
  return std::make_unique<GoTransferAgent>(*config);
}
#pragma GCC diagnostic pop
