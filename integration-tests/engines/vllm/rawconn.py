"""A benchmark-only vLLM KV connector: the raw store client at the moment
our connector saves. Its wait_for_save (called as the forward context
exits, where MooncakeGoConnector starts a step's saves) writes `objects`
values of `object_bytes` each with one batch_put_from from a registered,
faulted-in buffer, whenever the step scheduled at least `min_tokens`
tokens (a long prefill), and records the GB/s; the objects are removed
again after the timing. Nothing is looked up or loaded (every lookup is a
miss). bench.py --raw-at-save runs it in an instance of its own:

    kv_connector="RawPutConnector", kv_connector_module_path="rawconn",
    kv_connector_extra_config={"master_server_address", "metadata_server",
                               "objects", "object_bytes", "min_tokens"}

The figures are read with driver.py's connector_figures op. Setting up
(store client, buffer, one warm-up write that maps the node's segment)
happens in register_kv_caches, before any step is timed.
"""

import ctypes
import mmap
import os
import time
from dataclasses import dataclass

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)


@dataclass
class RawMeta(KVConnectorMetadata):
    tokens: int = 0


class RawPutConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ex = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
        self._master = ex["master_server_address"]
        self._metadata = ex["metadata_server"]
        self._n = int(ex.get("objects", 128))
        self._size = int(ex.get("object_bytes", 2 << 20))
        self._min_tokens = int(ex.get("min_tokens", 1024))
        self._st = None
        self._seq = 0
        self.figures = []  # GB/s of each timed batch_put_from

    # Scheduler side: no external hits, one number per step.
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    def build_connector_meta(self, scheduler_output):
        return RawMeta(tokens=int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0))

    # Worker side.
    def register_kv_caches(self, kv_caches):
        from mooncake_go.store import Store

        total = self._n * self._size
        self._buf = mmap.mmap(-1, total)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._buf))
        ctypes.memset(self._base, 1, total)  # fault the buffer in
        st = Store()
        rc = st.setup("127.0.0.1", self._metadata, 0, 16 << 20, "tcp", "", self._master)
        if rc not in (None, 0):  # mooncake_go.store raises; a code is upstream's convention
            raise RuntimeError(f"rawconn: store setup failed: {rc}")
        st.register_buffer(self._base, total)
        self._st = st
        self._put()  # warm-up: maps the node's segment into this process

    def _put(self):
        self._seq += 1
        keys = [f"bench-rawconn/{os.getpid()}/{self._seq}/{i}" for i in range(self._n)]
        ptrs = [self._base + i * self._size for i in range(self._n)]
        t = time.perf_counter()
        res = self._st.batch_put_from(keys, ptrs, [self._size] * self._n)
        dt = time.perf_counter() - t
        for k in keys:
            self._st.remove(k, force=True)
        if any(x != 0 for x in res):
            raise RuntimeError(f"rawconn: batch_put_from failed: {res[:4]}")
        return self._n * self._size / dt / 1e9

    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        if self._st is not None and isinstance(meta, RawMeta) and meta.tokens >= self._min_tokens:
            self.figures.append(self._put())

    def shutdown(self):
        if self._st is not None:
            self._st.unregister_buffer(self._base)
            self._st.close()
            self._st = None


__all__ = ["RawPutConnector", "KVConnectorRole"]
