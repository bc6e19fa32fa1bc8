/*
 * store_smoke.c - a plain C caller of the store ABI of libmooncake.so,
 * compiled against every header (drafts included) with warnings as errors
 * and linked by soname (see c_test.go).
 *
 * usage: store_smoke METADATA_URL MASTER_ADDR
 * Sets up a client that contributes 16 MiB, puts and gets values by copy and
 * zero copy, in batches, checks the bytes and some error paths, and exits 0
 * on success (1 with a message otherwise).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/lmcache.h"
#include "mooncake/nixl.h"
#include "mooncake/sglang.h"
#include "mooncake/store.h"
#include "mooncake/transfer_engine.h"
#include "mooncake/trtllm.h"
#include "mooncake/vllm.h"

#define BLOCKS 8
#define BLK (64 << 10)

static int fail(const char* what, int rc) {
  fprintf(stderr, "store_smoke: %s: rc %d: %s\n", what, rc, mc_last_error());
  return 1;
}

#define CHECK(call)            \
  do {                         \
    int rc_ = (call);          \
    if (rc_ != MC_OK) {        \
      return fail(#call, rc_); \
    }                          \
  } while (0)

#define EXPECT(call, want)                                                                       \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != (want) || mc_last_error()[0] == '\0') {                                           \
      fprintf(stderr, "store_smoke: %s = %d, want %d with a reason (%s)\n", #call, rc_, (want), \
              mc_last_error());                                                                  \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: store_smoke METADATA_URL MASTER_ADDR\n");
    return 2;
  }
  if (mc_store_abi_version() != MC_STORE_ABI_VERSION) {
    fprintf(stderr, "store_smoke: version %#x, header %#x\n", mc_store_abi_version(), MC_STORE_ABI_VERSION);
    return 1;
  }
  EXPECT(mc_store_setup(NULL, argv[1], 0, 0, "tcp", NULL, argv[2], NULL), MC_ERR_INVALID_ARGUMENT);
  mc_store_t* s = NULL;
  EXPECT(mc_store_setup("127.0.0.1", argv[1], 0, 0, "rdma", "mlx5_0", argv[2], &s), MC_ERR_UNSUPPORTED);
  CHECK(mc_store_setup("127.0.0.1", argv[1], 16 << 20, 1 << 20, "tcp", "", argv[2], &s));
  if (mc_last_error()[0] != '\0') {
    fprintf(stderr, "store_smoke: success left mc_last_error %s\n", mc_last_error());
    return 1;
  }
  char name[256];
  size_t name_len = 0;
  CHECK(mc_store_get_hostname(s, name, sizeof name, &name_len));
  if (name_len != strlen(name) || strncmp(name, "127.0.0.1:", 10) != 0) {
    fprintf(stderr, "store_smoke: hostname %s\n", name);
    return 1;
  }
  EXPECT(mc_store_get_hostname(s, name, 4, &name_len), MC_STORE_ERR_BUFFER_OVERFLOW);

  /* Copying put and get. */
  const char* msg = "hello from C";
  CHECK(mc_store_put(s, "c-key", msg, strlen(msg)));
  char got[64];
  size_t n = 0;
  CHECK(mc_store_get(s, "c-key", got, sizeof got, &n));
  if (n != strlen(msg) || memcmp(got, msg, n) != 0) {
    fprintf(stderr, "store_smoke: get %zu bytes\n", n);
    return 1;
  }
  EXPECT(mc_store_get(s, "c-key", got, 3, &n), MC_STORE_ERR_BUFFER_OVERFLOW);
  EXPECT(mc_store_get(s, "no-such-key", got, sizeof got, &n), MC_STORE_ERR_OBJECT_NOT_FOUND);
  uint64_t size = 0;
  CHECK(mc_store_get_size(s, "c-key", &size));
  if (size != strlen(msg)) {
    fprintf(stderr, "store_smoke: get_size %llu\n", (unsigned long long)size);
    return 1;
  }

  /* Keys as bytes (the _n forms): NUL inside, not UTF-8. */
  static const char bkey[] = {'c', '\0', (char)0xff, 'k'};
  CHECK(mc_store_put_n(s, bkey, sizeof bkey, msg, 5));
  CHECK(mc_store_get_n(s, bkey, sizeof bkey, got, sizeof got, &n));
  if (n != 5 || memcmp(got, msg, n) != 0) {
    fprintf(stderr, "store_smoke: get_n %zu bytes\n", n);
    return 1;
  }
  if (mc_store_is_exist_n(s, bkey, sizeof bkey) != 1 || mc_store_is_exist(s, "c") != 0) {
    fprintf(stderr, "store_smoke: is_exist_n of a key with NUL\n");
    return 1;
  }
  EXPECT(mc_store_put_n(s, bkey, 0, msg, 5), MC_ERR_INVALID_ARGUMENT);
  EXPECT(mc_store_put_n(s, bkey, MC_STORE_MAX_KEY_LEN + 1, msg, 5), MC_STORE_ERR_INVALID_KEY);
  CHECK(mc_store_remove_n(s, bkey, sizeof bkey, 1));

  /* Zero copy, in a batch. */
  unsigned char* src = malloc(BLOCKS * BLK);
  unsigned char* dst = calloc(1, BLOCKS * BLK);
  if (src == NULL || dst == NULL) {
    return 1;
  }
  for (int i = 0; i < BLOCKS * BLK; i++) {
    src[i] = (unsigned char)(i * 7 + (i >> 12));
  }
  CHECK(mc_store_register_buffer(s, src, BLOCKS * BLK));
  CHECK(mc_store_register_buffer(s, dst, BLOCKS * BLK));
  EXPECT(mc_store_register_buffer(s, src + 10, 10), MC_ERR_ADDRESS_OVERLAPPED);
  char keybuf[BLOCKS][16];
  const char* keys[BLOCKS];
  void* sptrs[BLOCKS];
  void* dptrs[BLOCKS];
  size_t sizes[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    snprintf(keybuf[i], sizeof keybuf[i], "c-blk-%d", i);
    keys[i] = keybuf[i];
    sptrs[i] = src + i * BLK;
    dptrs[i] = dst + i * BLK;
    sizes[i] = BLK;
  }
  int32_t codes[BLOCKS];
  CHECK(mc_store_batch_put_from(s, keys, sptrs, sizes, BLOCKS, codes));
  int32_t present[BLOCKS];
  CHECK(mc_store_batch_is_exist(s, keys, BLOCKS, present));
  int64_t results[BLOCKS];
  CHECK(mc_store_batch_get_into(s, keys, dptrs, sizes, BLOCKS, results));
  for (int i = 0; i < BLOCKS; i++) {
    if (codes[i] != MC_OK || present[i] != 1 || results[i] != BLK) {
      fprintf(stderr, "store_smoke: key %d: put %d, exists %d, read %lld\n", i, codes[i], present[i],
              (long long)results[i]);
      return 1;
    }
  }
  if (memcmp(src, dst, BLOCKS * BLK) != 0) {
    fprintf(stderr, "store_smoke: bytes differ\n");
    return 1;
  }
  int64_t read = 0;
  CHECK(mc_store_get_into(s, "c-blk-3", dst, BLK, &read));
  EXPECT(mc_store_put_from(s, "c-unreg", got, sizeof got), MC_ERR_ADDRESS_NOT_REGISTERED);
  EXPECT(mc_store_put(s, "", msg, 1), MC_ERR_INVALID_ARGUMENT);
  if (mc_store_is_exist(s, "c-blk-0") != 1 || mc_store_is_exist(s, "nothing") != 0) {
    fprintf(stderr, "store_smoke: is_exist\n");
    return 1;
  }
  CHECK(mc_store_remove(s, "c-blk-0", 1));
  EXPECT(mc_store_remove(s, "c-blk-0", 1), MC_STORE_ERR_OBJECT_NOT_FOUND);
  CHECK(mc_store_unregister_buffer(s, src));
  CHECK(mc_store_unregister_buffer(s, dst));
  EXPECT(mc_store_unregister_buffer(s, dst), MC_ERR_ADDRESS_NOT_REGISTERED);
  CHECK(mc_store_destroy(s));
  EXPECT(mc_store_destroy(s), MC_ERR_INVALID_HANDLE);
  EXPECT(mc_store_put(s, "k", msg, 1), MC_ERR_INVALID_HANDLE);
  free(src);
  free(dst);
  puts("store_smoke: ok");
  return 0;
}
