"""Pool failures at start-up in real vLLM: an unreachable master stops the
engine with a clear error (the default), or, with mc_pool_required false,
the engine serves without the cache and generates the same tokens; never
a hang."""

import time

import mcrig
from conftest import CONNECTOR, PROMPT_SETS, Driver


def unreachable(**extra):
    dead = f"127.0.0.1:{mcrig.free_port()}"  # nothing listens here
    return {**CONNECTOR, "kv_role": "kv_both", "kv_connector_extra_config": {
        "master_server_address": dead, "metadata_server": f"http://127.0.0.1:{mcrig.free_port()}/metadata",
        "protocol": "tcp", "mode": "standalone-store", "global_segment_size": 0, "local_buffer_size": "16MB",
        "mc_connect_timeout_ms": 3000, **extra,
    }}, dead


def test_unreachable_master_stops_the_engine(workdir, model):
    ktc, dead = unreachable()
    d = Driver("unreachable-required", workdir, model, ktc=ktc)
    t0 = time.monotonic()
    try:
        d.ready()
    except AssertionError as e:
        msg = str(e)
    else:
        d.close()
        raise AssertionError("vLLM started although its KV cache pool was unreachable")
    assert "KV cache pool unavailable" in msg and dead in msg, msg[-3000:]
    assert d.p.wait(120) != 0
    d.close()
    assert time.monotonic() - t0 < 300


def test_unreachable_master_optional_pool_serves(workdir, model, baseline):
    ktc, dead = unreachable(mc_pool_required=False)
    d = Driver("unreachable-optional", workdir, model, ktc=ktc).ready()
    try:
        assert d.tokens(PROMPT_SETS["store"]) == baseline["store"]
        m = d.metrics()
        assert int(m.get("vllm:external_prefix_cache_hits", 0)) == 0
        assert int(m.get("vllm:mooncake_go_loaded_blocks", 0)) == 0
    finally:
        d.close()
    log = d.log.read_text(errors="replace")
    assert "serving without the KV cache pool" in log and dead in log
