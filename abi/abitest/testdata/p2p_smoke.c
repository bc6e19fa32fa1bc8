/* p2p_smoke: the P2P store's C ABI end to end against the etcd at argv[1]:
   a seed registers two malloc'd buffers, a getter fetches them, the seed
   unregisters, a second getter fetches from the first; bytes compared,
   error codes checked. Prints "p2p_smoke: ok". */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/p2p.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "p2p_smoke: line %d: %s: %s\n", __LINE__, #cond, mc_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static void fill(unsigned char* b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 131u + seed) ^ (i >> 9));
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  const char* etcd = argv[1];
  CHECK(mc_p2p_abi_version() == MC_P2P_ABI_VERSION);

  uint64_t sizes[2] = {300 * 1024 + 5, 40 * 1024};
  unsigned char* src[2];
  unsigned char* dst1[2];
  unsigned char* dst2[2];
  for (int i = 0; i < 2; i++) {
    src[i] = malloc(sizes[i]);
    dst1[i] = calloc(1, sizes[i]);
    dst2[i] = calloc(1, sizes[i]);
    CHECK(src[i] && dst1[i] && dst2[i]);
    fill(src[i], sizes[i], (unsigned)i + 1);
  }
  void* s_addrs[2] = {src[0], src[1]};
  void* d1_addrs[2] = {dst1[0], dst1[1]};
  void* d2_addrs[2] = {dst2[0], dst2[1]};

  mc_p2p_store_t *seed = NULL, *g1 = NULL, *g2 = NULL;
  CHECK(mc_p2p_create(etcd, "c-seed", &seed) == MC_OK);
  CHECK(mc_p2p_create(etcd, "c-g1", &g1) == MC_OK);
  CHECK(mc_p2p_create(etcd, NULL, &g2) == MC_OK);

  CHECK(mc_p2p_register(seed, "c/obj", s_addrs, sizes, 2, 64 * 1024, "cpu:0") == MC_OK);
  CHECK(mc_p2p_register(seed, "c/obj", s_addrs, sizes, 2, 0, NULL) == MC_P2P_ERR_OPENED);
  CHECK(mc_p2p_register(g1, "c/obj", d1_addrs, sizes, 2, 0, NULL) == MC_P2P_ERR_EXISTS);

  mc_buf_t list = {NULL, 0};
  CHECK(mc_p2p_list(g1, "c/", &list) == MC_OK);
  CHECK(list.len > 0 && memmem(list.data, list.len, "\"name\":\"c/obj\"", 14) != NULL);
  CHECK(memmem(list.data, list.len, "\"shards\":6", 10) != NULL);
  mc_buf_free(&list);

  CHECK(mc_p2p_get_replica(g1, "c/obj", d1_addrs, sizes, 2) == MC_OK);
  for (int i = 0; i < 2; i++) CHECK(memcmp(src[i], dst1[i], sizes[i]) == 0);
  CHECK(mc_p2p_unregister(seed, "c/obj") == MC_OK);
  memset(src[0], 0, sizes[0]); /* the seed's memory is ours again */

  CHECK(mc_p2p_get_replica(g2, "c/obj", d2_addrs, sizes, 2) == MC_OK);
  for (int i = 0; i < 2; i++) CHECK(memcmp(dst1[i], dst2[i], sizes[i]) == 0);

  /* Errors. */
  uint64_t bad[2] = {sizes[0], sizes[1] + 1};
  CHECK(mc_p2p_get_replica(seed, "c/none", d1_addrs, sizes, 2) == MC_ERR_NOT_FOUND);
  CHECK(mc_p2p_get_replica(seed, "c/obj", s_addrs, bad, 2) == MC_P2P_ERR_SIZE);
  CHECK(mc_p2p_get_replica(seed, "c/obj", s_addrs, sizes, 0) == MC_ERR_INVALID_ARGUMENT);
  CHECK(mc_p2p_unregister(g1, "c/obj") == MC_P2P_ERR_NOT_OPENED);
  CHECK(mc_p2p_register(seed, NULL, s_addrs, sizes, 2, 0, NULL) == MC_ERR_INVALID_ARGUMENT);
  CHECK(mc_p2p_list(NULL, "", &list) == MC_ERR_INVALID_ARGUMENT);
  mc_p2p_store_t* none = NULL;
  CHECK(mc_p2p_create("127.0.0.1:1", "x", &none) == MC_ERR_METADATA);
  CHECK(mc_p2p_create("http://127.0.0.1:8080/metadata", "x", &none) == MC_ERR_INVALID_ARGUMENT);

  CHECK(mc_p2p_delete_replica(g1, "c/obj") == MC_OK);
  CHECK(mc_p2p_delete_replica(g2, "c/obj") == MC_OK);
  CHECK(mc_p2p_list(g2, "c/", &list) == MC_OK);
  CHECK(list.len == 2 && memcmp(list.data, "[]", 2) == 0); /* the last holder left: object gone */
  mc_buf_free(&list);

  CHECK(mc_p2p_destroy(seed) == MC_OK);
  CHECK(mc_p2p_destroy(g1) == MC_OK);
  CHECK(mc_p2p_destroy(g2) == MC_OK);
  CHECK(mc_p2p_destroy(g2) == MC_ERR_INVALID_HANDLE);
  for (int i = 0; i < 2; i++) {
    free(src[i]);
    free(dst1[i]);
    free(dst2[i]);
  }
  printf("p2p_smoke: ok\n");
  return 0;
}
