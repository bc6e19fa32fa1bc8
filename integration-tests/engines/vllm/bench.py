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
    connector saves every full block. Its save throughput per prompt is
    saved_bytes / save_busy_ns (wall time with a save in flight) of that
    prompt's save.
 3. Loader instance (fresh process; warm-ups: a miss, then a hit of the
    saver's warm-up prompt, neither measured): for each prompt, first a new prompt
    of the same length (a miss: recomputed, TTFT "recompute"), then the
    saved prompt (a hit: loaded, TTFT "hit"); the first tokens must equal
    the saver's. Load throughput per hit: loaded_bytes / load_busy_ns.
 4. Raw, twice: a store client reads the same objects, one prompt's
    worth (--prompt-tokens / 32 objects) per batch_get_into, and writes
    the same bytes with batch_put_from from a registered buffer (the
    store's own zero-copy path), 4 rounds: first in the loader's worker
    process while the engine runs (llm.collective_rpc: the same process
    and the same vLLM processes beside it on the cores as the
    connector's loads), then in this process with vLLM gone (the machine
    to itself). Ratio = the connector's median over the prompts / raw's
    median over the batches of rounds 2-4 (the all-bytes-over-all-busy-
    time figures are printed too).
 5. With --raw-in-engine (before the loader): the raw client doing the
    connector's job inside vLLM (rawconn.RawConnector in an instance of
    its own): per prompt one put where ours saves and one get where ours
    loads, async or sync as ours, with the same idle wait. Ratio = the
    connector's median / this raw median (the like-for-like figure: the
    same engine around both, at the same moments).
 6. With --paired (implies --raw-in-engine, whose objects then stay in
    the pool): the loader runs vLLM's own MultiConnector over
    rawconn.RawConnector (which loads only requests marked raw_load and
    saves nothing) and ours, and after each measured hit of ours loads
    one of the raw instance's prompts through RawConnector in the same
    way (async or sync as ours), ours first on even prompts and raw first
    on odd ones, each after the previous one's saves are in the pool.
    Ratio = the median over the prompts of ours / raw of the same pair:
    both in the same engine process, seconds apart, so the drift of this
    shared machine's speed between instances (minutes apart) and the
    instances' differences drop out of the ratio.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402
from conftest import CONNECTOR, ENGINE, Driver, prompt, store_config  # noqa: E402
from driver import raw_moves  # noqa: E402

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


def raw_figures(moved, prefix="raw"):
    """The figures of driver.raw_moves' result: the median GB/s over the
    batches of the rounds after the first (the first maps the node's
    segment into the process and faults the buffer in; the connector's
    figures exclude that too, by their warm-ups), and each round's median."""
    get, put = moved["get"], moved["put"]
    return {f"{prefix}_get_gbps": statistics.median(x for rd in get[1:] for x in rd),
            f"{prefix}_put_gbps": statistics.median(x for rd in put[1:] for x in rd),
            f"{prefix}_bytes": moved["bytes"], f"{prefix}_rounds": len(get),
            f"{prefix}_get_rounds_gbps": [statistics.median(rd) for rd in get],
            f"{prefix}_put_rounds_gbps": [statistics.median(rd) for rd in put]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=BENCH_LLAMA["num_hidden_layers"])
    ap.add_argument("--sync", action="store_true", help="synchronous loads (load_async false) instead of vLLM's async path")
    ap.add_argument("--save-sync", action="store_true",
                    help="mc_save_async false: wait_for_save returns once the step's saves are in the pool (no engine thread runs beside the copies)")
    ap.add_argument("--bind", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND of the instances (one runs at a time; default both cores)")
    ap.add_argument("--idle-wait-ms", type=float, default=None,
                    help="mc_idle_wait_ms of the connector (default: the connector's, 5; 0 lets vLLM's empty steps spin)")
    ap.add_argument("--executor", choices=["mp", "uni"], default="mp",
                    help="mp (vLLM's CPU default: front end, engine core and worker in three processes; the engine core spins on the "
                         "worker's answer queue) or uni (VLLM_ENABLE_V1_MULTIPROCESSING=0 and distributed_executor_backend uni: all in one "
                         "process, as vLLM runs one GPU by default; vLLM's CPU platform turns a bare uni back into mp)")
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for the instances: OpenMP threads sleep at once after a parallel region instead of spinning")
    ap.add_argument("--raw-in-engine", "--raw-at-save", dest="raw_in_engine", action="store_true",
                    help="also time the raw store client doing the connector's job inside vLLM (rawconn.RawConnector, an instance "
                         "of its own): one prompt's batch_put_from where ours saves and one prompt's batch_get_into where ours loads, "
                         "async or sync as ours (--save-sync, --sync), with the same idle wait")
    ap.add_argument("--raw-target", choices=["kv", "scratch"], default="kv",
                    help="--raw-in-engine's memory: kv (vLLM's KV cache, the request's own blocks, one part per layer tensor, as ours) "
                         "or scratch (contiguous buffers of its own)")
    ap.add_argument("--paired", action="store_true",
                    help="the loader also loads the raw instance's objects through rawconn.RawConnector under vLLM's MultiConnector, "
                         "alternating with ours, and compares each pair (implies --raw-in-engine)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--logs", default=None, help="folder for the processes' logs (default: a temporary one)")
    a = ap.parse_args()
    a.raw_in_engine = a.raw_in_engine or a.paired
    if a.paired and a.repeats > 400:
        ap.error("--paired: at most 400 --repeats (its raw loads' prompts use seeds 3500 + i)")

    work = pathlib.Path(a.logs or tempfile.mkdtemp(prefix="mc-bench-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = dict(BENCH_LLAMA, num_hidden_layers=a.layers)
    t0 = time.monotonic()
    model = mcrig.tiny_llama(sys.executable, cfg, seed=1)
    kv_per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 2
    # Saved and fresh prompts, --raw-in-engine's saves (kept for its
    # loads), as much again with --paired (a first --paired run with no
    # such room lost a raw instance's objects before the loader read them,
    # -704, cause not established), the two warm-ups' 8 blocks each and one raw batch (one prompt's
    # worth), under the master's eviction watermark (0.9) with room to
    # spare: an eviction would drop objects raw reads.
    pool_bytes = (kv_per_token * a.prompt_tokens * (2 * a.repeats + 1 + (a.repeats if a.raw_in_engine else 0) + (a.repeats if a.paired else 0)) + kv_per_token * 32 * 16) * 5 // 4
    pool = mcrig.Pool(work / "pool", nodes=[("bench", f"{max(pool_bytes >> 20, 256)}MiB")], master_args=["--default_kv_lease_ttl", "5000"])
    engine = dict(ENGINE, max_model_len=a.prompt_tokens + 64, max_num_batched_tokens=a.prompt_tokens + 64,
                  distributed_executor_backend=a.executor)
    # VLLM_ALLOW_INSECURE_SERIALIZATION: llm.collective_rpc sends the raw
    # step's function to the worker pickled (this benchmark's own code).
    env = {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
           **({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if a.executor == "uni" else {}),
           **({"OMP_WAIT_POLICY": "PASSIVE"} if a.omp_passive else {}),
           "VLLM_CPU_KVCACHE_SPACE": str(max(2, -(-kv_per_token * a.prompt_tokens * (2 * a.repeats + 2) // (1 << 30)))),
           "VLLM_CPU_OMP_THREADS_BIND": a.bind}
    extra = store_config(pool, cache_prefix="bench")
    if a.sync:
        extra["load_async"] = False
    if a.save_sync:
        extra["mc_save_async"] = False
    if a.idle_wait_ms is not None:
        extra["mc_idle_wait_ms"] = a.idle_wait_ms
    ktc = {**CONNECTOR, "kv_role": "kv_both", "kv_connector_extra_config": extra}
    saved = [prompt(1000 + i, a.prompt_tokens) for i in range(a.repeats)]
    fresh = [prompt(2000 + i, a.prompt_tokens) for i in range(a.repeats)]
    out = {"model": cfg, "prompt_tokens": a.prompt_tokens, "repeats": a.repeats, "kv_bytes_per_token": kv_per_token,
           "load_async": not a.sync, "save_async": not a.save_sync, "cpu_bind": a.bind, "mc_idle_wait_ms": a.idle_wait_ms, "executor": a.executor,
           "omp_passive": a.omp_passive, "raw_target": a.raw_target if a.raw_in_engine else None, "paired": a.paired}
    blocks_per_prompt = a.prompt_tokens // 32

    def flush(d):
        """One tiny request: vLLM hands the workers' stats of the steps
        before it to the metrics."""
        d.generate([prompt(997, 8)], max_tokens=1)

    def bench_keys():
        return {k: v for k, v in pool.keys().items() if "/t=bench/" in k}

    def wait_saved(n, what, count=None):
        # Each poll starts a `mooncake ctl keys` process: the first 0.5 s
        # after the prompt returned, by when its saves (tens of ms) are
        # done, then every 0.5 s, so that polling does not take the CPU
        # the saves being measured run on (their busy time is measured
        # inside the connector, so a late poll does not change it).
        time.sleep(0.5)
        count = count or (lambda: len(bench_keys()))
        mcrig.wait_until(lambda: count() >= n, 300, what, tail=pool.tails, interval=0.5)

    started = []  # every instance, killed on the way out if a step failed

    def start(name, **kw):
        d = Driver(name, work, model, engine=engine, **kw)
        started.append(d)
        return d.ready()

    try:
        # Saver: prompts one at a time, each prompt's saves finished (its
        # blocks in the pool) before the next starts, so nothing else runs
        # while they are in flight.
        saver = start("bench-saver", ktc=ktc, env=env)
        # Warm-up: connections to the master and the node are made and the
        # node's segment mapped by the first transfers, not measured.
        saver.generate([prompt(999, 256)], max_tokens=1)
        wait_saved(8, "the warm-up's blocks")
        flush(saver)
        sbefore = counters(saver.metrics())
        base = len(bench_keys())
        first, cold, save_each = [], [], []
        last = sbefore
        for i, p in enumerate(saved):
            t = time.perf_counter()
            first.append(saver.generate([p], max_tokens=1)[0]["tokens"])
            cold.append(time.perf_counter() - t)
            wait_saved(base + (i + 1) * blocks_per_prompt, f"prompt {i}'s blocks in the pool")
            flush(saver)
            now = counters(saver.metrics())
            save_each.append(gbps(now["saved_bytes"] - last["saved_bytes"], now["save_busy_ns"] - last["save_busy_ns"]))
            last = now
        safter = last
        sm = {k: safter[k] - sbefore[k] for k in safter}
        saver.close()
        keys = {k: v for k, v in bench_keys().items()}
        if a.raw_in_engine:
            # The raw store client doing our connector's job in an instance
            # of its own (rawconn.RawConnector): each prompt's put where ours
            # saves (wait_for_save after the prefill; async or not as ours),
            # then each prompt's get where ours loads (a hit's async load
            # started in start_load_kv, or a sync one before the forward),
            # same layout, settings and pacing (a flush request after each).
            tag = f"r{os.getpid()}"
            rex = {"master_server_address": pool.master, "metadata_server": pool.metadata,
                   "objects": blocks_per_prompt, "object_bytes": 32 * kv_per_token, "min_tokens": a.prompt_tokens // 2,
                   "tag": tag, "save_async": not a.save_sync, "load_async": not a.sync,
                   "idle_wait_ms": 5 if a.idle_wait_ms is None else a.idle_wait_ms, "target": a.raw_target,
                   "keep": a.paired}
            renv = {**env, "PYTHONPATH": os.pathsep.join([str(HERE), mcrig.child_env()["PYTHONPATH"]])}
            rawat = start("bench-raw-in-engine", env=renv,
                          ktc={"kv_connector": "RawConnector", "kv_connector_module_path": "rawconn",
                               "kv_role": "kv_both", "kv_connector_extra_config": rex})

            rawat.generate([prompt(996, 64)], max_tokens=1)  # warm-up, as the other instances (below min_tokens: no save)

            def raw_objects():
                return sum(1 for k in pool.keys() if k.startswith(f"bench-rawconn/{tag}/"))

            for i in range(a.repeats):
                rawat.generate([prompt(3000 + i, a.prompt_tokens)], max_tokens=1)
                wait_saved((i + 1) * blocks_per_prompt, f"raw save {i}'s objects in the pool", count=raw_objects)
                flush(rawat)
            for i in range(a.repeats):
                rawat.generate([prompt(4000 + i, a.prompt_tokens)], max_tokens=1, kv_transfer_params=[{"raw_load": i}])
                flush(rawat)
            figs = rawat.cmd("connector_figures")["ranks"][0]
            rawat.close()
            assert len(figs["put"]) == a.repeats and len(figs["get"]) == a.repeats, \
                f"raw in the engine timed {len(figs['put'])} puts and {len(figs['get'])} gets for {a.repeats} prompts"
            out["raw_in_engine_put_each_gbps"], out["raw_in_engine_get_each_gbps"] = figs["put"], figs["get"]
            out["raw_in_engine_put_gbps"] = statistics.median(figs["put"])
            out["raw_in_engine_get_gbps"] = statistics.median(figs["get"])
        out["pool_objects"], out["pool_bytes"] = len(keys), sum(keys.values())

        # Loader (fresh process): the new prompts first (misses,
        # recomputed; their saves done before any hit), then the saved
        # prompts (hits), so the loads run alone too.
        if a.paired:
            # ours and RawConnector: MultiConnector gives a request's load
            # to the first connector that offers tokens; ours offers them
            # for blocks in the pool under its keys, RawConnector only to
            # requests marked raw_load, whose prompts are new to both (and,
            # with min_tokens out of reach, it saves nothing), reading the
            # raw instance's objects (same tag).
            sub_raw = {"kv_connector": "RawConnector", "kv_connector_module_path": "rawconn", "kv_role": "kv_both",
                       "kv_connector_extra_config": {**rex, "min_tokens": 1 << 40, "keep": True}}
            lktc = {"kv_connector": "MultiConnector", "kv_role": "kv_both",
                    "kv_connector_extra_config": {"connectors": [ktc, sub_raw]}}
            loader = start("bench-loader", ktc=lktc, env=renv)
        else:
            loader = start("bench-loader", ktc=ktc, env=env)
        loader.generate([prompt(998, 256)], max_tokens=1)  # warm-up of saves (a miss)
        # Warm-up of loads (not measured), as the raw instances' first
        # reads: the saver's warm-up prompt is a hit of 8 blocks.
        loader.generate([prompt(999, 256)], max_tokens=1)
        recompute, hit = [], []
        for i, q in enumerate(fresh):
            t = time.perf_counter()
            loader.generate([q], max_tokens=1)
            recompute.append(time.perf_counter() - t)
        wait_saved(len(keys) + 8 + a.repeats * blocks_per_prompt, "the new prompts' blocks in the pool")
        flush(loader)
        mb = loader.metrics()
        before = counters(mb)
        ext0 = int(mb.get("vllm:external_prefix_cache_hits", 0))  # the warm-up hit's
        last, load_each = before, []

        def raw_load(i):
            """--paired: loads raw instance prompt i's objects through the
            loader's RawConnector (into a new prompt's blocks)."""
            # prompt() repeats every 3999 seeds: 3500 + i stays clear of
            # the other prompts' seeds (5000 + i would be 1001 + i, a saved
            # prompt, whose blocks ours would then load and vLLM cache).
            loader.generate([prompt(3500 + i, a.prompt_tokens)], max_tokens=1, kv_transfer_params=[{"raw_load": i}])
            # Ours may save blocks of the raw-loaded prompt that the
            # forward computed (those RawConnector loaded count as loaded
            # to vLLM): the pool's keys stop changing before the next
            # load is measured (two polls 0.5 s apart agree).
            flush(loader)
            prev = [None]

            def settled():
                n = len(bench_keys())
                same, prev[0] = n == prev[0], n
                return same

            mcrig.wait_until(settled, 120, f"the pool's keys to settle after raw load {i}", tail=pool.tails, interval=0.5)
            flush(loader)

        for i, (p, f) in enumerate(zip(saved, first)):
            if a.paired and i % 2:
                raw_load(i)  # raw first on odd prompts (ours load none of it: its load counters stay)
            t = time.perf_counter()
            got = loader.generate([p], max_tokens=1)[0]
            hit.append(time.perf_counter() - t)
            assert got["tokens"] == f, ("a pool hit changed the first token", got["tokens"], f)
            flush(loader)
            m = loader.metrics()
            now = counters(m)
            load_each.append(gbps(now["loaded_bytes"] - last["loaded_bytes"], now["load_busy_ns"] - last["load_busy_ns"]))
            last = now
            if a.paired and not i % 2:
                raw_load(i)
        after = last
        if a.paired:
            figs = loader.cmd("connector_figures")["ranks"][0]
            assert len(figs["get"]) == a.repeats, f"the loader's RawConnector timed {len(figs['get'])} gets for {a.repeats} prompts"
            pairs = [x / y for x, y in zip(load_each, figs["get"])]
            out["paired_raw_get_each_gbps"], out["paired_load_ratio_each"] = figs["get"], pairs
            out["paired_raw_get_gbps"] = statistics.median(figs["get"])
            out["paired_load_ratio"] = statistics.median(pairs)
        # Raw in the loader's worker process while the engine runs: the
        # same process, the same neighbours on the 2 cores (vLLM's engine
        # core waits for the worker's answer as in a step), the same objects.
        ranks = loader.cmd("raw_in_worker", timeout=600, master=pool.master, metadata=pool.metadata,
                           keys=keys, batch=blocks_per_prompt, rounds=4)["ranks"]
        out.update(raw_figures(ranks[0], prefix="raw_in_worker"))
        loader.close()
        c = {k: after[k] - before[k] for k in after}
        out.update({
            "ttft_saver_s": cold, "ttft_recompute_s": recompute, "ttft_hit_s": hit,
            "ttft_recompute_median_s": statistics.median(recompute), "ttft_hit_median_s": statistics.median(hit),
            "external_hit_tokens": int(m.get("vllm:external_prefix_cache_hits", 0)) - ext0,
            "saver": sm, "loader_hits": c,
            # Per prompt (one save of its blocks, one load of them), the
            # median compared with raw's median round: one slow moment of
            # the machine moves neither side's figure.
            "connector_save_each_gbps": save_each, "connector_load_each_gbps": load_each,
            "connector_load_gbps": statistics.median(load_each),
            "connector_save_gbps": statistics.median(save_each),
            # All prompts' bytes over all busy time (the mean view).
            "connector_load_total_gbps": gbps(c["loaded_bytes"], c["load_busy_ns"]),
            "connector_save_total_gbps": gbps(sm["saved_bytes"], sm["save_busy_ns"]),
        })
        out["ttft_speedup"] = out["ttft_recompute_median_s"] / out["ttft_hit_median_s"]
        out.update(raw_figures(raw_moves(pool.master, pool.metadata, keys, blocks_per_prompt, 4)))
        out["load_ratio"] = out["connector_load_gbps"] / out["raw_get_gbps"]
        out["save_ratio"] = out["connector_save_gbps"] / out["raw_put_gbps"]
        out["load_ratio_in_worker"] = out["connector_load_gbps"] / out["raw_in_worker_get_gbps"]
        out["save_ratio_in_worker"] = out["connector_save_gbps"] / out["raw_in_worker_put_gbps"]
        if a.raw_in_engine:
            out["save_ratio_in_engine"] = out["connector_save_gbps"] / out["raw_in_engine_put_gbps"]
            out["load_ratio_in_engine"] = out["connector_load_gbps"] / out["raw_in_engine_get_gbps"]
        out["load_total_ratio"] = out["connector_load_total_gbps"] / out["raw_get_gbps"]
        out["save_total_ratio"] = out["connector_save_total_gbps"] / out["raw_put_gbps"]
        out["elapsed_s"] = time.monotonic() - t0
        out["loadavg"] = os.getloadavg()
    finally:
        for d in started:
            d.kill()  # a no-op for the closed ones
        pool.stop()
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"model: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, {kv_per_token} KV bytes/token; "
          f"prompts of {a.prompt_tokens} tokens x {a.repeats}; {'sync' if a.sync else 'async'} loads; {'sync' if a.save_sync else 'async'} saves; executor {a.executor}{', OMP passive' if a.omp_passive else ''}; cores {a.bind}; load average {out['loadavg'][0]:.1f}")
    print(f"TTFT recompute (miss)  median {out['ttft_recompute_median_s'] * 1e3:8.1f} ms   runs {[round(x * 1e3) for x in recompute]}")
    print(f"TTFT pool hit          median {out['ttft_hit_median_s'] * 1e3:8.1f} ms   runs {[round(x * 1e3) for x in hit]}")
    print(f"TTFT speed-up          {out['ttft_speedup']:.1f} x   (external hit tokens {out['external_hit_tokens']}{', the paired raw loads included' if a.paired else ''})")
    print(f"load  connector {out['connector_load_gbps']:6.2f} GB/s   raw batch_get_into {out['raw_get_gbps']:6.2f} GB/s   ratio {out['load_ratio']:.2f}"
          f"   (medians; per prompt {[round(x, 2) for x in load_each]}; all bytes / all busy time {out['connector_load_total_gbps']:.2f} = {out['load_total_ratio']:.2f})")
    print(f"save  connector {out['connector_save_gbps']:6.2f} GB/s   raw batch_put_from {out['raw_put_gbps']:6.2f} GB/s   ratio {out['save_ratio']:.2f}"
          f"   (medians; per prompt {[round(x, 2) for x in save_each]}; all bytes / all busy time {out['connector_save_total_gbps']:.2f} = {out['save_total_ratio']:.2f})")
    print(f"raw in the loader's worker, engine running: get {out['raw_in_worker_get_gbps']:6.2f} GB/s (load ratio {out['load_ratio_in_worker']:.2f}),"
          f" put {out['raw_in_worker_put_gbps']:6.2f} GB/s (save ratio {out['save_ratio_in_worker']:.2f});"
          f" rounds get {[round(x, 2) for x in out['raw_in_worker_get_rounds_gbps']]}, put {[round(x, 2) for x in out['raw_in_worker_put_rounds_gbps']]}")
    if a.raw_in_engine:
        print(f"raw in the engine (rawconn, where and as ours moves; {a.raw_target}): put {out['raw_in_engine_put_gbps']:6.2f} GB/s (save ratio {out['save_ratio_in_engine']:.2f}),"
              f" get {out['raw_in_engine_get_gbps']:6.2f} GB/s (load ratio {out['load_ratio_in_engine']:.2f});"
              f" per prompt put {[round(x, 2) for x in out['raw_in_engine_put_each_gbps']]}, get {[round(x, 2) for x in out['raw_in_engine_get_each_gbps']]}")
    if a.paired:
        print(f"paired in the loader (ours, then raw on even prompts; raw, then ours on odd): load ours / raw per prompt "
              f"{[round(x, 2) for x in out['paired_load_ratio_each']]}, median {out['paired_load_ratio']:.2f};"
              f" raw gets {[round(x, 2) for x in out['paired_raw_get_each_gbps']]} GB/s (median {out['paired_raw_get_gbps']:.2f})")
    print(f"raw rounds (median of the round's batches of {blocks_per_prompt} objects): get {[round(x, 2) for x in out['raw_get_rounds_gbps']]}, put {[round(x, 2) for x in out['raw_put_rounds_gbps']]} GB/s")
    print(f"connector: saver {out['saver']}, loader {out['loader_hits']}")
    print(f"logs: {work}")


if __name__ == "__main__":
    main()
