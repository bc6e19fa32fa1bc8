// Package capi exports the LMCache connector's C ABI (abi/include/mooncake/
// lmcache.h, prefix mc_lmcache_) from libmooncake.so: the trampolines of
// capi.c convert handles and addresses to integers and call the
// mcgo_lmcache_* exports of exports.go, which validate every pointer and
// length and call package lmcache. No panic crosses into C
// (cbridge.Guard) and no Go pointer is kept by C.
package capi
