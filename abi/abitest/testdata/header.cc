// header.cc - the headers compile as C++ too, drafts included (see c_test.go),
// and the structs have the layouts the Go and Python bindings assume.
#include "mooncake/common.h"
#include "mooncake/lmcache.h"
#include "mooncake/nixl.h"
#include "mooncake/p2p.h"
#include "mooncake/sglang.h"
#include "mooncake/store.h"
#include "mooncake/transfer_engine.h"
#include "mooncake/trtllm.h"
#include "mooncake/vllm.h"

static_assert(sizeof(mc_te_request_t) == 40, "mc_te_request_t layout");
static_assert(sizeof(mc_te_status_t) == 16, "mc_te_status_t layout");
static_assert(sizeof(mc_buf_t) == 16, "mc_buf_t layout");
static_assert(sizeof(mc_vllm_region_t) == 32, "mc_vllm_region_t layout");
static_assert(sizeof(mc_vllm_stats_t) == 40, "mc_vllm_stats_t layout");
static_assert(sizeof(mc_sglang_stats_t) == 88, "mc_sglang_stats_t layout");
static_assert(sizeof(mc_nixl_desc_t) == 32, "mc_nixl_desc_t layout");
static_assert(sizeof(mc_nixl_kv_t) == 32, "mc_nixl_kv_t layout");
static_assert(sizeof(mc_trtllm_desc_t) == 24, "mc_trtllm_desc_t layout");
static_assert(sizeof(mc_trtllm_kv_t) == 32, "mc_trtllm_kv_t layout");
static_assert(MC_STORE_MAX_KEY_LEN == 4096, "key limit");
static_assert(MC_VLLM_ABI_VERSION_MAJOR == 1, "vllm.h is implemented (1.x)");
static_assert(MC_NIXL_ABI_VERSION_MAJOR == 1, "nixl.h is implemented (1.x)");
static_assert(MC_SGLANG_ABI_VERSION_MAJOR == 1, "sglang.h is implemented (1.x)");
static_assert(MC_TRTLLM_ABI_VERSION_MAJOR == 1, "trtllm.h is implemented (1.x)");
static_assert(MC_LMCACHE_ABI_VERSION_MAJOR == 1, "lmcache.h is implemented (1.x)");

int main() {
  mc_buf_t b = {nullptr, 0};
  mc_buf_free(&b);  // a no-op on an empty buffer
  mc_buf_free(nullptr);
  return mc_te_abi_version() == MC_TE_ABI_VERSION && mc_store_abi_version() == MC_STORE_ABI_VERSION &&
                 mc_vllm_abi_version() == MC_VLLM_ABI_VERSION && mc_nixl_abi_version() == MC_NIXL_ABI_VERSION &&
                 mc_sglang_abi_version() == MC_SGLANG_ABI_VERSION && mc_trtllm_abi_version() == MC_TRTLLM_ABI_VERSION &&
                 mc_lmcache_abi_version() == MC_LMCACHE_ABI_VERSION &&
                 mc_abi_version() == MC_ABI_VERSION
             ? 0
             : 1;
}
