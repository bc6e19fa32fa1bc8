"""P/D disaggregation through the connector with two processes: a
prefill instance (kv_producer) computes a prompt and pushes its KV
straight into a decode instance's (kv_consumer) blocks; the decode side
checks every received token against the KV it would compute itself."""

import json
import os
import sys

import numpy as np

import conftest

HERE = os.path.dirname(os.path.abspath(__file__))


def test_prefill_pushes_kv_into_decode(lib_path):
    port = conftest.free_port()
    env = conftest.child_env(
        PYTHONPATH=os.pathsep.join([HERE, str(conftest.REPO / "vllm" / "python"), str(conftest.REPO / "abi" / "python")]),
        VLLM_MOONCAKE_BOOTSTRAP_PORT=str(port),
        MOONCAKE_GO_LIB=lib_path,
    )
    prefill = conftest.abi_conftest.Peer([sys.executable, os.path.join(HERE, "pd_peer.py"), "prefill", "tiny-pd"], env=env)
    decode = conftest.abi_conftest.Peer([sys.executable, os.path.join(HERE, "pd_peer.py"), "decode", "tiny-pd"], env=env)
    try:
        assert prefill.read(60) == {"ready": "prefill"}
        assert decode.read(60) == {"ready": "decode"}
        rng = np.random.default_rng(7)
        for i, n in enumerate((70, 96, 5)):  # a partial last block, whole blocks, less than one block
            prompt = [int(t) for t in rng.integers(1, 30000, n)]
            prefill.send(f'{{"prompt": {prompt}, "transfer_id": "xfer-{i}"}}')
            params = prefill.read(60)["params"]
            assert params["do_remote_prefill"] is True and params["transfer_id"] == f"xfer-{i}"
            assert params["remote_engine_id"] == "prefill-engine"
            assert params["remote_bootstrap_addr"] == f"http://127.0.0.1:{port}"
            decode.send(json.dumps({"prompt": prompt, "params": params}))
            got = decode.read(90)
            assert got["external"] == n and got["load_errors"] == 0, got
            assert got["verified"] is not None, got
            assert got["params_after"]["do_remote_prefill"] is False
            sent = prefill.read(90)
            assert "sent" in sent, sent
    finally:
        assert prefill.close() == 0, "".join(prefill.err)
        assert decode.close() == 0, "".join(decode.err)


def test_aborts_free_blocks_on_both_sides(lib_path):
    """A decode request aborted before its allocation still tells the
    producer, which frees the blocks it held; a prefill request aborted
    mid-prefill is dropped, and a decode instance that asks for it gets
    every block reported failed, recomputes them, and ends right."""
    port = conftest.free_port()
    env = conftest.child_env(
        PYTHONPATH=os.pathsep.join([HERE, str(conftest.REPO / "vllm" / "python"), str(conftest.REPO / "abi" / "python")]),
        VLLM_MOONCAKE_BOOTSTRAP_PORT=str(port),
        MOONCAKE_GO_LIB=lib_path,
    )
    prefill = conftest.abi_conftest.Peer([sys.executable, os.path.join(HERE, "pd_peer.py"), "prefill", "tiny-pd2"], env=env)
    decode = conftest.abi_conftest.Peer([sys.executable, os.path.join(HERE, "pd_peer.py"), "decode", "tiny-pd2"], env=env)
    try:
        assert prefill.read(60) == {"ready": "prefill"}
        assert decode.read(60) == {"ready": "decode"}
        rng = np.random.default_rng(11)
        # Decode aborts before allocating: the producer is still told and frees.
        prompt = [int(t) for t in rng.integers(1, 30000, 50)]
        prefill.send(json.dumps({"prompt": prompt, "transfer_id": "xfer-a"}))
        params = prefill.read(60)["params"]
        decode.send(json.dumps({"prompt": prompt, "params": params, "abort_before_alloc": True}))
        got = decode.read(60)
        assert got["aborted"] and got["free"] == 31, got  # every block but the null block is free again
        assert "sent" in prefill.read(90)
        # Prefill aborts mid-prefill: dropped, no params; a decode that asks anyway recomputes.
        prompt = [int(t) for t in rng.integers(1, 30000, 90)]
        prefill.send(json.dumps({"prompt": prompt, "transfer_id": "xfer-b", "abort_after_steps": 1}))
        got = prefill.read(60)
        assert got["params"] is None and got["free"] == 31, got
        params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "transfer_id": "xfer-b",
            "remote_engine_id": "prefill-engine",
            "remote_bootstrap_addr": f"http://127.0.0.1:{port}",
        }
        decode.send(json.dumps({"prompt": prompt, "params": params}))
        got = decode.read(90)
        assert got["external"] == 90 and got["load_errors"] == 1 and got["verified"] is None, got
    finally:
        assert prefill.close() == 0, "".join(prefill.err)
        assert decode.close() == 0, "".join(decode.err)
