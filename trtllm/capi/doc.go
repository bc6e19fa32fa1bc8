// Package capi exports the mc_trtllm_* C ABI of
// abi/include/mooncake/trtllm.h from libmooncake.so (imported by
// abi/cmd/libmooncake): the functions the C++ shim
// libtensorrt_llm_mooncake_wrapper.so (trtllm/shim) calls for each method of
// TensorRT-LLM's BaseTransferAgent and TransferStatus, over the
// engine-neutral transfer agent of connectors/xferagent. capi.c holds the
// public C symbols, trampolines to the Go exports (mcgo_trtllm_*) here.
//
// What TensorRT-LLM's interface adds to the agent: registrations
// reference-counted by address (two managers of one process register the
// same staging buffers), the agent descriptor and the connection info are
// both the agent's connection string, transfers name remote ranges without
// per-region metadata (PrepRaw), and settings come from the environment
// (TLLM_MOONCAKE_IP_ADDR, TRTLLM_MOONCAKE_INTERFACE, as TensorRT-LLM's own
// Mooncake wrapper) or the agent config's backend parameters.
package capi
