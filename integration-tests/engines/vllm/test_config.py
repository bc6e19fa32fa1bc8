"""Pool failures in real vLLM: an unreachable master at start-up stops
the engine with a clear error (the default), or, with mc_pool_required
false, the engine serves without the cache and generates the same
tokens; a master that hangs while serving costs one lookup timeout. Never
a hang."""

import time

import mcrig
from conftest import CONNECTOR, PROMPT_SETS, Driver, store_config


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


def test_hung_master_costs_one_lookup_timeout(workdir, model, baseline, start):
    """A master that stops answering (SIGSTOP): the batch after it costs
    one lookup timeout, not one per request, and generates the baseline's
    tokens (misses, recomputed); once the master answers again, lookups hit
    again."""
    import os
    import signal
    import time

    pool = mcrig.Pool(workdir / "hung-pool", nodes=(("hungnode", "256MiB"),))
    try:
        extra = store_config(pool, cache_prefix="hung", mc_lookup_timeout_ms=1000)
        # Prefix caching off: the last check must see the pool's blocks,
        # not this instance's local copies.
        d = start("engine", ktc={**CONNECTOR, "kv_role": "kv_both", "kv_connector_extra_config": extra},
                  engine={"enable_prefix_caching": False})
        prompts = PROMPT_SETS["store"]
        assert d.tokens(prompts[:2]) == baseline["store"][:2]  # saved: blocks in the pool
        master = pool.procs[0].p
        os.kill(master.pid, signal.SIGSTOP)
        try:
            t = time.monotonic()
            assert d.tokens(PROMPT_SETS["hung"]) == baseline["hung"]
            hung = time.monotonic() - t
        finally:
            os.kill(master.pid, signal.SIGCONT)
        # Ten new requests: one lookup waits out its 1 s timeout, the other
        # nine miss at once (without the breaker: ten seconds).
        assert hung < 5, f"a batch of 10 requests took {hung:.1f} s with the master hung"
        log = d.log.read_text(errors="replace")
        assert "pool not answering" in log, "the first failed lookup is logged"

        # The master answers again: within a few probes, the saved prompts hit.
        def hits():
            before = int(d.metrics().get("vllm:external_prefix_cache_hits", 0))
            d.generate(prompts[:1])
            return int(d.metrics().get("vllm:external_prefix_cache_hits", 0)) > before

        mcrig.wait_until(hits, 60, "lookups to hit again after the master came back", tail=d.tail, interval=1)
    finally:
        pool.stop()
