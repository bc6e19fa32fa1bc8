"""Drives mooncake_go.sglang (our HiCache storage backend) through SGLang
0.5.23's own storage code: StorageBackendFactory.create_backend("dynamic",
...) builds it from the extra config as SGLang's HiCacheController does,
and SGLang's real host pools (MHATokenToKVPoolHost, MLATokenToKVPoolHost,
built from SGLang's device pools on CPU, as its hybrid pool assembler
builds them, without pinning: there is no CUDA here) hold the pages.

    python hicache_driver.py roundtrip EXTRA_JSON
        every layout x {MHA, MLA}: pages filled with known bytes, written
        through batch_set_v1 and the plain batch_set/set, the host pool
        zeroed, read back through batch_get_v1 (into other slots) and the
        plain batch_get/get, compared byte for byte; batch_exists of a
        prefix only partly in the pool; get_stats; clear.
    python hicache_driver.py write EXTRA_JSON CASES_JSON
    python hicache_driver.py read  EXTRA_JSON CASES_JSON
        for each case [layout, is_mla, tp_rank, tp_size]: write stores
        PAGES pages whose bytes depend only on the page number by
        batch_set_v1; read (another process): batch_exists and
        batch_get_v1, then the bytes checked against what write wrote.
    python hicache_driver.py deadmaster EXTRA_JSON
        writes pages, prints READY, waits for a line on stdin (the test
        kills the master meanwhile), then times batch_exists,
        batch_get_v1 and batch_set_v1: misses and failures within
        SGLang's prefetch timeout, no exception.

The last line printed is a JSON summary; exit 0 when every check passed.
"""

import json
import sys
import time
import traceback

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _mha_host_inputs
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory

LAYOUTS = ("layer_first", "page_first", "page_first_direct")
PAGE = 4  # tokens per page
LAYERS = 3
DEVICE_TOKENS = 256
PAGES = 16  # pages a write/read pair shares
DYNAMIC = {"backend_name": "mooncake_go", "module_path": "mooncake_go.sglang",
           "class_name": "MooncakeGoHiCacheStorage", "interface_v1": 1}


class Failed(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def host_pool(mla, layout):
    """SGLang's real host pool of one rank (bfloat16, LAYERS layers)."""
    if mla:
        dev = MLATokenToKVPool(DEVICE_TOKENS, PAGE, torch.bfloat16, 32, 8, LAYERS, "cpu", False, start_layer=0, end_layer=LAYERS)
        return MLATokenToKVPoolHost(
            dev.get_device_pool_infos()[0].buffer_info, host_to_device_ratio=2.0, host_size=0, page_size=PAGE, layout=layout,
            pin_memory=False, device="cpu", device_capacity_tokens=dev.size, start_layer=dev.start_layer,
            end_layer=dev.end_layer, target_layer_num=dev.layer_num, override_kv_cache_dim=dev.kv_cache_dim,
        )
    dev = MHATokenToKVPool(DEVICE_TOKENS, PAGE, torch.bfloat16, 2, 16, LAYERS, "cpu", False, start_layer=0, end_layer=LAYERS)
    cls, info, kw = _mha_host_inputs(dev)
    return cls(info, host_to_device_ratio=2.0, host_size=0, page_size=PAGE, layout=layout, pin_memory=False, device="cpu", **kw)


def storage_config(extra, mla, layout, tp_rank=0, tp_size=1, model="tiny/llama"):
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla,
        enable_storage_metrics=True, is_page_first_layout=layout == "page_first", model_name=model,
        extra_config={**DYNAMIC, **extra},
    )


def backend(extra, mla, layout, pool, **kw):
    """Our backend, built by SGLang's factory exactly as the controller does."""
    cfg = storage_config(extra, mla, layout, **kw)
    b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    from mooncake_go.sglang import MooncakeGoHiCacheStorage

    check(isinstance(b, MooncakeGoHiCacheStorage), f"create_backend built {type(b)}")
    b.register_mem_pool_host(pool)
    b.on_host_pools_registered()
    return b


def slots(pages):
    """host_indices of pages (token slot indices, page-aligned), as SGLang passes them."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE, dtype=torch.int64) for p in pages])


def page_views(pool, page):
    """The uint8 views of one page's buffers (get_page_buffer_meta's)."""
    ptrs, sizes = pool.get_page_buffer_meta(slots([page]))
    flat = pool.kv_buffer.view(-1).view(torch.uint8)
    base = pool.kv_buffer.data_ptr()
    return [flat[p - base:p - base + s] for p, s in zip(ptrs, sizes)]


def fill(pool, page, seed):
    """Writes bytes that depend only on (seed, part, offset) into page."""
    for j, v in enumerate(page_views(pool, page)):
        g = torch.Generator().manual_seed(seed * 1000 + j)
        v.copy_(torch.randint(0, 256, (v.numel(),), dtype=torch.uint8, generator=g))


def content(pool, page):
    return b"".join(bytes(v.numpy()) for v in page_views(pool, page))


def keys(prefix, n, start=0):
    """n page hashes of 64 characters (SGLang's are hex SHA-256), distinct per prefix."""
    return [f"{prefix}{i:0{64 - len(prefix)}x}" for i in range(start, start + n)]


def roundtrip(extra):
    report = []
    for mla in (False, True):
        for layout in LAYOUTS:
            kind = "MLA" if mla else "MHA"
            pool = host_pool(mla, layout)
            b = backend(extra, mla, layout, pool, model=f"tiny/llama-{kind}-{layout}")
            n = 8
            ks = keys(f"{kind[0]}{LAYOUTS.index(layout)}", n)
            src = list(range(1, 1 + n))
            for i, p in enumerate(src):
                fill(pool, p, seed=100 + i)
            want = [content(pool, p) for p in src]
            check(b.batch_exists(ks) == 0, "fresh keys exist")
            # Pages 0..3 through v1 (SGLang's zero-copy backup), 4..5 through
            # the plain batch_set, 6 through set, 7 stays out of the pool.
            ok = b.batch_set_v1(ks[:4], slots(src[:4]))
            check(ok == [True] * 4, f"{kind} {layout}: batch_set_v1 {ok}")
            check(b.batch_set_v1(ks[:4], slots(src[:4])) == [True] * 4, "a second backup of the same pages")
            check(b.batch_set(ks[4:6], [pool.get_data_page(p * PAGE, flat=True) for p in src[4:6]]), "plain batch_set")
            check(b.set(ks[6], pool.get_data_page(src[6] * PAGE, flat=True)), "plain set")
            # A prefix only partly in the pool: 7 of 8 pages, then a gap.
            check(b.batch_exists(ks) == 7, f"{kind} {layout}: batch_exists {b.batch_exists(ks)} of 8, want 7")
            check(b.batch_exists(ks[:3] + keys("zz", 1) + ks[3:5]) == 3, "prefix with a hole")
            check(b.exists(ks[6]) and not b.exists(ks[7]), "exists")
            pool.kv_buffer.zero_()
            # Back through v1, into other slots than they came from.
            dst = list(range(20, 20 + n))
            ok = b.batch_get_v1(ks, slots(dst))
            check(ok == [True] * 7 + [False], f"{kind} {layout}: batch_get_v1 {ok}")
            for i in range(7):
                check(content(pool, dst[i]) == want[i], f"{kind} {layout}: page {i} read back through v1 differs")
            check(content(pool, dst[7]) == bytes(len(want[7])), "the missing page's slots were written")
            # Back through the plain path (SGLang's generic copy path).
            got = b.batch_get(ks[:7], [pool.get_dummy_flat_data_page() for _ in range(7)])
            check(all(t is not None for t in got), f"plain batch_get misses: {[t is None for t in got]}")
            for i, t in enumerate(got):
                pool.set_from_flat_data_page(40 * PAGE + i * PAGE, t)
                check(content(pool, 40 + i) == want[i], f"{kind} {layout}: page {i} read back through batch_get differs")
            check(b.get(ks[7]) is None, "get of an absent page")
            t = b.get(ks[0])
            check(t is not None, "get")
            pool.set_from_flat_data_page(60 * PAGE, t)
            check(content(pool, 60) == want[0], "get's page differs")
            # backup_pgs counts the pages in the pool after each write call
            # (4 + 4 again + 2 + 1); prefetch_pgs the pages read (7 + 7 + 2).
            m = b.get_stats()
            check(m is not None and sum(m.backup_pgs) == 11 and sum(m.prefetch_pgs) >= 15, f"get_stats {m}")
            s = b.stats()
            check(s["failed_gets"] == 0 and s["failed_sets"] == 0 and s["shim_errors"] == 0, f"failures counted: {s}")
            # Bad input from the engine side: answered, counted, never raised.
            check(b.batch_get_v1(ks[:2], torch.arange(3, dtype=torch.int64)) == [False, False], "unaligned host_indices")
            check(b.batch_set_v1(ks[:3], slots(src[:2])) == [False] * 3, "3 keys for 2 pages of host_indices")
            check(b.stats()["shim_errors"] == 2, "the two bad calls are not counted")
            b.clear()
            check(b.batch_exists(ks) == 0, "pages left after clear")
            b.close()
            report.append(f"{kind}/{layout}")
    return {"cases": report}


def pair(op, extra, cases):
    out = []
    for layout, mla, tp_rank, tp_size in cases:
        pool = host_pool(mla, layout)
        b = backend(extra, mla, layout, pool, tp_rank=tp_rank, tp_size=tp_size)
        ks = keys(f"shared{int(mla)}", PAGES)
        what = f"{'MLA' if mla else 'MHA'}/{layout}/tp{tp_rank}of{tp_size}"
        if op == "write":
            for p in range(PAGES):
                fill(pool, p, seed=7000 + p)
            ok = b.batch_set_v1(ks, slots(range(PAGES)))
            check(ok == [True] * PAGES, f"{what}: batch_set_v1 {ok}")
        else:
            ref = host_pool(mla, layout)
            for p in range(PAGES):
                fill(ref, p, seed=7000 + p)
            n = b.batch_exists(ks)
            check(n == PAGES, f"{what}: batch_exists {n} of {PAGES} pages the other process wrote")
            dst = list(range(PAGES, 2 * PAGES))
            ok = b.batch_get_v1(ks, slots(dst))
            check(ok == [True] * PAGES, f"{what}: batch_get_v1 {ok}")
            for p in range(PAGES):
                check(content(pool, dst[p]) == content(ref, p), f"{what}: page {p} differs from what the writer wrote")
        b.close()
        out.append(what)
    return {op: out}


def deadmaster(extra):
    pool = host_pool(False, "page_first")
    b = backend(extra, False, "page_first", pool)
    ks = keys("dead", 64)
    for p in range(64):
        fill(pool, p, seed=p)
    check(b.batch_set_v1(ks, slots(range(64))) == [True] * 64, "backup before the master dies")
    print("READY", flush=True)
    sys.stdin.readline()
    # SGLang's prefetch timeout for this many tokens (defaults: 1 s + 0.25 s per 1,024 tokens).
    limit = 1.0 + 0.25 * 64 * PAGE / 1024
    times = {}
    t = time.monotonic()
    n = b.batch_exists(ks)
    times["batch_exists"] = time.monotonic() - t
    check(n == 0, f"batch_exists answered {n} with the master dead")
    t = time.monotonic()
    ok = b.batch_get_v1(ks, slots(range(64, 128)))
    times["batch_get_v1"] = time.monotonic() - t
    check(ok == [False] * 64, "batch_get_v1 hit with the master dead")
    t = time.monotonic()
    ok = b.batch_set_v1(keys("dead2", 4), slots(range(4)))
    times["batch_set_v1"] = time.monotonic() - t
    check(ok == [False] * 4, "batch_set_v1 succeeded with the master dead")
    for what in ("batch_exists", "batch_get_v1"):
        check(times[what] <= limit, f"{what} took {times[what]:.2f} s, SGLang's prefetch timeout is {limit:.2f} s")
    s = b.stats()
    check(s["exists_errors"] >= 1 and s["failed_sets"] >= 4, f"failures not counted: {s}")
    b.close()
    return {"times": times, "limit": limit, "stats": s}


def main(argv):
    try:
        op, extra = argv[1], json.loads(argv[2])
        if op == "roundtrip":
            out = roundtrip(extra)
        elif op in ("write", "read"):
            out = pair(op, extra, json.loads(argv[3]))
        elif op == "deadmaster":
            out = deadmaster(extra)
        else:
            raise Failed(f"unknown op {op}")
    except Exception as e:  # noqa: BLE001 - reported in the summary line
        traceback.print_exc()
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps({"ok": True, **out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
