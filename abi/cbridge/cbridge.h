/*
 * cbridge.h - internal C helpers of package cbridge (not installed, not
 * exported from libmooncake.so: the version script exports mc_* only, and
 * these are mcgo_*).
 */
#ifndef MOONCAKE_CBRIDGE_H
#define MOONCAKE_CBRIDGE_H

#include <stddef.h>
#include <stdint.h>

/* Size of the per-thread last-error buffer, NUL included. */
#define MCGO_ERR_BUF_SIZE 1024

/* mcgo_set_error copies msg[0..n) into this thread's last-error buffer,
 * truncating (ending in "...") past MCGO_ERR_BUF_SIZE-1 bytes. msg is not
 * retained; NULL with n == 0 stores "". */
void mcgo_set_error(const char* msg, size_t n);

/* mcgo_clear_error stores "" in this thread's last-error buffer. */
void mcgo_clear_error(void);

/* mcgo_environ returns the C library's environ (NULL-terminated array of
 * "NAME=value" strings), as getenv sees it now. Not retained: copy what
 * you read before the next setenv/putenv. */
char** mcgo_environ(void);

#endif
