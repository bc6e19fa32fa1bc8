"""P/D disaggregation in real vLLM: a prefill instance (kv_producer) pushes
each prompt's KV into a decode instance's (kv_consumer) blocks; the decode
side generates the tokens of a run without any connector, and the prefill
side frees its blocks once they were sent. Offline (two LLM processes)
and online (two OpenAI API servers behind our proxy, concurrent
requests)."""

import concurrent.futures
import json
import re
import sys
import urllib.request

import pytest

import mcrig
from conftest import BASE_ENV, BLOCK, CONNECTOR, PROMPT_SETS, START_TIMEOUT, cpu_bind_env

PD_PROMPTS = PROMPT_SETS["pd"]


def pd_ktc(role):
    return {**CONNECTOR, "kv_role": role, "kv_connector_extra_config": {"mc_mode": "pd", "mc_load_timeout_ms": 60000}}


@pytest.fixture(scope="module")
def pd_baseline(baseline):
    return baseline["pd"]


def test_pd_offline(start, pd_baseline):
    """Prefill with max_tokens=1 returns kv_transfer_params; the decode
    instance, handed them, generates the baseline's tokens; the prefill
    instance's blocks all come back to its free pool."""
    boot = mcrig.free_port()
    prefill = start("prefill", ktc=pd_ktc("kv_producer"),
                    env={"VLLM_MOONCAKE_BOOTSTRAP_PORT": str(boot), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, wait=False)
    decode = start("decode", ktc=pd_ktc("kv_consumer"), wait=False)
    prefill.ready()
    idle = prefill.cmd("free_blocks")
    params = [{"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": f"xfer-offline-{i}"} for i in range(len(PD_PROMPTS))]
    first = prefill.generate(PD_PROMPTS, max_tokens=1, kv_transfer_params=params)
    assert [o["tokens"] for o in first] == [t[:1] for t in pd_baseline]
    handed = [o["kv_transfer_params"] for o in first]
    for p in handed:
        assert p and p["do_remote_prefill"] is True and p["transfer_id"].startswith("xfer-offline-"), handed
        assert p["remote_bootstrap_addr"].endswith(f":{boot}"), p
    held = prefill.cmd("free_blocks")
    assert held["free"] < idle["free"], "the prefill instance freed the blocks before sending them"

    decode.ready()
    # Offline, nothing steps the prefill engine between generate() calls;
    # its worker learns of the finished requests (and serves the decode
    # side's pulls) only in engine steps, which an API server's busy loop
    # would run by itself.
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(decode.generate, PD_PROMPTS, 8, handed)
        while not concurrent.futures.wait([fut], timeout=0.01).done:
            prefill.cmd("step", n=1)
        outs = fut.result()
    assert [o["tokens"] for o in outs] == pd_baseline
    assert int(decode.metrics().get("vllm:mooncake_go_failed_blocks", 0)) == 0

    def freed():
        prefill.cmd("step", n=1)
        return prefill.cmd("free_blocks")["free"] == idle["free"]

    mcrig.wait_until(freed, 120, "the prefill instance to free the sent blocks", tail=prefill.tail)


def _post(url, body, timeout=300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _metric(text, name):
    """The sum of every sample of metric name in a Prometheus text page."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def _api_server(workdir, model, name, port, ktc, env=None):
    args = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
        "--skip-tokenizer-init", "--dtype", "bfloat16", "--gpu-memory-utilization", "0.25", "--max-model-len", "2048",
        "--enforce-eager", "--block-size", str(BLOCK), "--seed", "0", "--kv-transfer-config", json.dumps(ktc),
    ]
    return mcrig.Proc(args, workdir / f"{name}.log", env=mcrig.child_env({**BASE_ENV, **cpu_bind_env(), **(env or {})}), name=name)


def test_pd_api_servers_behind_proxy(workdir, model, pd_baseline):
    """Two OpenAI API servers (prefill, decode) and our proxy: concurrent
    completion requests with prompt token ids get the baseline's tokens;
    afterwards the prefill server's KV cache is empty again."""
    boot, pport, dport = mcrig.free_port(), mcrig.free_port(), mcrig.free_port()
    procs = []
    try:
        pre = _api_server(workdir, model, "api-prefill", pport, pd_ktc("kv_producer"), {"VLLM_MOONCAKE_BOOTSTRAP_PORT": str(boot)})
        procs.append(pre)
        dec = _api_server(workdir, model, "api-decode", dport, pd_ktc("kv_consumer"))
        procs.append(dec)
        for p, port in ((pre, pport), (dec, dport)):
            def up(port=port, p=p):
                assert p.alive(), f"{p.name} exited with {p.p.returncode}\n{p.tail()}"
                try:
                    return _get(f"http://127.0.0.1:{port}/health") is not None
                except OSError:
                    return False
            mcrig.wait_until(up, START_TIMEOUT, f"{p.name} /health", tail=p.tail, interval=1)
        proxy = mcrig.Proc(
            [str(mcrig.REPO / "bin" / "mooncake-vllm-proxy"), "--prefill", f"http://127.0.0.1:{pport}", str(boot),
             "--decode", f"http://127.0.0.1:{dport}", "--port", "0"],
            workdir / "api-proxy.log", name="proxy",
        )
        procs.append(proxy)
        addr = proxy.wait_line(r'proxy listening.*addr=(\S+)', 60).group(1).strip('"')

        def complete(i):
            r = _post(f"http://{addr}/v1/completions", {
                "model": model, "prompt": PD_PROMPTS[i], "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True,
            })
            return r["choices"][0]["token_ids"]

        with concurrent.futures.ThreadPoolExecutor(len(PD_PROMPTS)) as ex:
            got = list(ex.map(complete, range(len(PD_PROMPTS))))
        assert got == pd_baseline

        def prefill_empty():
            usage = _metric(_get(f"http://127.0.0.1:{pport}/metrics"), "vllm:kv_cache_usage_perc")
            return usage is not None and usage == 0.0

        mcrig.wait_until(prefill_empty, 120, "the prefill server's KV cache usage to return to 0", tail=pre.tail, interval=0.5)
        dm = _get(f"http://127.0.0.1:{dport}/metrics")
        assert (_metric(dm, "vllm:mooncake_go_failed_blocks_total") or 0) == 0
    finally:
        for p in reversed(procs):
            p.stop()
