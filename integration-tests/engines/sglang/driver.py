"""SGLang 0.5.23's own MooncakeStore (sglang/srt/mem_cache/storage/
mooncake_store/mooncake_store.py) on the paths its bundled test does not
take: configuration from extra_config (what
`--hicache-storage-backend-extra-config` hands the backend, with an
extra_backend_tag and a model name, so keys are prefixed) and the
multi-buffer zero-copy calls (batch_put_from_multi_buffers with a
ReplicateConfig, batch_get_into_multi_buffers), which SGLang uses when a
host pool gives several buffers per page (an MLA pool in layer_first
layout: one buffer per layer).

    python driver.py set EXTRA_CONFIG_JSON   # store PAGES pages
    python driver.py get EXTRA_CONFIG_JSON   # fresh process: read back, check

The host pool is a CPU tensor standing in for SGLang's MLA host pool in
layer_first layout (what get_page_buffer_meta returns for it: per page,
one pointer per layer), filled with values that depend only on the page
number, so the `get` process knows what it must read. The last line
printed is a JSON summary; exit 0 when every check passed.
"""

import json
import sys

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

PAGES = 12
LAYERS = 3
ELEMS = 128  # float32 per layer per page (page size 1 token): 512 bytes


def fail(msg):
    print(json.dumps({"ok": False, "error": msg}), flush=True)
    sys.exit(1)


class LayerFirstMLAHostPool:
    """What SGLang's MooncakeStore needs from a host pool (kv_buffer,
    page_size, get_page_buffer_meta, get_ksize_per_token), for an MLA pool
    in layer_first layout: buffer [layer][page][ELEMS]."""

    layout = "layer_first"
    page_size = 1

    def __init__(self, pages):
        self.kv_buffer = torch.zeros(LAYERS, pages, ELEMS, dtype=torch.float32)

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for page in indices.tolist():
            for layer in range(LAYERS):
                ptrs.append(self.kv_buffer[layer, page].data_ptr())
                sizes.append(ELEMS * 4)
        return ptrs, sizes

    def get_ksize_per_token(self):
        return LAYERS * ELEMS * 4


def page_values(i):
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(LAYERS, ELEMS, generator=g)


def store(extra):
    cfg = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=True,
        enable_storage_metrics=False, is_page_first_layout=False, model_name="tiny/llama-mla", extra_config=extra,
    )
    return MooncakeStore(cfg)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("set", "get"):
        print(__doc__, file=sys.stderr)
        return 2
    extra = json.loads(argv[2])
    s = store(extra)
    # Twice the pages: [0, PAGES) is where set writes from, [PAGES, 2*PAGES)
    # where get reads into.
    pool = LayerFirstMLAHostPool(2 * PAGES)
    s.register_mem_pool_host(pool)
    keys = [f"page{i:03d}" for i in range(PAGES)]
    if argv[1] == "set":
        for i in range(PAGES):
            pool.kv_buffer[:, i] = page_values(i)
        if s.batch_exists(keys) != 0:
            fail("batch_exists found pages before any set")
        ok = s.batch_set_v1(keys, torch.arange(PAGES))
        if ok != [True] * PAGES:
            fail(f"batch_set_v1: {ok}")
        if s.batch_exists(keys) != PAGES:
            fail(f"batch_exists after set: {s.batch_exists(keys)} of {PAGES}")
        # A second set of the same pages is a no-op that succeeds (SGLang
        # puts only what batch_is_exist says is missing).
        if s.batch_set_v1(keys, torch.arange(PAGES)) != [True] * PAGES:
            fail("batch_set_v1 of pages already stored")
        print(json.dumps({"ok": True, "op": "set", "pages": PAGES, "prefix": s.config_prefix}), flush=True)
        return 0
    if s.batch_exists(keys) != PAGES:
        fail(f"fresh process: batch_exists {s.batch_exists(keys)} of {PAGES}")
    if s.batch_exists(["nobody-stored-this"] + keys) != 0:
        fail("batch_exists counted past a missing first page")
    ok = s.batch_get_v1(keys, torch.arange(PAGES, 2 * PAGES))
    if ok != [True] * PAGES:
        fail(f"batch_get_v1: {ok}")
    for i in range(PAGES):
        got, want = pool.kv_buffer[:, PAGES + i], page_values(i)
        if not torch.equal(got, want):
            fail(f"page {i}: the bytes read back differ from the ones stored")
    print(json.dumps({"ok": True, "op": "get", "pages": PAGES, "prefix": s.config_prefix}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
