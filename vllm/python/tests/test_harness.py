"""The vLLM connector driven in vLLM's call order (vllm_sim.Engine) with
content checks: every loaded token's KV must equal what the engine
computes for it, on every TP rank, in each of vLLM's KV cache layouts."""

import os
import types

import numpy as np
import pytest

import vllm_sim as sim
from mooncake_go.vllm import MooncakeGoConnector
from mooncake_go.vllm.connector import KVConnectorRole

BS = 16
NUM_BLOCKS = 64
LAYERS = 4


def vllm_config(pool, role="kv_both", tp=1, rank=0, model="tiny-llama", use_mla=False, **extra):
    ex = {
        "master_server_address": pool.rpc,
        "metadata_server": pool.url,
        "global_segment_size": "16MB",
        "protocol": "tcp",
    }
    ex.update(extra)
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(kv_role=role, engine_id=f"engine-{model}", kv_connector_extra_config=ex),
        model_config=types.SimpleNamespace(
            model=f"/models/{model}", dtype="float16", use_mla=use_mla, hf_config=types.SimpleNamespace(num_hidden_layers=LAYERS)
        ),
        cache_config=types.SimpleNamespace(block_size=BS, cache_dtype="auto"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1, rank=rank),
    )


class Instance:
    """One vLLM instance: a scheduler connector, one worker connector per TP rank, an engine."""

    def __init__(self, pool, kind, tp=1, budget=48, **kw):
        mla = kind == "mla"
        self.sched = MooncakeGoConnector(vllm_config(pool, tp=tp, use_mla=mla, **kw), KVConnectorRole.SCHEDULER)
        cache_cfg = types.SimpleNamespace(num_blocks=NUM_BLOCKS)
        self.workers = [
            MooncakeGoConnector(vllm_config(pool, tp=tp, rank=r, use_mla=mla, **kw), KVConnectorRole.WORKER, cache_cfg)
            for r in range(tp)
        ]
        layout = sim.Layout(kind, NUM_BLOCKS, BS, heads=2, head_dim=8)
        self.engine = sim.Engine(self.sched, self.workers, layout, LAYERS, token_budget=budget)

    def close(self):
        for c in [self.sched] + self.workers:
            c.shutdown()

    def stats(self):
        out = {}
        for w in self.workers:
            for k, v in w.take_stats().items():
                out[k] = out.get(k, 0) + v
        return out


@pytest.fixture
def instances(pool):
    made = []

    def make(kind, **kw):
        i = Instance(pool, kind, **kw)
        made.append(i)
        return i

    yield make
    for i in made:
        i.close()


def prompt(seed, n):
    return list(np.random.default_rng(seed).integers(1, 30000, n))


def allocs(engine):
    return {e[1]: (e[2], e[3]) for e in engine.log if e[0] == "alloc"}


@pytest.mark.parametrize(
    "kind,tp,layerwise", [("flash_attn", 2, False), ("flashinfer", 1, False), ("mla", 2, False), ("flash_attn", 2, True)]
)
def test_save_then_load_in_another_instance(instances, kind, tp, layerwise):
    """Instance A computes and saves (chunked prefill, several requests);
    instance B gets a full-prompt hit, a hit ending mid-block, a partial
    prefix hit and a miss, and every loaded token holds A's KV. Layer-wise
    mode saves each layer as the forward writes it."""
    model = f"m-{kind}-{tp}-{layerwise}"
    kw = {"mc_layerwise": True} if layerwise else {}
    a = instances(kind, tp=tp, model=model, **kw)
    p1, p2, p3 = prompt(1, 80), prompt(2, 40), prompt(3, 30)
    for rid, p in (("a1", p1), ("a2", p2), ("a3", p1[:48] + prompt(4, 20))):
        a.engine.add(sim.Request(rid, p, 2, BS))
    a.engine.run()
    st = a.stats()
    assert st["saved_blocks"] >= 5 + 2 + 1, st  # a1: 5 blocks, a2: 2 full, a3: 1 new full block beyond the shared 3
    assert st["failed_blocks"] == 0, st

    b = instances(kind, tp=tp, model=model, **kw)
    b.engine.add(sim.Request("b-full", p1, 2, BS))  # every block in the pool
    b.engine.add(sim.Request("b-mid", p2 + prompt(5, 9), 2, BS))  # the hit ends inside block 2 of a 49-token prompt... at 32
    b.engine.add(sim.Request("b-prefix", p1[:48] + prompt(6, 25), 2, BS))  # 3 shared blocks
    b.engine.add(sim.Request("b-miss", p3, 2, BS))
    b.engine.run()
    got = allocs(b.engine)
    assert got["b-full"] == (80, True), got
    assert got["b-mid"] == (32, True), got
    assert got["b-prefix"] == (48, True), got
    assert got["b-miss"] == (0, False), got
    verified = {e[1] for e in b.engine.log if e[0] == "verified-load"}
    assert {"b-full", "b-mid", "b-prefix"} <= verified
    st = b.stats()
    per_rank = 1 if kind == "mla" else tp
    assert st["loaded_blocks"] == (5 + 2 + 3) * tp, st  # every rank loads its blocks (MLA ranks read the shared copy)
    assert per_rank >= 1


@pytest.mark.parametrize("layerwise", [False, True])
def test_sync_load_leaves_a_token(instances, pool, layerwise):
    """load_async false: the load completes inside the step and never
    claims the last token of a fully cached prompt. Layer-wise: one object
    per block and layer, and the forward waits for each layer only
    (wait_for_layer_load)."""
    from mooncake_go import Store

    kw = {"mc_layerwise": True} if layerwise else {}
    a = instances("flashinfer", model=f"m-sync-{layerwise}", **kw)
    p = prompt(10, 64)
    req = sim.Request("s1", p, 1, BS)
    a.engine.add(req)
    a.engine.run()
    key = f"mc/v1/m-sync-{layerwise}/float16/vllm-nhd/tp0of1/pp0of1/bt{BS}/" + req.block_hashes[3].hex()
    with Store() as s:
        s.setup("127.0.0.1", pool.url, 0, 1 << 20, "tcp", "", pool.rpc)
        assert s.is_exist(key) is (not layerwise)
        for layer in range(LAYERS):
            assert s.is_exist(f"{key}/l{layer}") is layerwise
    b = instances("flashinfer", model=f"m-sync-{layerwise}", load_async=False, **kw)
    b.engine.add(sim.Request("s2", p, 3, BS))
    b.engine.run()
    assert allocs(b.engine)["s2"] == (48, False)
    assert ("verified-load", "s2", 0, 48) in b.engine.log


def test_preemption_and_resume(instances):
    """A request preempted in the middle of its chunked prefill is fenced,
    resumed, finished; the pool then serves its prompt byte-exact."""
    a = instances("flash_attn", model="m-preempt", budget=32)
    p = prompt(20, 96)
    a.engine.add(sim.Request("p1", p, 2, BS))
    a.engine.step()
    a.engine.step()  # 64 of 96 tokens computed, 4 blocks planned for saving
    a.engine.preempt("p1")
    a.engine.preempted_pending = {"p1"}
    a.engine.run()
    assert ("preempted", "p1") in a.engine.log
    b = instances("flash_attn", model="m-preempt")
    b.engine.add(sim.Request("p2", p, 1, BS))
    b.engine.run()
    assert allocs(b.engine)["p2"] == (96, True)
    assert ("verified-load", "p2", 0, 96) in b.engine.log


def test_abort_while_loading(instances):
    """A request aborted in the step its async load is planned is still
    reported finished-receiving, request_finished holds its blocks (vLLM
    asserts on a finished-receiving id it already freed, and the load may
    still write them), and they come back once the load is reported."""
    a = instances("flashinfer", model="m-abort")
    p = prompt(30, 64)
    a.engine.add(sim.Request("x1", p, 1, BS))
    a.engine.run()
    b = instances("flashinfer", model="m-abort")
    b.engine.add(sim.Request("x2", p, 4, BS))
    free_before = len(b.engine.free)
    b.engine.step(before_build=lambda e: e.abort("x2"))
    b.engine.run()
    assert allocs(b.engine)["x2"] == (64, True)
    assert ("finished", "x2", "FINISHED_ABORTED", True) in b.engine.log
    assert ("recv-after-finish", "x2") in b.engine.log  # held until the load was reported
    assert len(b.engine.free) == free_before
    assert b.sched._c is not None and b.engine.idle()


def test_failed_block_is_not_offered_again(instances, pool):
    """A block whose load fails while the pool still lists it (another
    layout's object under its key here; a crashed node's in production)
    is not offered again by the next lookups (mc_vllm_load_failed): the
    next request with the same prompt loads the blocks before it and
    recomputes from it, instead of failing on it again."""
    from mooncake_go import Store

    a = instances("flashinfer", model="m-suspect")
    p = prompt(41, 80)
    a.engine.add(sim.Request("s1", p, 1, BS))
    a.engine.run()
    req = sim.Request("s2", p, 2, BS)
    key = f"mc/v1/m-suspect/float16/vllm-nhd/tp0of1/pp0of1/bt{BS}/" + req.block_hashes[2].hex()
    s = Store()
    s.setup("127.0.0.1", pool.url, 0, 1 << 20, "tcp", "", pool.rpc)
    try:
        s.remove(key, force=True)
        s.put(key, b"not a block")
        b = instances("flashinfer", model="m-suspect")
        b.engine.add(req)
        b.engine.run()
        assert ("load-error", "s2", 2) in b.engine.log
        assert s.is_exist(key), "the pool still lists the bad object"
        b.engine.add(sim.Request("s3", p, 2, BS))
        b.engine.run()
    finally:
        s.close()
    assert allocs(b.engine)["s3"][0] == 2 * BS, allocs(b.engine)
    assert not [e for e in b.engine.log if e[0] == "load-error" and e[1] == "s3"]


def test_failed_load_is_reported_and_recomputed(instances, pool):
    """A block evicted between lookup and load: its id comes back from
    get_block_ids_with_load_errors, the request is still reported
    finished-receiving, the engine recomputes from that block, and the end
    result is right."""
    from mooncake_go import Store

    a = instances("flashinfer", model="m-fail")
    p = prompt(40, 80)
    a.engine.add(sim.Request("f1", p, 1, BS))
    a.engine.run()

    req = sim.Request("f2", p, 2, BS)
    key = f"mc/v1/m-fail/float16/vllm-nhd/tp0of1/pp0of1/bt{BS}/" + req.block_hashes[2].hex()
    s = Store()
    s.setup("127.0.0.1", pool.url, 0, 1 << 20, "tcp", "", pool.rpc)
    try:
        assert s.is_exist(key), key
        b = instances("flashinfer", model="m-fail")
        b.engine.add(req)

        def evict(e):
            s.remove(key, force=True)

        b.engine.step(before_build=evict)
        b.engine.run()
    finally:
        s.close()
    assert allocs(b.engine)["f2"] == (80, True)
    assert ("load-error", "f2", 2) in b.engine.log
    assert ("recv", "f2") in b.engine.log
    st = b.stats()
    assert st["failed_blocks"] >= 1 and st["loaded_blocks"] == 4, st


def test_bad_input_is_a_clear_error(pool):
    from mooncake_go.errors import MooncakeError

    cfg = vllm_config(pool, role="kv_sideways")
    with pytest.raises(MooncakeError, match="kv_role"):
        MooncakeGoConnector(cfg, KVConnectorRole.SCHEDULER)
    w = MooncakeGoConnector(vllm_config(pool, model="m-bad"), KVConnectorRole.WORKER, types.SimpleNamespace(num_blocks=8))
    try:
        with pytest.raises(MooncakeError, match="regions has zero elements"):
            w.register_kv_caches({})
        # A scheduler call on a worker is refused, with vLLM's thread untouched.
        with pytest.raises(MooncakeError, match="wrong role|scheduler call"):
            w._c.lookup({"req_id": "r", "hashes": [], "num_tokens": 1, "num_computed_tokens": 0})
    finally:
        w.shutdown()


def test_register_refuses_layouts_it_cannot_address(pool):
    """Tensors whose blocks are not whole, dense, slowest-dimension pages
    are refused at register_kv_caches with a clear error; dense permuted
    views (vLLM's HND) are fine."""
    from mooncake_go.vllm.connector import LayoutError, regions_of

    f16 = np.float16
    fa = np.zeros((2, 8, 16, 2, 8), f16)
    assert regions_of({"l": fa}) == [(fa.ctypes.data, 512, 8, 0, -1), (fa.ctypes.data + 8 * 512, 512, 8, 0, -1)]
    fi = np.zeros((8, 2, 16, 2, 8), f16)
    assert regions_of({"l": fi}, 8) == [(fi.ctypes.data, 1024, 8, 0, -1)]
    hnd = np.zeros((8, 2, 2, 16, 8), f16).transpose(0, 1, 3, 2, 4)  # HND storage, NHD view
    assert regions_of({"l": hnd}, 8) == [(hnd.__array_interface__["data"][0], 1024, 8, 0, -1)]
    bad = {
        "two blocks": ({"l": np.zeros((2, 2, 16, 2, 8), f16)}, None, "ambiguous"),
        "fortran order": ({"l": np.asfortranarray(np.zeros((2, 64, 16, 2, 8), f16))}, None, "slowest"),
        "strided slice": ({"l": np.zeros((2, 128, 16, 2, 8), f16)[:, ::2]}, None, "densely"),
        "block count vs config": ({"l": np.zeros((2, 32, 16, 2, 8), f16)}, 64, "kv_cache_config says 64"),
        "block count vs layers": ({"a": np.zeros((8, 16, 8), f16), "b": np.zeros((9, 16, 8), f16)}, None, "previous layers 8"),
        "empty": ({"l": np.zeros((0, 16, 8), f16)}, None, "empty"),
        "not a tensor": ({"l": [1, 2, 3]}, None, "not a tensor"),
    }
    for what, (caches, nb, msg) in bad.items():
        with pytest.raises(LayoutError, match=msg):
            regions_of(caches, nb)
        assert what


class _FakeDeviceTensor:
    """A torch-like tensor on a device (type "cuda" with an index, or
    another type) whose bytes are a numpy array's."""

    def __init__(self, arr, dev_type, index):
        self._a = arr
        self.device = types.SimpleNamespace(type=dev_type, index=index)
        self.shape = arr.shape

    def data_ptr(self):
        return self._a.ctypes.data

    def element_size(self):
        return self._a.itemsize

    def stride(self):
        return tuple(s // self._a.itemsize for s in self._a.strides)

    def numel(self):
        return self._a.size

    def get_device(self):
        return self.device.index


def test_check_layout_reads_the_tensors_order():
    """check_layout (what real vLLM reaches with a resolved
    kv_cache_layout) accepts a 4-D tensor stored in the named order and
    refuses one stored otherwise, naming both."""
    from mooncake_go.vllm.connector import LayoutError, check_layout

    f16 = np.float16
    bhnc = np.zeros((4, 2, 16, 8), f16)  # blocks, heads, tokens, content
    check_layout({"l": bhnc}, "LBHNC")
    bnhc = np.zeros((4, 16, 2, 8), f16).transpose(0, 2, 1, 3)  # BNHC storage, BHNC view
    check_layout({"l": bnhc}, "LBNHC")
    with pytest.raises(LayoutError, match="stored as BNHC, but kv_cache_config.kv_cache_layout is LBHNC"):
        check_layout({"l": bnhc}, "LBHNC")


def test_gpu_kv_caches(pool):
    """CUDA tensors give regions with their device ordinal (every layout);
    other devices are refused; without a CUDA runtime the library refuses
    GPU caches with one clear message, and the connector stays usable."""
    from mooncake_go.errors import MooncakeError
    from mooncake_go.vllm.connector import LayoutError, regions_of

    f16 = np.float16
    fa = np.zeros((2, 8, 16, 2, 8), f16)
    t = _FakeDeviceTensor(fa, "cuda", 1)
    assert regions_of({"l": t}) == [(fa.ctypes.data, 512, 8, 0, 1), (fa.ctypes.data + 8 * 512, 512, 8, 0, 1)]
    mla = np.zeros((8, 16, 576), f16)
    assert regions_of({"a": _FakeDeviceTensor(mla, "cuda", 0)}, 8) == [(mla.ctypes.data, 16 * 576 * 2, 8, 0, 0)]
    with pytest.raises(LayoutError, match="unsupported: KV caches on"):
        regions_of({"l": _FakeDeviceTensor(fa, "xpu", 0)})
    if os.environ.get("MC_CUDART_PATH"):
        pytest.skip("a CUDA runtime is configured: the no-runtime refusal is not testable")
    w = MooncakeGoConnector(vllm_config(pool, model="m-gpu"), KVConnectorRole.WORKER, types.SimpleNamespace(num_blocks=8))
    try:
        with pytest.raises(MooncakeError, match="unsupported: no CUDA runtime"):
            w.register_kv_caches({"l": t})
        w.wait_for_save()  # never registered on the GPU: no CUDA call
    finally:
        w.shutdown()


def test_hooks_never_raise(pool):
    """Odd engine input and calls after shutdown are answered with a miss or
    no work, never an exception into vLLM's threads."""
    sched = MooncakeGoConnector(vllm_config(pool, model="m-odd", typo_key=1), KVConnectorRole.SCHEDULER)
    req = sim.Request("odd", prompt(50, 40), 1, BS)
    req.block_hashes = [2**200, -(2**100), b"x", 7]  # ints of any size, bytes, small ints
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
    req.kv_transfer_params = {"do_remote_prefill": b"\x00"}  # not JSON-encodable
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
    req.kv_transfer_params = None
    req.all_token_ids = None  # num_tokens unusable
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
    sched.shutdown()
    sched.shutdown()  # twice is fine
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
    assert sched.request_finished(req, [1]) == (False, None)
    meta = sched.build_connector_meta(types.SimpleNamespace())
    assert meta.data == b""
    w = MooncakeGoConnector(vllm_config(pool, model="m-odd"), KVConnectorRole.WORKER, types.SimpleNamespace(num_blocks=8))
    w.shutdown()
    assert w.get_finished(set()) == (None, None)
    assert w.get_block_ids_with_load_errors() == set()
    w.start_load_kv(None)
    w.wait_for_save()
