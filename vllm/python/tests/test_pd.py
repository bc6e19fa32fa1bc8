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
