/*
 * smoke.c - a plain C caller of libmooncake.so, compiled against the headers
 * with warnings as errors and linked by soname (see c_test.go).
 *
 * usage: smoke METADATA_URL
 * Creates an engine, registers two buffers, WRITEs one into the other through
 * the engine's own segment, checks the bytes and a few error paths, and
 * exits 0 on success (1 with a message otherwise).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/transfer_engine.h"

#define N (1 << 16)

static int fail(const char* what, int rc) {
  fprintf(stderr, "smoke: %s: rc %d: %s\n", what, rc, mc_last_error());
  return 1;
}

#define CHECK(call)                 \
  do {                              \
    int rc_ = (call);               \
    if (rc_ != MC_OK) {             \
      return fail(#call, rc_);      \
    }                               \
  } while (0)

#define EXPECT(call, want)                                            \
  do {                                                                \
    int rc_ = (call);                                                 \
    if (rc_ != (want) || mc_last_error()[0] == '\0') {                \
      fprintf(stderr, "smoke: %s = %d, want %d with a reason\n", #call, rc_, (want)); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: smoke METADATA_URL\n");
    return 2;
  }
  if (mc_abi_version() != MC_ABI_VERSION || mc_te_abi_version() != MC_TE_ABI_VERSION) {
    fprintf(stderr, "smoke: version %#x/%#x, header %#x/%#x\n", mc_abi_version(), mc_te_abi_version(),
            MC_ABI_VERSION, MC_TE_ABI_VERSION);
    return 1;
  }
  EXPECT(mc_te_create(NULL, "smoke", NULL, 0, 0, NULL), MC_ERR_INVALID_ARGUMENT);

  mc_te_engine_t* e = NULL;
  CHECK(mc_te_create(argv[1], "smoke-c", "127.0.0.1", 0, 0, &e));
  if (mc_last_error()[0] != '\0') {
    fprintf(stderr, "smoke: success left mc_last_error %s\n", mc_last_error());
    return 1;
  }
  CHECK(mc_te_install_transport(e, "tcp"));

  unsigned char* src = malloc(N);
  unsigned char* dst = calloc(1, N);
  if (src == NULL || dst == NULL) {
    return 1;
  }
  for (int i = 0; i < N; i++) {
    src[i] = (unsigned char)(i * 31 + 7);
  }
  CHECK(mc_te_register_local_memory(e, src, N, "cpu:0", 0));
  CHECK(mc_te_register_local_memory(e, dst, N, "cpu:0", 1));
  EXPECT(mc_te_register_local_memory(e, src + 1, 1, NULL, 0), MC_ERR_ADDRESS_OVERLAPPED);

  int32_t self = -1;
  CHECK(mc_te_open_segment(e, "smoke-c", &self));
  if (self != MC_TE_LOCAL_SEGMENT) {
    fprintf(stderr, "smoke: own segment id %d\n", (int)self);
    return 1;
  }
  uint64_t batch = MC_TE_INVALID_BATCH;
  CHECK(mc_te_allocate_batch(e, 1, &batch));
  mc_te_request_t req = {MC_TE_OPCODE_WRITE, src, MC_TE_LOCAL_SEGMENT, (uint64_t)(uintptr_t)dst, N};
  CHECK(mc_te_submit(e, batch, &req, 1));
  mc_te_status_t st = {MC_TE_STATUS_WAITING, 0};
  while (st.status == MC_TE_STATUS_WAITING) {
    CHECK(mc_te_get_status(e, batch, 0, &st));
  }
  if (st.status != MC_TE_STATUS_COMPLETED || st.transferred_bytes != N) {
    fprintf(stderr, "smoke: status %d, %llu bytes: %s\n", st.status, (unsigned long long)st.transferred_bytes,
            mc_last_error());
    return 1;
  }
  if (memcmp(src, dst, N) != 0) {
    fprintf(stderr, "smoke: bytes differ\n");
    return 1;
  }
  CHECK(mc_te_free_batch(e, batch));
  EXPECT(mc_te_free_batch(e, batch), MC_ERR_INVALID_HANDLE);
  CHECK(mc_te_unregister_local_memory(e, src));
  CHECK(mc_te_unregister_local_memory(e, dst));
  CHECK(mc_te_destroy(e));
  EXPECT(mc_te_destroy(e), MC_ERR_INVALID_HANDLE);
  free(src);
  free(dst);
  puts("smoke: ok");
  return 0;
}
