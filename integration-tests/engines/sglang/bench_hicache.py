"""Benchmark of mooncake_go.sglang (`make bench-sglang`; not part of make
test): zero-copy set and get of PAGES pages of a LAYERS-layer MHA model
(SGLang's real MHATokenToKVPoolHost, page_first, bfloat16) through

  ours     MooncakeGoHiCacheStorage.batch_set_v1 / batch_get_v1 (built by
           SGLang's StorageBackendFactory "dynamic");
  raw      the store client alone for the same bytes: mooncake.store's
           MooncakeDistributedStore (our drop-in, libmooncake.so's store
           ABI) batch_put_from / batch_get_into of the same K and V
           buffers, pointer lists computed outside the timing;
  builtin  SGLang's own MooncakeStore backend (storage/mooncake_store)
           batch_set_v1 / batch_get_v1 on our drop-in mooncake.store;

all in one process against one `mooncake master` + `mooncake node` on
127.0.0.1 (tcp), in the same run. Each round writes fresh keys and reads
them back (then removes them); the median of ROUNDS rounds is reported,
and the ratios ours/raw and ours/builtin. Reads are checked byte for byte.

    python bench_hicache.py [--layers 32] [--heads 2] [--head-dim 128]
                            [--page 64] [--pages 64] [--rounds 5] [--json OUT]
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def args_of(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--heads", type=int, default=2, help="KV heads of this rank")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--page", type=int, default=64, help="tokens per page")
    p.add_argument("--pages", type=int, default=64, help="pages per call")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)  # the pool's extra config: run the benchmark itself
    return p.parse_args(argv)


def main(argv):
    a = args_of(argv)
    if a.child:
        return child(a, json.loads(a.child))
    import mcrig

    page_bytes = 2 * a.layers * a.page * a.heads * a.head_dim * 2
    node = max(256 << 20, 4 * a.pages * page_bytes)
    with tempfile.TemporaryDirectory(prefix="bench-sglang-") as d:
        pool = mcrig.Pool(pathlib.Path(d), nodes=(("benchnode", f"{node >> 20}MiB"),))
        try:
            extra = {"master_server_address": pool.master, "metadata_server": pool.metadata, "protocol": "tcp",
                     "global_segment_size": 0, "local_hostname": "127.0.0.1"}
            env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1", "MOONCAKE_PROTOCOL": "tcp"}, compat=True)
            cmd = [sys.executable, "-W", "ignore", __file__, *argv, "--child", json.dumps(extra)]
            proc = mcrig.Proc(cmd, pathlib.Path(d) / "bench.log", env=env, name="bench child")
            rc = proc.wait(1800)
            print(pathlib.Path(d, "bench.log").read_text(errors="replace"))
            if rc != 0:
                print(pool.tails(), file=sys.stderr)
            return rc
        finally:
            pool.stop()


def child(a, extra):
    import torch
    from mooncake.store import MooncakeDistributedStore
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _mha_host_inputs
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.storage import StorageBackendFactory
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

    tokens = a.pages * a.page
    dev = MHATokenToKVPool(tokens, a.page, torch.bfloat16, a.heads, a.head_dim, a.layers, "cpu", False, start_layer=0, end_layer=a.layers)
    cls, info, kw = _mha_host_inputs(dev)
    host = cls(info, host_to_device_ratio=2.0, host_size=0, page_size=a.page, layout="page_first", pin_memory=False, device="cpu", **kw)
    flat = host.kv_buffer.view(-1).view(torch.uint8)
    g = torch.Generator().manual_seed(1)
    src_pages = list(range(a.pages))
    dst_pages = list(range(a.pages, 2 * a.pages))
    src = torch.cat([torch.arange(p * a.page, (p + 1) * a.page) for p in src_pages])
    dst = torch.cat([torch.arange(p * a.page, (p + 1) * a.page) for p in dst_pages])
    sptrs, ssizes = host.get_page_buffer_meta(src)
    dptrs, dsizes = host.get_page_buffer_meta(dst)
    base = host.kv_buffer.data_ptr()
    for p, s in zip(sptrs, ssizes):
        flat[p - base:p - base + s].copy_(torch.randint(0, 256, (s,), dtype=torch.uint8, generator=g))
    want = b"".join(bytes(flat[p - base:p - base + s].numpy()) for p, s in zip(sptrs, ssizes))
    nbytes = sum(ssizes)

    def check_read(what):
        got = b"".join(bytes(flat[p - base:p - base + s].numpy()) for p, s in zip(dptrs, dsizes))
        if got != want:
            raise AssertionError(f"{what}: pages read back differ")
        for p, s in zip(dptrs, dsizes):
            flat[p - base:p - base + s].zero_()

    def cfg(backend_extra):
        return HiCacheStorageConfig(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
            enable_storage_metrics=False, is_page_first_layout=True, model_name="bench/llama", extra_config=backend_extra,
        )

    ours = StorageBackendFactory.create_backend("dynamic", cfg({
        "backend_name": "mooncake_go", "module_path": "mooncake_go.sglang", "class_name": "MooncakeGoHiCacheStorage",
        "interface_v1": 1, **extra}), host)
    ours.register_mem_pool_host(host)
    builtin = MooncakeStore(cfg({**extra, "extra_backend_tag": "builtin"}), host)
    builtin.register_mem_pool_host(host)
    raw = MooncakeDistributedStore()
    rc = raw.setup("127.0.0.1", extra["metadata_server"], 0, 16 << 20, "tcp", "", extra["master_server_address"])
    if rc != 0:
        raise AssertionError(f"raw store setup: {rc}")
    if raw.register_buffer(base, host.kv_buffer.numel() * host.kv_buffer.element_size()) != 0:
        raise AssertionError("raw register_buffer failed")

    def keys(tag, r):
        return [f"{tag}{r:04d}{i:056x}" for i in range(a.pages)]

    def bench_backend(name, backend, tag, after=None):
        """One round of batch_set_v1 then batch_get_v1 of fresh keys through a HiCacheStorage."""

        def round_(r):
            ks = keys(tag, r)
            t = time.perf_counter()
            ok = backend.batch_set_v1(ks, src)
            ts = time.perf_counter() - t
            assert all(ok), ok
            t = time.perf_counter()
            ok = backend.batch_get_v1(ks, dst)
            tg = time.perf_counter() - t
            assert all(ok), ok
            check_read(name)
            if after:
                after()
            return ts, tg

        return round_

    bench_ours = bench_backend("ours", ours, "ours", after=ours.clear)
    bench_builtin = bench_backend("builtin", builtin, "bltn")

    def bench_raw(r):
        ks = [f"{k}_{s}" for k in keys("rawc", r) for s in ("k", "v")]
        t = time.perf_counter()
        res = raw.batch_put_from(ks, sptrs, ssizes)
        ts = time.perf_counter() - t
        assert all(x == 0 for x in res), res[:4]
        t = time.perf_counter()
        res = raw.batch_get_into(ks, dptrs, dsizes)
        tg = time.perf_counter() - t
        assert all(x > 0 for x in res), res[:4]
        check_read("raw")
        return ts, tg

    runs = {"ours": [], "raw": [], "builtin": []}
    fns = {"ours": bench_ours, "raw": bench_raw, "builtin": bench_builtin}
    for name, fn in fns.items():  # one warm-up round each (connections, first registrations)
        fn(9999)
        if name != "ours":
            raw.remove_all(True)
    for r in range(a.rounds):
        for name, fn in fns.items():  # interleaved, so drifts of the machine hit all three alike
            runs[name].append(fn(r))
            raw.remove_all(True)  # builtin's and raw's keys (ours cleared its own namespace)
    gb = nbytes / 1e9
    res = {"geometry": {"layers": a.layers, "kv_heads": a.heads, "head_dim": a.head_dim, "page_tokens": a.page, "pages": a.pages,
                        "page_bytes": nbytes // a.pages, "bytes_per_call": nbytes, "rounds": a.rounds}}
    for name, rs in runs.items():
        res[name] = {"set_GBps": gb / statistics.median(t for t, _ in rs), "get_GBps": gb / statistics.median(t for _, t in rs)}
    for base_name in ("raw", "builtin"):
        res[f"ours/{base_name}"] = {op: res["ours"][op] / res[base_name][op] for op in ("set_GBps", "get_GBps")}
    print(f"{a.pages} pages x {nbytes // a.pages} B ({a.layers} layers, {a.heads} KV heads x {a.head_dim}, page {a.page}), "
          f"{nbytes / (1 << 20):.0f} MiB per call, median of {a.rounds} rounds, one host (tcp transport, shm between its processes)")
    print(f"{'':10s} {'set GB/s':>10s} {'get GB/s':>10s}")
    for name in ("ours", "raw", "builtin"):
        print(f"{name:10s} {res[name]['set_GBps']:10.2f} {res[name]['get_GBps']:10.2f}")
    for name in ("ours/raw", "ours/builtin"):
        print(f"{name:10s} {res[name]['set_GBps']:9.2f}x {res[name]['get_GBps']:9.2f}x")
    print(json.dumps(res))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1))
    ours.close()
    raw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
