// Package capi exports the vLLM connector's C ABI (abi/include/mooncake/
// vllm.h, prefix mc_vllm_) from libmooncake.so: the trampolines of
// capi.c convert handles and addresses to integers and call the mcgo_vllm_*
// exports of exports.go, which decode the JSON arguments and call package
// vllm. No panic crosses into C (cbridge.Guard), every pointer and
// length is validated, and no Go pointer is kept by C.
package capi
