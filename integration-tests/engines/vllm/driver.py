"""One real vLLM instance (offline LLM), driven over stdin/stdout.

    python driver.py CONFIG_JSON

CONFIG_JSON: {"model": path, "engine": {LLM keyword arguments},
"kv_transfer_config": {KVTransferConfig fields} or null}. The driver
builds the LLM, then answers one JSON line per JSON command line:

    {"op": "generate", "prompts": [[token ids]...], "max_tokens": N,
     "kv_transfer_params": [dict or null per prompt]}
        -> {"outputs": [{"tokens", "num_cached_tokens", "kv_transfer_params"}], "seconds"}
    {"op": "metrics"}      -> {"metrics": {name: value}} (llm.get_metrics(),
                              after the engine outputs that arrived since
                              the last generate returned are processed)
    {"op": "free_blocks"}  -> {"free": n, "total": n} (engine core in this
                              process: VLLM_ENABLE_V1_MULTIPROCESSING=0)
    {"op": "step", "n": k} -> {"steps": k} (runs the engine loop k times,
                              e.g. so a P/D producer frees sent blocks)
    {"op": "raw_in_worker", "master", "metadata", "keys": {key: bytes},
     "batch", "rounds"}    -> {"ranks": [raw_moves(...) per worker]}: the
                              raw store client in each worker process,
                              sent by llm.collective_rpc while the engine
                              runs (needs VLLM_ALLOW_INSECURE_SERIALIZATION=1)
    {"op": "connector_figures"} -> {"ranks": [the worker connector's
                              `figures` (a list, or a dict of lists) per
                              worker] (rawconn.py)
    {"op": "exit"}         -> {"bye": true}, then shuts vLLM down

Replies go to the original stdout only; everything vLLM prints goes to
stderr. A failing command answers {"error": traceback} and the driver keeps
serving; a failing start answers it and exits 1.
"""

import json
import os
import sys
import time
import traceback


def raw_moves(master, metadata, keys, batch, rounds):
    """The raw store client (mooncake_go.store) moving the objects keys
    ({key: bytes}), batch objects per call: each batch read with one
    batch_get_into into a registered buffer, then written under fresh keys
    (removed after) with one batch_put_from, rounds times. Returns
    {"get": [[GB/s per batch] per round], "put": [...], "bytes": n}; keys
    left over from whole batches are not moved. AssertionError when a read
    or write of an object fails, naming the first ones."""
    import ctypes
    import mmap

    from mooncake_go.store import Store

    names = sorted(keys)
    names = names[:len(names) - len(names) % batch]
    assert names, f"fewer than {batch} objects to move"
    sizes = [keys[k] for k in names]
    total = sum(sizes)
    buf = mmap.mmap(-1, total)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    ptrs, off = [], 0
    for sz in sizes:
        ptrs.append(base + off)
        off += sz
    st = Store()
    st.setup("127.0.0.1", metadata, 0, 16 << 20, "tcp", "", master)
    get, put = [], []
    try:
        st.register_buffer(base, total)
        for r in range(rounds):
            get.append([])
            put.append([])
            for lo in range(0, len(names), batch):
                ks, ps, ss = names[lo:lo + batch], ptrs[lo:lo + batch], sizes[lo:lo + batch]
                t = time.perf_counter()
                res = st.batch_get_into(ks, ps, ss)
                dt = time.perf_counter() - t
                assert all(n == sz for n, sz in zip(res, ss)), [(k, n, sz) for k, n, sz in zip(ks, res, ss) if n != sz][:4]
                get[-1].append(sum(ss) / dt / 1e9)
                fresh = [f"bench-raw/{os.getpid()}/{r}/{lo + i}" for i in range(len(ks))]
                t = time.perf_counter()
                res = st.batch_put_from(fresh, ps, ss)
                dt = time.perf_counter() - t
                assert all(x == 0 for x in res), res[:4]
                put[-1].append(sum(ss) / dt / 1e9)
                for k in fresh:
                    st.remove(k, force=True)
        st.unregister_buffer(base)
    finally:
        st.close()
    return {"get": get, "put": put, "bytes": total}


def _raw_in_worker(worker, *args):
    return raw_moves(*args)


def _connector_figures(worker):
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    group = get_kv_transfer_group()
    # Under vLLM's MultiConnector (bench.py --paired) the figures are a
    # sub-connector's: the first that keeps any.
    for c in [group, *getattr(group, "sub_connectors", [])]:
        figs = getattr(c, "figures", None)
        if figs is not None:
            return dict(figs) if isinstance(figs, dict) else list(figs)
    return []


def _reply_channel():
    """Keeps the original stdout for replies and points fd 1 at stderr, so
    that nothing vLLM or its libraries print can corrupt a reply."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    return os.fdopen(fd, "w", buffering=1)


def _metrics(llm):
    out = {}
    for m in llm.get_metrics():
        v = getattr(m, "value", None)
        if v is None and hasattr(m, "values"):
            v = list(m.values)
        if isinstance(v, (int, float, list)):
            out[m.name] = v
    return out


def _drain(llm, max_steps=1000):
    """Hands vLLM's stat loggers what the engine produced after the last
    generate returned. A finished request whose blocks are held for saves
    keeps the engine core stepping; the workers' stats of those steps (the
    saves that completed after the last token) reach the Prometheus
    counters only when the front end processes their outputs, which
    generate stops doing at its last token. Multiprocess engine core: the
    outputs queued when called are processed (none is waited for). In-process
    engine core: it is stepped while it holds requests, at most max_steps
    times (an idle step waits at most mc_idle_wait_ms in the connector)."""
    eng = llm.llm_engine
    core = eng.engine_core
    q = getattr(core, "outputs_queue", None)
    if q is not None:
        # Those queued now only: while saves are pending the engine core
        # adds an output every step, so "until empty" need not end.
        for _ in range(q.qsize()):
            eng.step()
        return
    sched = getattr(getattr(core, "engine_core", None), "scheduler", None)
    for _ in range(max_steps):
        if sched is None or not sched.has_requests():
            return
        eng.step()


def _engine_core(llm):
    core = llm.llm_engine.engine_core
    inner = getattr(core, "engine_core", None)
    if inner is None:
        raise RuntimeError("the engine core runs in another process: set VLLM_ENABLE_V1_MULTIPROCESSING=0")
    return inner


def _free_blocks(llm):
    pool = _engine_core(llm).scheduler.kv_cache_manager.block_pool
    return {"free": pool.get_num_free_blocks(), "total": pool.num_gpu_blocks}


def main():
    out = _reply_channel()
    cfg = json.loads(sys.argv[1])
    t0 = time.monotonic()
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        kw = dict(cfg.get("engine") or {})
        if cfg.get("kv_transfer_config"):
            from vllm.config import KVTransferConfig

            kw["kv_transfer_config"] = KVTransferConfig(**cfg["kv_transfer_config"])
        llm = LLM(model=cfg["model"], **kw)
    except BaseException:
        out.write(json.dumps({"error": traceback.format_exc()}) + "\n")
        out.flush()
        os._exit(1)
    out.write(json.dumps({"ready": True, "startup_s": round(time.monotonic() - t0, 3)}) + "\n")

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "generate":
                params = cmd.get("kv_transfer_params") or [None] * len(cmd["prompts"])
                sps = []
                for p in params:
                    sp = SamplingParams(temperature=0, max_tokens=int(cmd.get("max_tokens", 8)), ignore_eos=True)
                    if p is not None:
                        sp.extra_args = {"kv_transfer_params": p}
                    sps.append(sp)
                t = time.monotonic()
                res = llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in cmd["prompts"]], sps, use_tqdm=False)
                secs = time.monotonic() - t
                reply = {
                    "outputs": [
                        {
                            "tokens": list(r.outputs[0].token_ids),
                            "num_cached_tokens": r.num_cached_tokens,
                            "kv_transfer_params": getattr(r, "kv_transfer_params", None),
                        }
                        for r in res
                    ],
                    "seconds": secs,
                }
            elif op == "metrics":
                _drain(llm)
                reply = {"metrics": _metrics(llm)}
            elif op == "free_blocks":
                reply = _free_blocks(llm)
            elif op == "step":
                for _ in range(int(cmd.get("n", 1))):
                    llm.llm_engine.step()
                reply = {"steps": int(cmd.get("n", 1))}
            elif op == "raw_in_worker":
                args = (cmd["master"], cmd["metadata"], cmd["keys"], int(cmd["batch"]), int(cmd["rounds"]))
                reply = {"ranks": llm.collective_rpc(_raw_in_worker, timeout=float(cmd.get("timeout", 540)), args=args)}
            elif op == "connector_figures":
                reply = {"ranks": llm.collective_rpc(_connector_figures)}
            elif op == "exit":
                out.write(json.dumps({"bye": True}) + "\n")
                out.flush()
                break
            else:
                reply = {"error": f"unknown op {op!r}"}
        except BaseException:
            reply = {"error": traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:
        traceback.print_exc()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
