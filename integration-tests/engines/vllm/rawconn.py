"""A benchmark-only vLLM KV connector: the raw store client doing what our
connector does, where and how it does it, so that the connector's figures
can be compared with the raw client's under the same engine, at the same
moments, with the same concurrency.

Saves: the step that prefills a request of at least `min_tokens` tokens
writes its first blocks (at most `objects`, each `object_bytes`) as
objects with one batch call (see `target`). With
`save_async` (our connector's default, mc_save_async) the put runs on a
thread started in wait_for_save, vLLM holds the request's blocks
(request_finished answers True) and the worker reports the request in
finished-sending once the put is done, as ours does; otherwise the put
runs inside wait_for_save. The objects stay in the pool for the loads.

Loads: a request whose kv_transfer_params are {"raw_load": i} is offered
what our connector offers on a full hit (every full block; with sync
loads every full block but the one holding the last token), less its
local prefix hit, and the worker reads that many of save i's objects
(those after the hit) with one batch call. With `load_async` (vLLM's
async path, our default) the read runs on a thread started in
start_load_kv, the request waits in WAITING_FOR_REMOTE_KVS until the
worker reports it in finished-receiving, and vLLM holds its blocks if
it finishes meanwhile; otherwise the read runs in start_load_kv before
the forward. A step with nothing to compute waits up to `idle_wait_ms`
for a transfer to end, as ours (mc_idle_wait_ms). The first token of
such a request is not checked (it loads another prompt's blocks).

`target`: "kv" (bench.py's default) reads and writes vLLM's KV cache
itself: each object is one block, its parts the block's bytes in every
layer's tensor (batch_put_from_parts / batch_get_into_parts over the
registered tensors, the regions our connector derives:
mooncake_go.vllm.connector.regions_of), the request's own blocks; so the
memory, the pieces and the block ids are ours, only the connector
machinery is missing. "scratch" moves each object as one contiguous
part of a registered buffer of its own. Each figure times the batch call of the
store's C ABI alone (its argument arrays are built before the clock
starts, as the connector's figures are timed inside Go).

    kv_connector="RawConnector", kv_connector_module_path="rawconn",
    kv_connector_extra_config={"master_server_address", "metadata_server",
        "objects", "object_bytes", "min_tokens", "tag", "save_async",
        "load_async", "idle_wait_ms", "target", "keep"}

`keep`: the saves' objects stay in the pool at shutdown (bench.py
--paired loads them again in another instance); by default they are
removed.

Keys: bench-rawconn/<tag>/<save index>/<object index>. The figures (GB/s
of each timed put and get: bytes / wall time of the call) are read with
driver.py's connector_figures op as {"put": [...], "get": [...]}. Set-up
(store client, buffers, a warm-up write and read that map the node's
segment) happens in register_kv_caches, before any step is timed.
`RawPutConnector` is the former name.
"""

import ctypes
import mmap
import threading
import time
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)


@dataclass
class RawMeta(KVConnectorMetadata):
    tokens: int = 0
    saves: list = field(default_factory=list)  # [(req_id, save index, first object, block ids)]
    loads: list = field(default_factory=list)  # [(req_id, save index, first object, block ids)]


def _flag(v):
    return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")


class RawConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ex = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
        self._master = ex["master_server_address"]
        self._metadata = ex["metadata_server"]
        self._n = int(ex.get("objects", 128))
        self._size = int(ex.get("object_bytes", 2 << 20))
        self._min_tokens = int(ex.get("min_tokens", 1024))
        self._tag = str(ex.get("tag", "raw"))
        self._save_async = _flag(ex.get("save_async", False))
        self._load_async = _flag(ex.get("load_async", False))
        self._idle_wait = float(ex.get("idle_wait_ms", 5)) / 1e3
        self._kv = str(ex.get("target", "scratch")) == "kv"
        self._keep = _flag(ex.get("keep", False))
        self._block = int(vllm_config.cache_config.block_size)
        # Scheduler side.
        self._claimed = set()  # request ids offered a load (once each)
        self._new_loads = []  # planned since the last metadata
        self._saving = set()  # request ids whose blocks wait for an async put
        self._loading = set()  # request ids with an async get in flight (blocks held if they finish)
        self._first = {}  # request id -> first object to load (its local prefix hit in blocks)
        self._nsaves = 0
        # Worker side.
        self._st = None
        self._cv = threading.Condition()
        self._inflight = 0
        self._news = 0  # transfers ended since the last get_finished
        self._put_done, self._get_done, self._finished = set(), set(), set()
        self._errors = []
        self._put_rids = set()  # request ids with an async put (their finished ids are kept)
        self._saves = 0  # save indexes seen (their objects are removed at shutdown)
        self.figures = {"put": [], "get": []}

    def _keys(self, idx, first, n):
        return [f"bench-rawconn/{self._tag}/{idx}/{j}" for j in range(first, first + n)]

    # ---- scheduler side ----

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        p = getattr(request, "kv_transfer_params", None) or {}
        if "raw_load" not in p or request.request_id in self._claimed:
            return 0, False
        tokens = int(request.num_tokens)
        blocks = min(tokens // self._block, self._n)
        if not self._load_async and blocks * self._block >= tokens:
            blocks = (tokens - 1) // self._block  # a sync load leaves the last token to compute
        n = blocks * self._block - int(num_computed_tokens)
        self._first[request.request_id] = int(num_computed_tokens) // self._block
        return max(n, 0), bool(n > 0 and self._load_async)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens > 0:
            rid = request.request_id
            self._claimed.add(rid)
            # blocks covers the local prefix hit too: the load's blocks
            # follow it, as its objects follow the hit's.
            ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
            first, n = self._first.pop(rid, 0), int(num_external_tokens) // self._block
            ids = ids[first:first + n]
            self._new_loads.append((rid, int(request.kv_transfer_params["raw_load"]), first, ids if self._kv else list(range(len(ids)))))
            if self._load_async:
                self._loading.add(rid)

    def build_connector_meta(self, scheduler_output):
        saves = []
        for nr in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            if nr.req_id in self._claimed:
                continue
            if int(scheduler_output.num_scheduled_tokens.get(nr.req_id, 0)) >= self._min_tokens:
                ids = (list(nr.block_ids[0]) if nr.block_ids else [])[:self._n]
                saves.append((nr.req_id, self._nsaves, 0, ids if self._kv else list(range(len(ids)))))
                self._nsaves += 1
                if self._save_async:
                    self._saving.add(nr.req_id)
        loads, self._new_loads = self._new_loads, []
        return RawMeta(tokens=int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0), saves=saves, loads=loads)

    def update_connector_output(self, connector_output):
        for rid in getattr(connector_output, "finished_recving", None) or ():
            self._loading.discard(rid)

    def request_finished(self, request, block_ids):
        rid = request.request_id
        self._claimed.discard(rid)
        self._first.pop(rid, None)
        if rid in self._saving or rid in self._loading:
            # Held until finished-sending (an async put) or
            # finished-receiving (an async get still writing its blocks).
            self._saving.discard(rid)
            return True, None
        return False, None

    # ---- worker side ----

    def register_kv_caches(self, kv_caches):
        from mooncake_go.store import Store

        total = self._n * self._size
        self._buf = mmap.mmap(-1, total)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._buf))
        ctypes.memset(base, 1, total)  # fault the buffer in
        # (base, bytes per block) per part of an object: scratch objects are
        # one part each in the buffer (block i at base + i * size); kv
        # objects one part per layer tensor (the regions ours derives).
        scratch = regions = [(base, self._size)]
        spans = [(base, total)]
        if self._kv:
            from mooncake_go.vllm.connector import regions_of

            kv = regions_of(kv_caches)
            regions = [(r[0], r[1]) for r in kv]
            spans += sorted({(r[0], r[1] * r[2]) for r in kv})
            assert sum(bb for _, bb in regions) == self._size, \
                f"rawconn: a block is {sum(bb for _, bb in regions)} bytes in the KV cache, object_bytes says {self._size}"
        st = Store()
        rc = st.setup("127.0.0.1", self._metadata, 0, 16 << 20, "tcp", "", self._master)
        if rc not in (None, 0):  # mooncake_go.store raises; a code is upstream's convention
            raise RuntimeError(f"rawconn: store setup failed: {rc}")
        for b, size in spans:
            st.register_buffer(b, size)
        self._spans, self._st = spans, st
        # Warm-up (not recorded), through the scratch buffer: maps the
        # node's segment into this process.
        self._regions = scratch
        self._put("warmup", 0, list(range(self._n)))
        self._get("warmup", 0, list(range(self._n)))
        self._regions = regions
        self._remove("warmup", self._n)

    def _timed(self, put, keys, blocks):
        """One batch call of the store's C ABI (the parts calls: an object
        is its blocks' parts, see _regions), timed alone: the argument
        arrays are built before the clock starts (the connector's figures
        are timed inside Go, its Python and ABI side excluded), through
        mooncake_go.store's own helpers. Returns (per-key results, s)."""
        st, n = self._st, len(keys)
        lib, h = st._handle12()
        ptrs = [[base + b * bb for base, bb in self._regions] for b in blocks]
        sizes = [[bb for _, bb in self._regions]] * n
        _, k, kl, p, sz, c = st._parts_arrays(keys, ptrs, sizes)
        if put:
            out, name = (ctypes.c_int32 * n)(), "mc_store_batch_put_from_parts"
            call = lambda: lib.mc_store_batch_put_from_parts(h, k, kl, p, sz, c, n, None, out)  # noqa: E731
        else:
            out, name = (ctypes.c_int64 * n)(), "mc_store_batch_get_into_parts"
            call = lambda: lib.mc_store_batch_get_into_parts(h, k, kl, p, sz, c, n, out)  # noqa: E731
        t = time.perf_counter()
        rc = call()
        dt = time.perf_counter() - t
        st._check(lib, rc, name)
        return list(out[:n]), dt

    def _put(self, idx, first, blocks):
        n = len(blocks)
        res, dt = self._timed(True, self._keys(idx, first, n), blocks)
        if any(x != 0 for x in res):
            raise RuntimeError(f"rawconn: batch_put_from of save {idx} failed: {res[:4]}")
        return n * self._size / dt / 1e9

    def _get(self, idx, first, blocks):
        n = len(blocks)
        res, dt = self._timed(False, self._keys(idx, first, n), blocks)
        if any(x != self._size for x in res):
            raise RuntimeError(f"rawconn: batch_get_into of save {idx} failed: {res[:4]}")
        return n * self._size / dt / 1e9

    def _background(self, what, fn, rid):
        """Runs fn on a thread of its own; when it ends (done or failed) rid
        goes into the put or get completion set, read under the lock when
        it ends (get_finished replaces the get set)."""
        def run():
            try:
                g = fn()
                with self._cv:
                    self.figures[what].append(g)
            except Exception as e:  # recorded; the request is still reported, as a failed transfer would be
                with self._cv:
                    self._errors.append(f"{what} {rid}: {e}")
            finally:
                with self._cv:
                    self._inflight -= 1
                    (self._put_done if what == "put" else self._get_done).add(rid)
                    self._news += 1
                    self._cv.notify_all()

        with self._cv:
            self._inflight += 1
        threading.Thread(target=run, name=f"rawconn-{what}", daemon=True).start()

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        if self._st is None or not isinstance(meta, RawMeta):
            return
        for rid, idx, first, blocks in meta.loads:
            if self._load_async:
                self._background("get", lambda idx=idx, first=first, blocks=blocks: self._get(idx, first, blocks), rid)
            else:
                self.figures["get"].append(self._get(idx, first, blocks))

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        if self._st is None or not isinstance(meta, RawMeta):
            return
        for rid, idx, first, blocks in meta.saves:
            self._saves = max(self._saves, idx + 1)
            if self._save_async:
                self._put_rids.add(rid)
                self._background("put", lambda idx=idx, first=first, blocks=blocks: self._put(idx, first, blocks), rid)
            else:
                self.figures["put"].append(self._put(idx, first, blocks))

    def get_finished(self, finished_req_ids):
        meta = self._get_connector_metadata()
        with self._cv:
            self._finished.update(r for r in (finished_req_ids or ()) if r in self._put_rids)
            if isinstance(meta, RawMeta) and meta.tokens == 0 and self._inflight and not self._news:
                self._cv.wait(self._idle_wait)  # our connector's mc_idle_wait_ms
            self._news = 0
            if self._errors:
                raise RuntimeError("rawconn: " + "; ".join(self._errors))
            sending = self._put_done & self._finished
            self._put_done -= sending
            self._finished -= sending
            self._put_rids -= sending
            recving, self._get_done = self._get_done, set()
        return (sending or None), (recving or None)

    def _remove(self, idx, n):
        """Removes save idx's objects, ignoring those already gone (a
        failed put) and any failure (the pool is the benchmark's own)."""
        for k in self._keys(idx, 0, n):
            try:
                self._st.remove(k, force=True)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass

    def shutdown(self):
        if self._st is None:
            return
        with self._cv:  # puts still in flight finish first (bounded)
            deadline = time.monotonic() + 60
            while self._inflight and time.monotonic() < deadline:
                self._cv.wait(1)
        for idx in range(0 if self._keep else self._saves):
            self._remove(idx, self._n)
        for base, _ in self._spans:
            try:
                self._st.unregister_buffer(base)
            except Exception:  # noqa: BLE001
                pass
        self._st.close()
        self._st = None


RawPutConnector = RawConnector  # the former name

__all__ = ["RawConnector", "RawPutConnector", "KVConnectorRole"]

