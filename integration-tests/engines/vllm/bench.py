"""Real-vLLM benchmark of MooncakeGoConnector (store mode): time to first
token of long prompts served from the pool vs. recomputed, and the
connector's load/save throughput vs. the raw store client moving the same
objects, all in one run on one pool.

    make bench-vllm-engine        # or, in the vLLM venv:
    python integration-tests/engines/vllm/bench.py [--prompt-tokens 4096] [--repeats 3] [--json]

Steps:
 1. A pool (`mooncake master` + one `mooncake node`) and a random Llama
    big enough that prefilling --prompt-tokens takes seconds here.
 2. Saver instance: prefills --repeats prompts (max_tokens=1); the
    connector saves every full block. Its save throughput is
    saved_bytes / save_busy_ns (wall time with a save in flight).
 3. Loader instance (fresh process): for each prompt, first a new prompt
    of the same length (a miss: recomputed, TTFT "recompute"), then the
    saved prompt (a hit: loaded, TTFT "hit"); the first tokens must equal
    the saver's. Load throughput: loaded_bytes / load_busy_ns.
 4. Raw: a store client in this process reads the same objects with one
    batch_get_into and writes the same bytes with batch_put_from into a
    registered buffer (the store's own zero-copy path); ratio = connector
    GB/s / raw GB/s.
"""

import argparse
import ctypes
import json
import mmap
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402
from conftest import CONNECTOR, ENGINE, Driver, prompt, store_config  # noqa: E402

for _p in mcrig.PYTHON_DIRS:
    sys.path.insert(0, str(_p))

# 16 layers of width 1024 (8 KV heads of 128): 64 KiB of bf16 KV per
# token (2 MiB per 32-token block), and a 4096-token prefill that takes
# seconds on 2 cores.
BENCH_LLAMA = dict(
    hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=8, num_key_value_heads=8,
    vocab_size=4096, max_position_embeddings=8192,
)


def gbps(nbytes, ns):
    return nbytes / ns if ns else 0.0


def counters(m):
    return {k: int(m.get(f"vllm:mooncake_go_{k}", 0)) for k in
            ("saved_blocks", "loaded_blocks", "failed_blocks", "saved_bytes", "loaded_bytes", "load_busy_ns", "save_busy_ns")}


def raw_figures(pool, keys, rounds):
    """Best-of-rounds GB/s of one batch_get_into of keys and one
    batch_put_from of the same sizes under fresh keys, through a
    registered buffer."""
    from mooncake_go.store import Store

    sizes = [keys[k] for k in sorted(keys)]
    names = sorted(keys)
    total = sum(sizes)
    buf = mmap.mmap(-1, total)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    ptrs, off = [], 0
    for s in sizes:
        ptrs.append(base + off)
        off += s
    st = Store()
    st.setup("127.0.0.1", pool.metadata, 0, 16 << 20, "tcp", "", pool.master)
    try:
        st.register_buffer(base, total)
        get, put = [], []
        for r in range(rounds):
            t = time.perf_counter()
            res = st.batch_get_into(names, ptrs, sizes)
            dt = time.perf_counter() - t
            assert all(n == s for n, s in zip(res, sizes)), res[:4]
            get.append(total / dt / 1e9)
            fresh = [f"bench-raw/{r}/{i}" for i in range(len(names))]
            t = time.perf_counter()
            res = st.batch_put_from(fresh, ptrs, sizes)
            dt = time.perf_counter() - t
            assert all(x == 0 for x in res), res[:4]
            put.append(total / dt / 1e9)
            for k in fresh:
                st.remove(k, force=True)
        st.unregister_buffer(base)
    finally:
        st.close()
    return {"raw_get_gbps": max(get), "raw_put_gbps": max(put), "raw_bytes": total, "raw_rounds": rounds}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=BENCH_LLAMA["num_hidden_layers"])
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--logs", default=None, help="folder for the processes' logs (default: a temporary one)")
    a = ap.parse_args()

    work = pathlib.Path(a.logs or tempfile.mkdtemp(prefix="mc-bench-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = dict(BENCH_LLAMA, num_hidden_layers=a.layers)
    t0 = time.monotonic()
    model = mcrig.tiny_llama(sys.executable, cfg, seed=1)
    kv_per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 2
    pool_bytes = kv_per_token * a.prompt_tokens * (2 * a.repeats + 2)  # saved + fresh prompts + one raw round
    pool = mcrig.Pool(work / "pool", nodes=[("bench", f"{max(pool_bytes >> 20, 256)}MiB")], master_args=["--default_kv_lease_ttl", "1000"])
    engine = dict(ENGINE, max_model_len=a.prompt_tokens + 64, max_num_batched_tokens=a.prompt_tokens + 64)
    env = {"VLLM_CPU_KVCACHE_SPACE": str(max(2, -(-kv_per_token * a.prompt_tokens * (2 * a.repeats + 2) // (1 << 30))))}
    ktc = {**CONNECTOR, "kv_role": "kv_both", "kv_connector_extra_config": store_config(pool, cache_prefix="bench")}
    saved = [prompt(1000 + i, a.prompt_tokens) for i in range(a.repeats)]
    fresh = [prompt(2000 + i, a.prompt_tokens) for i in range(a.repeats)]
    out = {"model": cfg, "prompt_tokens": a.prompt_tokens, "repeats": a.repeats, "kv_bytes_per_token": kv_per_token}
    try:
        saver = Driver("bench-saver", work, model, engine=engine, ktc=ktc, env=env).ready()
        saver.generate([prompt(999, 64)], max_tokens=1)  # warm-up
        first, cold = [], []
        for p in saved:
            t = time.perf_counter()
            first.append(saver.generate([p], max_tokens=1)[0]["tokens"])
            cold.append(time.perf_counter() - t)
        saver.close()  # its saves finish before the connector closes
        # vLLM's last stats interval may not reach the metrics before exit:
        # count what reached the pool instead, and time saves from the
        # loader's own saves of the fresh prompts below.
        keys = {k: v for k, v in pool.keys().items() if "/t=bench/" in k}
        out["pool_objects"], out["pool_bytes"] = len(keys), sum(keys.values())

        loader = Driver("bench-loader", work, model, engine=engine, ktc=ktc, env=env).ready()
        loader.generate([prompt(998, 64)], max_tokens=1)  # warm-up
        loader.metrics()
        recompute, hit = [], []
        for p, q, f in zip(saved, fresh, first):
            t = time.perf_counter()
            loader.generate([q], max_tokens=1)
            recompute.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = loader.generate([p], max_tokens=1)[0]
            hit.append(time.perf_counter() - t)
            assert got["tokens"] == f, ("a pool hit changed the first token", got["tokens"], f)
        m = loader.metrics()
        loader.close()
        c = counters(m)
        out.update({
            "ttft_saver_s": cold, "ttft_recompute_s": recompute, "ttft_hit_s": hit,
            "ttft_recompute_median_s": statistics.median(recompute), "ttft_hit_median_s": statistics.median(hit),
            "external_hit_tokens": int(m.get("vllm:external_prefix_cache_hits", 0)),
            "connector": c,
            "connector_load_gbps": gbps(c["loaded_bytes"], c["load_busy_ns"]),
            "connector_save_gbps": gbps(c["saved_bytes"], c["save_busy_ns"]),
        })
        out["ttft_speedup"] = out["ttft_recompute_median_s"] / out["ttft_hit_median_s"]
        out.update(raw_figures(pool, keys, rounds=3))
        out["load_ratio"] = out["connector_load_gbps"] / out["raw_get_gbps"]
        out["save_ratio"] = out["connector_save_gbps"] / out["raw_put_gbps"]
        out["elapsed_s"] = time.monotonic() - t0
        out["loadavg"] = os.getloadavg()
    finally:
        pool.stop()
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"model: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, {kv_per_token} KV bytes/token; "
          f"prompts of {a.prompt_tokens} tokens x {a.repeats}; load average {out['loadavg'][0]:.1f}")
    print(f"TTFT recompute (miss)  median {out['ttft_recompute_median_s'] * 1e3:8.1f} ms   runs {[round(x * 1e3) for x in recompute]}")
    print(f"TTFT pool hit          median {out['ttft_hit_median_s'] * 1e3:8.1f} ms   runs {[round(x * 1e3) for x in hit]}")
    print(f"TTFT speed-up          {out['ttft_speedup']:.1f} x   (external hit tokens {out['external_hit_tokens']})")
    print(f"load  connector {out['connector_load_gbps']:6.2f} GB/s   raw batch_get_into {out['raw_get_gbps']:6.2f} GB/s   ratio {out['load_ratio']:.2f}")
    print(f"save  connector {out['connector_save_gbps']:6.2f} GB/s   raw batch_put_from {out['raw_put_gbps']:6.2f} GB/s   ratio {out['save_ratio']:.2f}")
    print(f"logs: {work}")


if __name__ == "__main__":
    main()
