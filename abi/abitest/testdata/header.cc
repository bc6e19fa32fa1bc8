// header.cc - the headers compile as C++ too (see c_test.go).
#include "mooncake/common.h"
#include "mooncake/transfer_engine.h"

static_assert(sizeof(mc_te_request_t) == 40, "mc_te_request_t layout");
static_assert(sizeof(mc_te_status_t) == 16, "mc_te_status_t layout");

int main() { return mc_te_abi_version() == MC_TE_ABI_VERSION ? 0 : 1; }
