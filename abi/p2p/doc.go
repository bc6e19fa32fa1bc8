// Package p2p exports the C ABI of mooncake/p2p.h (mc_p2p_*) over
// core/p2p: upstream mooncake-p2p-store's operations for C and Python
// callers. The trampolines in p2p.c turn store handles into integers and
// buffer addresses into uintptr_t; glue.go holds the logic, testable
// without cgo callers. Handles live in cbridge.Handles; no panic crosses
// the boundary (cbridge.Guard).
package p2p
