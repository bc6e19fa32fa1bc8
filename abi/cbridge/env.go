package cbridge

/*
#include "cbridge.h"
*/
import "C"

import (
	"strings"
	"unsafe"
)

// Environ returns the process environment as the C library holds it now
// (libc's environ, what getenv reads), as a name-to-value map for
// connectors/config.LoadOptions.Env and the adapters' settings parsers.
//
// Every export that reads configuration from the environment must use this,
// never os.Getenv or os.Environ: inside an engine process the Go runtime's
// view is wrong. The runtime of a c-shared library keeps pointers into the
// environment block it was handed when the library loaded, and engines
// rewrite that block: vLLM calls setproctitle, which moves environ to the
// heap and overwrites the original block with the process title, so
// os.Getenv("MOONCAKE_CONFIG_PATH") finds nothing (or garbage); variables
// the host sets after the library loaded (Python's os.environ[...] = ...)
// are not seen by the Go runtime either.
//
// Entries without "=" or with an empty name are skipped; for a name that
// appears twice the first wins, as getenv. Safe for concurrent use with
// other readers; like getenv, not with a concurrent setenv in the host.
func Environ() map[string]string {
	env := make(map[string]string)
	p := C.mcgo_environ()
	if p == nil {
		return env
	}
	// unsafe: environ is a NULL-terminated array of C strings owned by the C
	// library; each string is copied (C.GoString) before the next is read
	// and nothing is kept.
	for i := uintptr(0); ; i++ {
		s := *(**C.char)(unsafe.Add(unsafe.Pointer(p), i*unsafe.Sizeof(p)))
		if s == nil {
			break
		}
		k, v, ok := strings.Cut(C.GoString(s), "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := env[k]; !dup {
			env[k] = v
		}
	}
	return env
}
