// Package capi exports the SGLang HiCache backend's C ABI
// (abi/include/mooncake/sglang.h, prefix mc_sglang_) from libmooncake.so:
// the trampolines of capi.c convert handles and addresses to integers and
// call the mcgo_sglang_* exports of exports.go, which validate every
// pointer and length and call package sglang. No panic crosses into C
// (cbridge.Guard) and no Go pointer is kept by C.
package capi
