"""Store mode in real vLLM: separate vLLM processes share KV blocks through
one pool, and generate exactly the tokens of a run without any connector.

Every test compares greedy token ids against `baseline` (the same prompts
in a vLLM instance with no connector) and reads both our counters
(vllm:mooncake_go_*, from the connector's KVConnectorStats through vLLM's
Prometheus metrics) and vLLM's own (vllm:external_prefix_cache_hits).
"""

import json

import pytest

from conftest import BLOCK, CONNECTOR, PROMPT_SETS, store_config

PROMPTS = PROMPT_SETS["store"]
# Distinct full blocks of PROMPTS: 3 + 7 + 2 + 2 + (6 - 5 shared).
UNIQUE_BLOCKS = 15
# Tokens of the last prompt's full blocks shared with prompt 2 (5 blocks).
SHARED_TOKENS = 160


def expected_hit_tokens(prompts, sync=False):
    """Tokens a fresh instance loads from a pool holding every full block
    of prompts: whole blocks only. Synchronous loads never claim a prompt's
    last token (vLLM computes at least one token itself, so a prompt that
    ends on a block boundary loads one block fewer); asynchronous loads may
    cover the whole prompt (vLLM then recomputes its last token)."""
    return sum((((len(p) - 1) if sync else len(p)) // BLOCK) * BLOCK for p in prompts)


def ktc(role="kv_both", **extra):
    return {**CONNECTOR, "kv_role": role, "kv_connector_extra_config": extra}


def counters(m):
    keys = ("saved_blocks", "loaded_blocks", "failed_blocks", "saved_bytes", "loaded_bytes")
    return {k: int(m.get(f"vllm:mooncake_go_{k}", 0)) for k in keys}


def tenant_keys(pool, tenant):
    return {k: v for k, v in pool.keys().items() if f"/t={tenant}/" in k}


def test_save_then_load_in_fresh_processes(pool, start, baseline, tmp_path):
    """Process 1 (config from MOONCAKE_CONFIG_PATH, prefix caching on,
    async loads) saves every full block; then two fresh processes (config
    in kv_connector_extra_config), one with prefix caching on and async
    loads, one with prefix caching off and synchronous loads, get an
    external hit for every full block and generate the baseline's tokens."""
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({
        "metadata_server": pool.metadata, "master_server_address": pool.master, "protocol": "tcp",
        "mode": "standalone-store", "global_segment_size": 0, "local_buffer_size": "64MB",
    }))
    saver = start("saver", ktc=ktc(cache_prefix="store"), env={"MOONCAKE_CONFIG_PATH": str(cfg)})
    assert saver.tokens(PROMPTS) == baseline["store"]
    # Saves of the last blocks may complete after generate returned: their
    # counters reach vLLM's metrics with the engine's next outputs.
    # A failed save ends the wait at once (then fails the assertion below).
    c = counters(saver.metrics_until(lambda m: counters(m)["saved_blocks"] >= UNIQUE_BLOCKS or counters(m)["failed_blocks"] > 0,
                                     f"saved_blocks >= {UNIQUE_BLOCKS}"))
    assert c["failed_blocks"] == 0, c
    assert c["saved_blocks"] >= UNIQUE_BLOCKS, c
    saver.close()
    keys = tenant_keys(pool, "store")
    assert len(keys) == UNIQUE_BLOCKS, f"pool keys after the saver exited: {sorted(keys)}"
    assert len(set(keys.values())) == 1, keys
    block_bytes = next(iter(keys.values()))

    extra = store_config(pool, cache_prefix="store")
    on = start("load-prefix-on", ktc=ktc(**extra), wait=False)
    off = start("load-prefix-off-sync", ktc=ktc(**extra, load_async=False), engine={"enable_prefix_caching": False}, wait=False)
    for d, sync in ((on.ready(), False), (off.ready(), True)):
        want = expected_hit_tokens(PROMPTS, sync)
        outs = d.generate(PROMPTS)
        assert [o["tokens"] for o in outs] == baseline["store"], d.name
        m = d.metrics()
        c = counters(m)
        ext, local = int(m["vllm:external_prefix_cache_hits"]), int(m.get("vllm:prefix_cache_hits", 0))
        # With prefix caching on, the last prompt's blocks shared with prompt
        # 2 are local hits when vLLM schedules it after prompt 2's async load
        # landed (under load it may), external hits when scheduled with it:
        # either way every full block is a hit, and only shared ones are local.
        assert ext + local == want, (d.name, ext, local, want)
        assert local in ((0,) if sync else (0, SHARED_TOKENS)), (d.name, ext, local)
        assert c["loaded_blocks"] * BLOCK >= ext, (d.name, c)
        assert c["loaded_bytes"] == c["loaded_blocks"] * block_bytes, (d.name, c)
        assert c["failed_blocks"] == 0, (d.name, c)
        assert sum(o["num_cached_tokens"] for o in outs) >= want - len(PROMPTS), (d.name, [o["num_cached_tokens"] for o in outs])


def test_loaded_kv_is_used(pool, start, baseline):
    """Overwriting the pooled blocks' bytes changes the next process's
    tokens; restoring them brings the baseline's tokens back. The saver
    runs with mc_save_async false: every block is in the pool when
    generate returns (its steps end only once their saves are done)."""
    from mooncake_go.store import Store

    prompts = PROMPTS[:2]
    extra = store_config(pool, cache_prefix="used")
    saver = start("saver", ktc=ktc(**extra, mc_save_async=False))
    assert saver.tokens(prompts) == baseline["store"][:2]
    keys = sorted(tenant_keys(pool, "used"))
    assert len(keys) == 3 + 7, f"pool keys when generate returned (synchronous saves): {keys}"
    saver.close()

    st = Store()
    st.setup("127.0.0.1", pool.metadata, 0, 16 << 20, "tcp", "", pool.master)
    try:
        original = {k: st.get(k) for k in keys}
        for k, v in original.items():
            st.remove(k, force=True)
            st.put(k, bytes((b * 7 + 13) & 0xFF for b in v))
        garbled = start("load-garbled", ktc=ktc(**extra))
        outs = garbled.generate(prompts)
        assert counters(garbled.metrics())["loaded_blocks"] >= 2 + 7
        assert [o["tokens"] for o in outs] != baseline["store"][:2], "overwritten KV blocks did not change the tokens: loaded KV unused?"
        garbled.close()
        for k, v in original.items():
            st.remove(k, force=True)
            st.put(k, v)
        restored = start("load-restored", ktc=ktc(**extra))
        assert restored.tokens(prompts) == baseline["store"][:2]
        assert counters(restored.metrics())["loaded_blocks"] >= 2 + 7
    finally:
        st.close()


LAYERWISE_PROMPTS = PROMPT_SETS["layerwise"]


def test_layerwise_save_and_load(pool, start, baseline):
    """mc_layerwise: one object per block and layer, saved layer by layer
    and loaded synchronously layer by layer in a fresh process. The saver
    runs in embedded mode (it mounts 64 MB of its own): placement prefers
    the node's segment, which outlives the engine, so every object is
    still there after it exits."""
    extra = store_config(pool, cache_prefix="lw", mc_layerwise=True)
    saver = start("saver", ktc=ktc(**{**extra, "mode": "embedded", "global_segment_size": "64MB"}))
    assert saver.tokens(LAYERWISE_PROMPTS) == baseline["layerwise"]
    saver.close()
    layers = 4
    keys = tenant_keys(pool, "lw")
    assert len(keys) == (4 + 3 + 1) * layers, sorted(keys)
    loader = start("loader", ktc=ktc(**extra, load_async=False))
    assert loader.tokens(LAYERWISE_PROMPTS) == baseline["layerwise"]
    m = loader.metrics()
    assert int(m["vllm:external_prefix_cache_hits"]) == expected_hit_tokens(LAYERWISE_PROMPTS, sync=True)
    assert counters(m)["failed_blocks"] == 0


def test_inside_vllm_multiconnector_by_name(pool, start, baseline):
    """Our connector as a sub-connector of vLLM's own MultiConnector, named
    without kv_connector_module_path (our vllm.general_plugins entry point
    registers the name with vLLM's KVConnectorFactory, which MultiConnector
    also needs to rebuild our stats in the front-end process: without it
    the first step with our stats failed). A saver saves every full block,
    a fresh loader gets an external hit for each, both generate the
    baseline's tokens and our counters reach vLLM's metrics."""
    sub = {"kv_connector": "MooncakeGoConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": store_config(pool, cache_prefix="multi")}
    multi = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [sub]}}
    saver = start("multi-saver", ktc=multi)
    assert saver.tokens(PROMPTS) == baseline["store"]
    c = counters(saver.metrics_until(lambda m: counters(m)["saved_blocks"] >= UNIQUE_BLOCKS or counters(m)["failed_blocks"] > 0,
                                     f"saved_blocks >= {UNIQUE_BLOCKS}"))
    assert c["failed_blocks"] == 0 and c["saved_blocks"] >= UNIQUE_BLOCKS, c
    saver.close()
    assert len(tenant_keys(pool, "multi")) == UNIQUE_BLOCKS
    loader = start("multi-loader", ktc=multi, engine={"enable_prefix_caching": False})
    outs = loader.generate(PROMPTS)
    assert [o["tokens"] for o in outs] == baseline["store"]
    m = loader.metrics()
    c = counters(m)
    assert int(m["vllm:external_prefix_cache_hits"]) == expected_hit_tokens(PROMPTS), m
    assert c["loaded_blocks"] * BLOCK >= expected_hit_tokens(PROMPTS) and c["failed_blocks"] == 0, c
