// libplugin_MOONCAKE_GO.so: mooncake-go's NIXL backend plugin. NIXL loads
// it from its plugin directory (NIXL_PLUGIN_DIR; `mooncake install-plugin
// nixl --dir DIR` copies it there) and names the backend after the file:
// "MOONCAKE_GO". The class below implements NIXL's backend engine
// interface (nixl_abi_min.h, NIXL 1.x) by forwarding every method to the
// mc_nixl_* functions of libmooncake.so (abi/include/mooncake/nixl.h),
// found beside this file through its RUNPATH ($ORIGIN). No exception and
// no Go panic crosses into NIXL: every method catches, every mc_nixl_*
// call returns a status code, mapped here to nixl_status_t.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>

#include "mooncake/nixl.h"
#include "nixl_abi_min.h"

#define MCGO_EXPORT __attribute__((visibility("default")))

namespace {

const char kPluginName[] = "MOONCAKE_GO";
const char kPluginVersion[] = "1.0.0";

// log reports a failed call with the library's reason (mc_last_error is
// per thread, so it is read right after the call).
void log(const char* what, int rc) {
  std::fprintf(stderr, "[mooncake-go NIXL backend] %s failed (%d): %s\n", what, rc, mc_last_error());
}

// status maps an mc_nixl_* status code to nixl_status_t (nixl.h).
nixl_status_t status(int rc) {
  switch (rc) {
    case MC_OK:
      return NIXL_SUCCESS;
    case MC_ERR_INVALID_ARGUMENT:
    case MC_ERR_INVALID_HANDLE:
    case MC_ERR_ADDRESS_NOT_REGISTERED:
      return NIXL_ERR_INVALID_PARAM;
    case MC_ERR_NOT_FOUND:
      return NIXL_ERR_NOT_FOUND;
    case MC_ERR_UNSUPPORTED:
      return NIXL_ERR_NOT_SUPPORTED;
    case MC_NIXL_ERR_REMOTE_DISCONNECT:
      return NIXL_ERR_REMOTE_DISCONNECT;
    case MC_NIXL_ERR_REPOST_ACTIVE:
      return NIXL_ERR_REPOST_ACTIVE;
    case MC_NIXL_ERR_MISMATCH:
      return NIXL_ERR_MISMATCH;
    case MC_NIXL_ERR_NOT_ALLOWED:
      return NIXL_ERR_NOT_ALLOWED;
    case MC_NIXL_ERR_CANCELED:
      return NIXL_ERR_CANCELED;
  }
  return NIXL_ERR_BACKEND;
}

// checked logs a failure of what and returns its nixl_status_t.
nixl_status_t checked(const char* what, int rc) {
  if (rc != MC_OK) {
    log(what, rc);
  }
  return status(rc);
}

// take moves an mc_buf_t's bytes into a string and frees it.
std::string take(mc_buf_t& b) {
  std::string s;
  if (b.data != nullptr && b.len > 0) {
    s.assign(static_cast<const char*>(b.data), b.len);
  }
  mc_buf_free(&b);
  return s;
}

// u32 reads a little-endian u32 at p.
uint32_t u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// unpack splits the (u32 length, bytes)* pairs of s; false if truncated.
bool unpack(const std::string& s, std::vector<std::pair<std::string, std::string>>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  auto field = [&](std::string& f) {
    if (n - i < 4) return false;
    uint32_t len = u32(p + i);
    i += 4;
    if (n - i < len) return false;
    f.assign(s.data() + i, len);
    i += len;
    return true;
  };
  while (i < n) {
    std::pair<std::string, std::string> kv;
    if (!field(kv.first) || !field(kv.second)) return false;
    out.push_back(std::move(kv));
  }
  return true;
}

// GoMD carries the Go side's metadata id (registration or loaded md).
struct GoMD : nixlBackendMD {
  explicit GoMD(uint64_t i) : nixlBackendMD(true), id(i) {}
  uint64_t id;
};

// GoReq carries the Go side's request id.
struct GoReq : nixlBackendReqH {
  explicit GoReq(uint64_t i) : id(i) {}
  uint64_t id;
  bool logged = false;  // its failure was logged once
};

// flatten converts a NIXL descriptor list to the flat array nixl.h takes.
void flatten(const nixl_meta_dlist_t& l, std::vector<mc_nixl_desc_t>& out) {
  out.resize(static_cast<size_t>(l.descCount()));
  for (int i = 0; i < l.descCount(); i++) {
    const nixlMetaDesc& d = l[i];
    const auto* md = static_cast<const GoMD*>(d.metadataP);
    out[static_cast<size_t>(i)] = mc_nixl_desc_t{d.addr, d.len, d.devId, md != nullptr ? md->id : 0};
  }
}

class McgoEngine : public nixlBackendEngine {
 public:
  explicit McgoEngine(const nixlBackendInitParams* p) : nixlBackendEngine(p) {
    std::vector<mc_nixl_kv_t> kvs;
    if (p->customParams != nullptr) {
      for (const auto& [k, v] : *p->customParams) {
        kvs.push_back(mc_nixl_kv_t{k.data(), k.size(), v.data(), v.size()});
      }
    }
    uint32_t flags = (p->enableProgTh ? 1u : 0u) | (p->enableTelemetry_ ? 2u : 0u);
    int rc = mc_nixl_create(localAgent.data(), localAgent.size(), kvs.data(), kvs.size(), flags, p->pthrDelay, &e_);
    if (rc != MC_OK) {
      log("create backend engine", rc);
      initErr = true;
      e_ = nullptr;
      return;
    }
    if (mc_nixl_caps(e_, &caps_) != MC_OK) {
      initErr = true;
    }
  }

  ~McgoEngine() override {
    if (e_ != nullptr) {
      checked("destroy backend engine", mc_nixl_destroy(e_));
    }
    std::lock_guard<std::mutex> g(mu_);
    for (GoMD* m : mds_) delete m;
  }

  bool supportsRemote() const override { return caps_ & MC_NIXL_CAP_REMOTE; }
  bool supportsLocal() const override { return caps_ & MC_NIXL_CAP_LOCAL; }
  bool supportsNotif() const override { return caps_ & MC_NIXL_CAP_NOTIF; }

  nixl_mem_list_t getSupportedMems() const override {
    nixl_mem_list_t out;
    try {
      for (int m = DRAM_SEG; m <= FILE_SEG; m++) {
        if (caps_ & (1u << (8 + m))) out.push_back(static_cast<nixl_mem_t>(m));
      }
    } catch (...) {
    }
    return out;
  }

  nixl_status_t registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem, nixlBackendMD*& out) override {
    try {
      uint64_t id = 0;
      int rc = mc_nixl_register(e_, mem.addr, mem.len, mem.devId, nixl_mem, mem.metaInfo.data(), mem.metaInfo.size(), &id);
      if (rc != MC_OK) return checked("registerMem", rc);
      out = keep(new GoMD(id));
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t deregisterMem(nixlBackendMD* meta) override {
    try {
      GoMD* m = release(meta);
      if (m == nullptr) return NIXL_ERR_INVALID_PARAM;
      int rc = mc_nixl_deregister(e_, m->id);
      delete m;
      return checked("deregisterMem", rc);
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t connect(const std::string& remote_agent) override {
    try {
      return checked("connect", mc_nixl_connect(e_, remote_agent.data(), remote_agent.size()));
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t disconnect(const std::string& remote_agent) override {
    try {
      return checked("disconnect", mc_nixl_disconnect(e_, remote_agent.data(), remote_agent.size()));
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  // unloadMD never dereferences input: NIXL may pass an md whose
  // registration it already deregistered, or one it unloaded before.
  nixl_status_t unloadMD(nixlBackendMD* input) override {
    try {
      GoMD* m = release(input);
      if (m == nullptr) return NIXL_SUCCESS;
      int rc = mc_nixl_unload_md(e_, m->id);
      delete m;
      return checked("unloadMD", rc);
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* opt_args) const override {
    try {
      thread_local std::vector<mc_nixl_desc_t> l, r;
      flatten(local, l);
      flatten(remote, r);
      const std::string* custom = opt_args != nullptr ? &opt_args->customParam : nullptr;
      uint64_t id = 0;
      int rc = mc_nixl_prep_xfer(e_, operation, local.getType(), l.data(), l.size(), remote.getType(), r.data(), r.size(),
                                 remote_agent.data(), remote_agent.size(), custom != nullptr ? custom->data() : nullptr,
                                 custom != nullptr ? custom->size() : 0, &id);
      if (rc != MC_OK) return checked("prepXfer", rc);
      handle = new GoReq(id);
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                         const nixl_meta_dlist_t& remote, const std::string& remote_agent, nixlBackendReqH*& handle,
                         const nixl_opt_b_args_t* opt_args) const override {
    try {
      auto* req = static_cast<GoReq*>(handle);
      if (req == nullptr) return NIXL_ERR_INVALID_PARAM;
      thread_local std::vector<mc_nixl_desc_t> l, r;
      flatten(local, l);
      flatten(remote, r);
      bool notif = opt_args != nullptr && opt_args->hasNotif;
      int32_t state = 0;
      int rc = mc_nixl_post_xfer(e_, req->id, operation, l.data(), l.size(), r.data(), r.size(), notif ? 1 : 0,
                                 notif ? opt_args->notifMsg.data() : nullptr, notif ? opt_args->notifMsg.size() : 0,
                                 &state);
      if (rc != MC_OK) return checked("postXfer", rc);
      req->logged = false;
      return state == MC_NIXL_XFER_DONE ? NIXL_SUCCESS : NIXL_IN_PROG;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t checkXfer(nixlBackendReqH* handle) const override {
    try {
      auto* req = static_cast<GoReq*>(handle);
      if (req == nullptr) return NIXL_ERR_INVALID_PARAM;
      int32_t state = 0;
      int rc = mc_nixl_check_xfer(e_, req->id, &state);
      if (rc != MC_OK) {
        if (!req->logged) log("transfer", rc);
        req->logged = true;
        return status(rc);
      }
      return state == MC_NIXL_XFER_DONE ? NIXL_SUCCESS : NIXL_IN_PROG;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t releaseReqH(nixlBackendReqH* handle) const override {
    try {
      auto* req = static_cast<GoReq*>(handle);
      if (req == nullptr) return NIXL_ERR_INVALID_PARAM;
      int rc = mc_nixl_release_req(e_, req->id);
      if (rc == MC_NIXL_ERR_REPOST_ACTIVE) return NIXL_ERR_REPOST_ACTIVE;  // NIXL retries later
      delete req;
      return checked("releaseReqH", rc);
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t getPublicData(const nixlBackendMD* meta, std::string& str) const override {
    try {
      const auto* m = static_cast<const GoMD*>(meta);
      if (m == nullptr) return NIXL_ERR_INVALID_PARAM;
      mc_buf_t b{nullptr, 0};
      int rc = mc_nixl_public_data(e_, m->id, &b);
      if (rc != MC_OK) return checked("getPublicData", rc);
      str = take(b);
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t getConnInfo(std::string& str) const override {
    try {
      mc_buf_t b{nullptr, 0};
      int rc = mc_nixl_conn_info(e_, &b);
      if (rc != MC_OK) return checked("getConnInfo", rc);
      str = take(b);
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t loadRemoteConnInfo(const std::string& remote_agent, const std::string& remote_conn_info) override {
    try {
      return checked("loadRemoteConnInfo", mc_nixl_load_remote_conn(e_, remote_agent.data(), remote_agent.size(),
                                                                    remote_conn_info.data(), remote_conn_info.size()));
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t loadRemoteMD(const nixlBlobDesc& input, const nixl_mem_t& nixl_mem, const std::string& remote_agent,
                             nixlBackendMD*& output) override {
    try {
      uint64_t id = 0;
      int rc = mc_nixl_load_remote_md(e_, input.addr, input.len, input.devId, nixl_mem, input.metaInfo.data(),
                                      input.metaInfo.size(), remote_agent.data(), remote_agent.size(), &id);
      if (rc != MC_OK) return checked("loadRemoteMD", rc);
      output = keep(new GoMD(id));
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t loadLocalMD(nixlBackendMD* input, nixlBackendMD*& output) override {
    try {
      const auto* m = static_cast<const GoMD*>(input);
      if (m == nullptr) return NIXL_ERR_INVALID_PARAM;
      uint64_t id = 0;
      int rc = mc_nixl_load_local_md(e_, m->id, &id);
      if (rc != MC_OK) return checked("loadLocalMD", rc);
      output = keep(new GoMD(id));
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t getNotifs(notif_list_t& notif_list) override {
    try {
      if (!notif_list.empty()) return NIXL_ERR_INVALID_PARAM;
      mc_buf_t b{nullptr, 0};
      int rc = mc_nixl_get_notifs(e_, &b);
      if (rc != MC_OK) return checked("getNotifs", rc);
      if (!unpack(take(b), notif_list)) return NIXL_ERR_MISMATCH;
      return NIXL_SUCCESS;
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

  nixl_status_t genNotif(const std::string& remote_agent, const std::string& msg) const override {
    try {
      return checked("genNotif", mc_nixl_gen_notif(e_, remote_agent.data(), remote_agent.size(), msg.data(), msg.size()));
    } catch (...) {
      return NIXL_ERR_UNKNOWN;
    }
  }

 private:
  // keep records m as ours; release forgets it (nullptr if it is not ours).
  GoMD* keep(GoMD* m) {
    std::lock_guard<std::mutex> g(mu_);
    mds_.insert(m);
    return m;
  }
  GoMD* release(nixlBackendMD* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = mds_.find(static_cast<GoMD*>(p));
    if (it == mds_.end()) return nullptr;
    GoMD* m = *it;
    mds_.erase(it);
    return m;
  }

  mc_nixl_engine_t* e_ = nullptr;
  uint32_t caps_ = 0;
  std::mutex mu_;
  std::unordered_set<GoMD*> mds_;
};

// hostFamily finds the loaded libnixl.so and tells its ABI family: D (NIXL
// 1.x) when it exports nixlAgent::releaseMemView(void*) const, else 0
// (older). Without a libnixl.so in the process (a static build), D.
uint32_t hostFamily() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* n = info->dlpi_name;
        const char* base = n != nullptr ? std::strrchr(n, '/') : nullptr;
        if (base != nullptr && std::strcmp(base + 1, "libnixl.so") == 0) {
          *static_cast<std::string*>(data) = n;
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty()) return MC_NIXL_FAMILY_D;
  void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return MC_NIXL_FAMILY_D;
  bool d = dlsym(h, "_ZNK9nixlAgent14releaseMemViewEPv") != nullptr;
  dlclose(h);
  return d ? MC_NIXL_FAMILY_D : 0;
}

nixlBackendEngine* createEngine(const nixlBackendInitParams* p) {
  try {
    return new McgoEngine(p);
  } catch (...) {
    return nullptr;
  }
}

// refuseEngine is create_engine when the host is not a NIXL we implement.
nixlBackendEngine* refuseEngine(const nixlBackendInitParams*) { return nullptr; }

void destroyEngine(nixlBackendEngine* e) {
  try {
    delete e;
  } catch (...) {
  }
}

const char* pluginName() { return kPluginName; }
const char* pluginVersion() { return kPluginVersion; }

nixl_b_params_t backendOptions() {
  nixl_b_params_t out;
  try {
    mc_buf_t b{nullptr, 0};
    if (mc_nixl_backend_options(&b) != MC_OK) return out;
    std::vector<std::pair<std::string, std::string>> kvs;
    if (unpack(take(b), kvs)) {
      for (auto& kv : kvs) out.insert(std::move(kv));
    }
  } catch (...) {
  }
  return out;
}

nixl_mem_list_t backendMems() {
  try {
    return nixl_mem_list_t{DRAM_SEG};
  } catch (...) {
    return {};
  }
}

nixlBackendPlugin plugin = {MCGO_NIXL_PLUGIN_API_VERSION, createEngine, destroyEngine, pluginName, pluginVersion,
                            backendOptions, backendMems};

}  // namespace

extern "C" MCGO_EXPORT nixlBackendPlugin* nixl_plugin_init() {
  uint32_t lib = mc_nixl_abi_version();
  int rc = (lib >> 16) != MC_NIXL_ABI_VERSION_MAJOR ? MC_NIXL_ERR_HOST_FAMILY
                                                    : mc_nixl_check_host(MC_NIXL_ABI_VERSION, hostFamily());
  if (rc != MC_OK) {
    std::fprintf(stderr, "[mooncake-go NIXL backend] not usable in this process: %s\n",
                 (lib >> 16) != MC_NIXL_ABI_VERSION_MAJOR ? "libmooncake.so's mc_nixl ABI major differs from the plugin's"
                                                          : mc_last_error());
    plugin.create_engine = refuseEngine;
  }
  return &plugin;
}

extern "C" MCGO_EXPORT void nixl_plugin_fini() {}
