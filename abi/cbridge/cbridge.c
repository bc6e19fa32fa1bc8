// Per-thread last error, the version function and mc_buf_free of common.h.
//
// The last-error text lives in C thread-local storage, not in Go: Go code
// runs on goroutines that are not tied to OS threads, but while C calls an
// exported Go function the goroutine stays on the calling thread, so a
// C call made from it (mcgo_set_error) writes that thread's buffer.
//
// The buffer uses the global-dynamic TLS model: libmooncake.so is loaded with
// dlopen (ctypes, purego), where static TLS space is scarce; dynamic TLS is
// allocated per thread on first use and freed when the thread exits.

#include <stdlib.h>
#include <string.h>

#include "mooncake/common.h"
#include "cbridge.h"

static __thread char mcgo_err_buf[MCGO_ERR_BUF_SIZE] __attribute__((tls_model("global-dynamic")));

void mcgo_set_error(const char* msg, size_t n) {
  char* buf = mcgo_err_buf;
  if (msg == NULL) {
    n = 0;
  }
  if (n >= MCGO_ERR_BUF_SIZE) {
    static const char ell[] = "...";
    size_t keep = MCGO_ERR_BUF_SIZE - sizeof(ell);
    memcpy(buf, msg, keep);
    memcpy(buf + keep, ell, sizeof(ell)); /* copies the NUL too */
    return;
  }
  if (n > 0) {
    memcpy(buf, msg, n);
  }
  buf[n] = '\0';
}

void mcgo_clear_error(void) { mcgo_err_buf[0] = '\0'; }

const char* mc_last_error(void) { return mcgo_err_buf; }

uint32_t mc_abi_version(void) { return MC_ABI_VERSION; }

void mc_buf_free(mc_buf_t* buf) {
  if (buf == NULL) {
    return;
  }
  free(buf->data);
  buf->data = NULL;
  buf->len = 0;
}

/* The C library's current environment (see env.go): what getenv reads,
 * including variables set after the process started, and still valid after
 * setproctitle moved it off the stack. */
extern char** environ;

char** mcgo_environ(void) { return environ; }
