// Package abitest tests libmooncake.so from the outside, as a foreign caller
// would: it loads the built library with purego (dlopen + dlsym, no cgo, no
// import of the abi packages) and calls the mc_* functions of
// abi/include/mooncake/*.h, whose constants it reads from the headers
// themselves.
//
// The library is build/libmooncake.so at the repository root (`make lib`),
// or the file named by MC_LIBMOONCAKE; without it the tests skip and say so.
//
// The process then holds two Go runtimes, the test's and the library's.
// Go supports one per process; this package is the one place that accepts
// two, to test the ABI in-process (the Python tests load the library into
// processes that have no other).
package abitest
