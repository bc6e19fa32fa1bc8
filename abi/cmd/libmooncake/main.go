// Command libmooncake is the one c-shared main of the project: built with
// -buildmode=c-shared it is libmooncake.so, which carries every C ABI of
// mooncake-go (one Go runtime per process, see DESIGN.md). It only imports
// the packages whose //export functions make up those ABIs; the version
// script abi/libmooncake.map keeps the dynamic symbol table to mc_*.
//
// Build (from the repository root; `make lib` does this):
//
//	go build -buildmode=c-shared \
//	  -ldflags "-extldflags -Wl,-soname,libmooncake.so,--version-script=$PWD/abi/libmooncake.map" \
//	  -o build/libmooncake.so ./abi/cmd/libmooncake
package main

import (
	_ "github.com/mooncake-go/mooncake/abi/cbridge"  // mc_last_error, mc_abi_version, mc_buf_free
	_ "github.com/mooncake-go/mooncake/abi/engine"   // mc_te_*
	_ "github.com/mooncake-go/mooncake/abi/p2p"      // mc_p2p_*
	_ "github.com/mooncake-go/mooncake/abi/store"    // mc_store_*
	_ "github.com/mooncake-go/mooncake/lmcache/capi" // mc_lmcache_*
	_ "github.com/mooncake-go/mooncake/nixl/capi"    // mc_nixl_*
	_ "github.com/mooncake-go/mooncake/sglang/capi"  // mc_sglang_*
	_ "github.com/mooncake-go/mooncake/trtllm/capi"  // mc_trtllm_*
	_ "github.com/mooncake-go/mooncake/vllm/capi"    // mc_vllm_*
)

func main() {}
