"""One real vLLM instance (offline LLM), driven over stdin/stdout.

    python driver.py CONFIG_JSON

CONFIG_JSON: {"model": path, "engine": {LLM keyword arguments},
"kv_transfer_config": {KVTransferConfig fields} or null}. The driver
builds the LLM, then answers one JSON line per JSON command line:

    {"op": "generate", "prompts": [[token ids]...], "max_tokens": N,
     "kv_transfer_params": [dict or null per prompt]}
        -> {"outputs": [{"tokens", "num_cached_tokens", "kv_transfer_params"}], "seconds"}
    {"op": "metrics"}      -> {"metrics": {name: value}} (llm.get_metrics())
    {"op": "free_blocks"}  -> {"free": n, "total": n} (engine core in this
                              process: VLLM_ENABLE_V1_MULTIPROCESSING=0)
    {"op": "step", "n": k} -> {"steps": k} (runs the engine loop k times,
                              e.g. so a P/D producer frees sent blocks)
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
                reply = {"metrics": _metrics(llm)}
            elif op == "free_blocks":
                reply = _free_blocks(llm)
            elif op == "step":
                for _ in range(int(cmd.get("n", 1))):
                    llm.llm_engine.step()
                reply = {"steps": int(cmd.get("n", 1))}
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
