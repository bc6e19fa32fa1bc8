"""One vLLM instance of a P/D pair, in its own process, for test_pd.py.

    python pd_peer.py prefill <model>   # reads {"prompt": [...], "transfer_id": "..."} lines
    python pd_peer.py decode <model>    # reads {"prompt": [...], "params": {...}} lines

Each request line is answered with one JSON line: the prefill side prints
{"params": <kv_transfer_params from request_finished>} and, once every
held block was sent and freed, {"sent": <request id>}; the decode side
prints {"verified": <request id>, "external": n} once the request ran to
its end with every loaded token checked against the KV this engine would
compute (vllm_sim). "abort_after_steps" (prefill) and
"abort_before_alloc" (decode) abort the request instead and report
{"aborted": <request id>, "free": <free blocks once drained>}."""

import json
import sys
import types

import vllm_sim as sim
from mooncake_go.vllm import MooncakeGoConnector
from mooncake_go.vllm.connector import KVConnectorRole

BS, NUM_BLOCKS, LAYERS = 16, 32, 4


def config(kv_role, model, engine_id):
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(
            kv_role=kv_role, engine_id=engine_id, kv_connector_extra_config={"mc_mode": "pd", "mc_load_timeout_ms": 5000}
        ),
        model_config=types.SimpleNamespace(model=model, dtype="float16", use_mla=False),
        cache_config=types.SimpleNamespace(block_size=BS, cache_dtype="auto"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0),
    )


def main():
    side, model = sys.argv[1], sys.argv[2]
    role = "kv_producer" if side == "prefill" else "kv_consumer"
    cfg = config(role, model, f"{side}-engine")
    sched = MooncakeGoConnector(cfg, KVConnectorRole.SCHEDULER)
    worker = MooncakeGoConnector(cfg, KVConnectorRole.WORKER, types.SimpleNamespace(num_blocks=NUM_BLOCKS))
    engine = sim.Engine(sched, [worker], sim.Layout("flash_attn", NUM_BLOCKS, BS, 2, 8), LAYERS, token_budget=64)
    print(json.dumps({"ready": side}), flush=True)
    n = 0
    for line in sys.stdin:
        msg = json.loads(line)
        n += 1
        rid = f"{side}-{n}"
        if side == "prefill":
            params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": msg["transfer_id"]}
            req = sim.Request(rid, msg["prompt"], 1, BS, kv_transfer_params=params)
            engine.add(req)
            if msg.get("abort_after_steps") is not None:
                for _ in range(msg["abort_after_steps"]):
                    engine.step()
                engine.abort(rid)
                engine.step()  # the next engine step carries the drop to the worker
                engine.run(timeout=60)
                print(json.dumps({"aborted": rid, "params": req.finish_params, "free": len(engine.free)}), flush=True)
                continue
            while rid not in engine.done:
                engine.step()
            print(json.dumps({"params": req.finish_params}), flush=True)
            engine.run(timeout=60)
            assert ("sent", rid) in engine.log, engine.log
            print(json.dumps({"sent": rid}), flush=True)
        else:
            req = sim.Request(rid, msg["prompt"], 2, BS, kv_transfer_params=dict(msg["params"]))
            engine.add(req)
            if msg.get("abort_before_alloc"):
                engine.abort(rid)
                engine.step()  # the next engine step carries the empty receive to the producer
                engine.run(timeout=60)
                print(json.dumps({"aborted": rid, "free": len(engine.free)}), flush=True)
                continue
            engine.run(timeout=60)
            ext = [e for e in engine.log if e[0] == "alloc" and e[1] == rid][0][2]
            failed = [e for e in engine.log if e[0] == "load-error" and e[1] == rid]
            verified = ("verified-load", rid, 0, ext) in engine.log
            print(json.dumps({"verified": rid if verified else None, "external": ext, "load_errors": len(failed), "params_after": req.kv_transfer_params}), flush=True)
    worker.shutdown()
    sched.shutdown()


if __name__ == "__main__":
    main()
