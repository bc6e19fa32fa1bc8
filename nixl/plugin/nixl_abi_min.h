// nixl_abi_min.h - the part of NIXL's C++ backend interface that a backend
// plugin touches, written from shared/specs/nixl-plugin.md (sections 1-3,
// 6.3) for NIXL's 1.x ABI ("family D": NIXL 1.0 to 1.5.1 and its 27-slot
// backend vtable). NIXL ships no headers in its wheels; this file is ours,
// and only layout-compatible with NIXL's: the same data members in the
// same order with the same standard-library types (so the same offsets
// with GCC's libstdc++, C++11 string ABI), and the same virtual methods in
// the same order with the same parameter types (so the same vtable slots).
// Names of our own helper members differ where NIXL never reads them.
//
// Nothing here may be defined out of line in NIXL: the shim must not call
// into libnixl (it is not linked against it), so descriptor lists are read
// through their data members only and never constructed or destroyed here.
#ifndef MOONCAKE_GO_NIXL_ABI_MIN_H
#define MOONCAKE_GO_NIXL_ABI_MIN_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if !defined(_GLIBCXX_USE_CXX11_ABI) || _GLIBCXX_USE_CXX11_ABI != 1
#error "NIXL's wheels use libstdc++'s C++11 string ABI: build with -D_GLIBCXX_USE_CXX11_ABI=1"
#endif

// Plugin API version the core checks in nixlBackendPlugin::api_version.
#define MCGO_NIXL_PLUGIN_API_VERSION 1

enum nixl_mem_t { DRAM_SEG = 0, VRAM_SEG = 1, BLK_SEG = 2, OBJ_SEG = 3, FILE_SEG = 4 };
enum nixl_xfer_op_t { NIXL_READ = 0, NIXL_WRITE = 1 };
enum nixl_status_t {
  NIXL_IN_PROG = 1,
  NIXL_SUCCESS = 0,
  NIXL_ERR_NOT_POSTED = -1,
  NIXL_ERR_INVALID_PARAM = -2,
  NIXL_ERR_BACKEND = -3,
  NIXL_ERR_NOT_FOUND = -4,
  NIXL_ERR_MISMATCH = -5,
  NIXL_ERR_NOT_ALLOWED = -6,
  NIXL_ERR_REPOST_ACTIVE = -7,
  NIXL_ERR_UNKNOWN = -8,
  NIXL_ERR_NOT_SUPPORTED = -9,
  NIXL_ERR_REMOTE_DISCONNECT = -10,
  NIXL_ERR_CANCELED = -11,
  NIXL_ERR_NO_TELEMETRY = -12,
};
enum class nixl_thread_sync_t { NIXL_THREAD_SYNC_NONE, NIXL_THREAD_SYNC_STRICT, NIXL_THREAD_SYNC_RW };
enum class nixl_cost_t { ANALYTICAL_BACKEND = 0 };

using nixl_backend_t = std::string;
using nixl_blob_t = std::string;
using nixl_mem_list_t = std::vector<nixl_mem_t>;
using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_query_resp_t = std::optional<nixl_b_params_t>;
using nixlMemViewH = void*;
using notif_list_t = std::vector<std::pair<std::string, std::string>>;

// Descriptors (24, 56, 32 and 64 bytes).
struct nixlBasicDesc {
  uintptr_t addr;
  size_t len;
  uint64_t devId;
};
struct nixlBlobDesc : nixlBasicDesc {
  nixl_blob_t metaInfo;
};
class nixlBackendMD;
struct nixlMetaDesc : nixlBasicDesc {
  nixlBackendMD* metadataP;
};
struct nixlRemoteMetaDesc : nixlMetaDesc {
  std::string remoteAgent;
};

// Layout twin of NIXL's nixlDescList<T>: a vtable pointer (its destructor
// is virtual), the memory type, the descriptors. Read only.
template <class T>
class nixlDescList {
 public:
  nixl_mem_t getType() const { return type; }
  int descCount() const { return static_cast<int>(descs.size()); }
  const T& operator[](int i) const { return descs[static_cast<size_t>(i)]; }

 private:
  nixlDescList() = delete;
  ~nixlDescList() = delete;
  void* vptr_;
  nixl_mem_t type;
  std::vector<T> descs;
};
using nixl_meta_dlist_t = nixlDescList<nixlMetaDesc>;
using nixl_reg_dlist_t = nixlDescList<nixlBlobDesc>;
using nixl_remote_meta_dlist_t = nixlDescList<nixlRemoteMetaDesc>;

// Per-registration / per-remote-region metadata and per-transfer handles:
// the core keeps and passes back these pointers, never deletes them.
class nixlBackendMD {
 public:
  explicit nixlBackendMD(bool is_private) : isPrivateMD(is_private) {}
  virtual ~nixlBackendMD() {}

 protected:
  bool isPrivateMD;
};
class nixlBackendReqH {
 public:
  nixlBackendReqH() {}
  virtual ~nixlBackendReqH() {}
};

struct nixlBackendOptionalArgs {
  nixl_blob_t notifMsg;
  bool hasNotif = false;
  nixl_blob_t customParam;
};
using nixl_opt_b_args_t = nixlBackendOptionalArgs;
struct nixlAgentOptionalArgs;  // estimateXferCost only; never dereferenced

class nixlBackendInitParams {
 public:
  std::string localAgent;
  nixl_backend_t type;
  nixl_b_params_t* customParams;
  bool enableProgTh;
  uint64_t pthrDelay;  // microseconds
  nixl_thread_sync_t syncMode;
  bool enableTelemetry_;
};

// The telemetry events the base class queues (never added to here; only
// the vector's size matters for the layout).
struct mcgoTelemetryEventSlot {
  uint32_t kind;
  uint64_t value;
};

// The backend engine base class: data members as NIXL's (offsets 8, 40,
// 96, 120, 160, 168, 200; 208 bytes), then the 27 vtable slots in family
// D order (0-1 destructor, 2 supportsRemote ... 26 estimateXferCost).
class nixlBackendEngine {
 private:
  nixl_backend_t backendType;
  nixl_b_params_t customParams;
  std::vector<mcgoTelemetryEventSlot> telemetryEvents_;
  std::mutex telemetryEventsMutex_;

 protected:
  bool initErr = false;
  const std::string localAgent;
  const bool enableTelemetry_;

 public:
  explicit nixlBackendEngine(const nixlBackendInitParams* p)
      : backendType(p->type),
        customParams(*p->customParams),
        localAgent(p->localAgent),
        enableTelemetry_(p->enableTelemetry_) {}
  nixlBackendEngine(const nixlBackendEngine&) = delete;
  void operator=(const nixlBackendEngine&) = delete;

  virtual ~nixlBackendEngine() = default;                                       // 0, 1
  bool getInitErr() const noexcept { return initErr; }
  const nixl_backend_t& getType() const noexcept { return backendType; }
  const nixl_b_params_t& getCustomParams() const noexcept { return customParams; }

  virtual bool supportsRemote() const = 0;                                      // 2
  virtual bool supportsLocal() const = 0;                                       // 3
  virtual bool supportsNotif() const = 0;                                       // 4
  virtual nixl_mem_list_t getSupportedMems() const = 0;                         // 5
  virtual nixl_status_t registerMem(const nixlBlobDesc& mem, const nixl_mem_t& nixl_mem,
                                    nixlBackendMD*& out) = 0;                   // 6
  virtual nixl_status_t deregisterMem(nixlBackendMD* meta) = 0;                 // 7
  virtual nixl_status_t connect(const std::string& remote_agent) = 0;          // 8
  virtual nixl_status_t disconnect(const std::string& remote_agent) = 0;       // 9
  virtual nixl_status_t unloadMD(nixlBackendMD* input) = 0;                     // 10
  virtual nixl_status_t prepXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                 const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                 nixlBackendReqH*& handle,
                                 const nixl_opt_b_args_t* opt_args = nullptr) const = 0;  // 11
  virtual nixl_status_t postXfer(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                 const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                 nixlBackendReqH*& handle,
                                 const nixl_opt_b_args_t* opt_args = nullptr) const = 0;  // 12
  virtual nixl_status_t checkXfer(nixlBackendReqH* handle) const = 0;           // 13
  virtual nixl_status_t releaseReqH(nixlBackendReqH* handle) const = 0;         // 14
  virtual nixl_status_t prepMemView(const nixl_remote_meta_dlist_t&, nixlMemViewH&,
                                    const nixl_opt_b_args_t* = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }  // 15
  virtual nixl_status_t prepMemView(const nixl_meta_dlist_t&, nixlMemViewH&,
                                    const nixl_opt_b_args_t* = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }  // 16
  virtual void releaseMemView(nixlMemViewH) const {}                            // 17
  virtual nixl_status_t getPublicData(const nixlBackendMD* meta, std::string& str) const {
    return NIXL_ERR_BACKEND;
  }  // 18
  virtual nixl_status_t getConnInfo(std::string& str) const { return NIXL_ERR_BACKEND; }  // 19
  virtual nixl_status_t loadRemoteConnInfo(const std::string& remote_agent,
                                           const std::string& remote_conn_info) {
    return NIXL_ERR_BACKEND;
  }  // 20
  virtual nixl_status_t loadRemoteMD(const nixlBlobDesc& input, const nixl_mem_t& nixl_mem,
                                     const std::string& remote_agent, nixlBackendMD*& output) {
    return NIXL_ERR_BACKEND;
  }  // 21
  virtual nixl_status_t loadLocalMD(nixlBackendMD* input, nixlBackendMD*& output) {
    return NIXL_ERR_BACKEND;
  }  // 22
  virtual nixl_status_t getNotifs(notif_list_t& notif_list) { return NIXL_ERR_BACKEND; }  // 23
  virtual nixl_status_t genNotif(const std::string& remote_agent, const std::string& msg) const {
    return NIXL_ERR_BACKEND;
  }  // 24
  virtual nixl_status_t queryMem(const nixl_reg_dlist_t& descs,
                                 std::vector<nixl_query_resp_t>& resp) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }  // 25
  virtual nixl_status_t estimateXferCost(const nixl_xfer_op_t& operation, const nixl_meta_dlist_t& local,
                                         const nixl_meta_dlist_t& remote, const std::string& remote_agent,
                                         nixlBackendReqH* const& handle, std::chrono::microseconds& duration,
                                         std::chrono::microseconds& err_margin, nixl_cost_t& method,
                                         const nixlAgentOptionalArgs* extra_params = nullptr) const {
    return NIXL_ERR_NOT_SUPPORTED;
  }  // 26
};

// The descriptor nixl_plugin_init returns (56 bytes).
struct nixlBackendPlugin {
  int api_version;
  nixlBackendEngine* (*create_engine)(const nixlBackendInitParams* init_params);
  void (*destroy_engine)(nixlBackendEngine* engine);
  const char* (*get_plugin_name)();
  const char* (*get_plugin_version)();
  nixl_b_params_t (*get_backend_options)();
  nixl_mem_list_t (*get_backend_mems)();
};

// Layout checks against the offsets in shared/specs/nixl-plugin.md.
static_assert(sizeof(nixlBasicDesc) == 24);
static_assert(sizeof(nixlBlobDesc) == 56);
static_assert(sizeof(nixlMetaDesc) == 32);
static_assert(sizeof(nixlRemoteMetaDesc) == 64);
static_assert(sizeof(nixlDescList<nixlMetaDesc>) == 40);
static_assert(sizeof(nixlBackendOptionalArgs) == 72);
static_assert(offsetof(nixlBackendOptionalArgs, hasNotif) == 32);
static_assert(offsetof(nixlBackendInitParams, customParams) == 64);
static_assert(offsetof(nixlBackendInitParams, pthrDelay) == 80);
static_assert(offsetof(nixlBackendInitParams, syncMode) == 88);
static_assert(offsetof(nixlBackendInitParams, enableTelemetry_) == 92);
static_assert(sizeof(nixlBackendEngine) == 208);
static_assert(sizeof(nixlBackendPlugin) == 56);

#endif  // MOONCAKE_GO_NIXL_ABI_MIN_H
