"""MooncakeGoHiCacheStorage: SGLang's HiCache L3 storage backend on the
mooncake-go pool (SGLang 0.5.23's "dynamic" backend, interface_v1).

SGLang builds it with StorageBackendFactory.create_backend("dynamic", ...)
as cls(storage_config, kwargs), then calls register_mem_pool_host(pool)
with its host KV pool (MHATokenToKVPoolHost or MLATokenToKVPoolHost), then
runs its prefetch and backup threads, which call batch_exists,
batch_get_v1 and batch_set_v1 (with interface_v1; the plain get/set/
batch_get/batch_set without it). Those threads die on an exception and
silently turn L3 off for the life of the process, so every data-path
method here catches everything and answers a miss (0, False, None),
counting the failure and logging it (at most once per LOG_EVERY seconds).
The constructor and register_mem_pool_host do raise: SGLang's attach then
fails with the reason, at start-up.

The work is done by libmooncake.so (mc_sglang_*, package sglang): keys,
zero-copy transfers against the registered host pool, time bounds.
"""

import logging
import threading
import time

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from . import _abi

logger = logging.getLogger(__name__)

# Seconds between two failure logs of one backend.
LOG_EVERY = 10.0
# The host pool layouts served (kvpool.SGLangLayout).
LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def _settings(storage_config, extra):
    c = storage_config
    return {
        "tp_rank": int(c.tp_rank), "tp_size": int(c.tp_size),
        "pp_rank": int(getattr(c, "pp_rank", 0) or 0), "pp_size": int(getattr(c, "pp_size", 1) or 1),
        "attn_cp_rank": int(getattr(c, "attn_cp_rank", 0) or 0), "attn_cp_size": int(getattr(c, "attn_cp_size", 1) or 1),
        "dcp_size": int(getattr(c, "dcp_size", 1) or 1),
        "is_mla_model": bool(c.is_mla_model), "should_split_heads": bool(getattr(c, "should_split_heads", False)),
        "model_name": c.model_name or "",
        "host": str(extra.get("mc_host") or "127.0.0.1"),
        "extra_config": extra,
    }


class MooncakeGoHiCacheStorage(HiCacheStorage):
    """SGLang HiCache storage backend over libmooncake.so. Switch it on with

        --hicache-storage-backend dynamic
        --hicache-storage-backend-extra-config '{"backend_name": "mooncake_go",
            "module_path": "mooncake_go.sglang", "class_name": "MooncakeGoHiCacheStorage",
            "interface_v1": 1, "master_server_address": "10.0.0.1:50051", ...}'

    (sglang/README.md lists every key)."""

    def __init__(self, storage_config: HiCacheStorageConfig = None, kwargs=None):
        if storage_config is None:
            raise ValueError("mooncake_go: MooncakeGoHiCacheStorage needs SGLang's HiCacheStorageConfig")
        extra = dict(storage_config.extra_config or {})
        self.storage_config = storage_config
        self.is_mla = bool(storage_config.is_mla_model)
        self.enable_storage_metrics = bool(getattr(storage_config, "enable_storage_metrics", False))
        self.mem_pool_host = None
        self._lock = threading.Lock()  # guards the counters and the log clock
        self._errors = 0
        self._last_log = 0.0
        self._backend = _abi.Backend(_settings(storage_config, extra))
        for note in self._backend.take_notes():
            logger.warning("mooncake_go: %s", note)
        logger.info(
            "mooncake_go HiCache backend: tp %d/%d pp %d/%d, %s", storage_config.tp_rank, storage_config.tp_size,
            getattr(storage_config, "pp_rank", 0), getattr(storage_config, "pp_size", 1), "MLA" if self.is_mla else "MHA",
        )

    # -- set-up (may raise: SGLang's attach fails with the reason) -------

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        kv = getattr(mem_pool_host, "kv_buffer", None)
        layout = getattr(mem_pool_host, "layout", None)
        if kv is None or not isinstance(kv, torch.Tensor):
            raise NotImplementedError(
                f"unsupported: mooncake_go serves host pools with one kv_buffer tensor; {type(mem_pool_host).__name__} has none "
                "(hybrid or split-buffer pools)"
            )
        if layout not in LAYOUTS:
            raise NotImplementedError(f"unsupported: mooncake_go serves the host pool layouts {', '.join(LAYOUTS)}, not {layout!r}")
        if kv.device.type != "cpu" or not kv.is_contiguous():
            raise ValueError(f"mooncake_go: the host pool's kv_buffer must be a contiguous CPU tensor (got {kv.device}, contiguous={kv.is_contiguous()})")
        page_size = int(mem_pool_host.page_size)
        geometry = {
            "layout": layout,
            "dtype": str(mem_pool_host.dtype).replace("torch.", ""),
            "page_size": page_size,
            "layer_num": int(mem_pool_host.layer_num),
            "page_bytes": int(mem_pool_host.get_size_per_token()) * page_size,
        }
        self._backend.register_host_pool(geometry, kv.data_ptr(), kv.numel() * kv.element_size())
        self._page_bytes = geometry["page_bytes"]
        logger.info("mooncake_go: registered the %d-byte host pool (%s)", kv.numel() * kv.element_size(), geometry)

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        name = getattr(host_pool_name, "value", host_pool_name)
        if name == "kv":
            return  # the anchor pool, registered by register_mem_pool_host
        raise NotImplementedError(
            f"unsupported: mooncake_go has no hybrid-pool (v2) support yet: pool {name!r} "
            "(Mamba, SWA, DSA indexer, DeepSeek-V4 and draft pools)"
        )

    # -- failure handling --------------------------------------------------

    def _failed(self, what, err=None):
        """Counts a failed call and logs it (rate-limited); never raises."""
        try:
            with self._lock:
                self._errors += 1
                now = time.monotonic()
                if now - self._last_log < LOG_EVERY:
                    return
                self._last_log = now
                errors = self._errors
            notes = []
            try:
                notes = self._backend.take_notes()
            except Exception:  # noqa: BLE001 - logging must not raise either
                pass
            logger.warning("mooncake_go: %s failed (%d failures so far): %s %s", what, errors, err or "", "; ".join(notes))
        except Exception:  # noqa: BLE001
            pass

    def _checked(self, what, results):
        if results and not all(results):
            self._failed(what)
        return results

    # -- zero-copy data path (interface_v1) --------------------------------

    def batch_exists(self, keys, extra_info=None) -> int:
        try:
            return self._backend.batch_exists(list(keys))
        except Exception as e:  # noqa: BLE001 - SGLang's prefetch thread must not see it
            self._failed("batch_exists", e)
            return 0

    def exists(self, key) -> bool:
        return self.batch_exists([key]) == 1

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        n = len(keys)
        if n == 0:
            return []
        try:
            ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
            return self._backend.batch_get(list(keys), ptrs, sizes)
        except Exception as e:  # noqa: BLE001
            self._failed("batch_get_v1", e)
            return [False] * n

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        n = len(keys)
        if n == 0:
            return []
        try:
            ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
            return self._checked("batch_set_v1", self._backend.batch_set(list(keys), ptrs, sizes))
        except Exception as e:  # noqa: BLE001
            self._failed("batch_set_v1", e)
            return [False] * n

    # -- plain path (without interface_v1): one flat page tensor per key ---

    def _flat(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError("mooncake_go: a page must be a contiguous CPU tensor")
        return t.data_ptr(), t.numel() * t.element_size()

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        n = len(keys)
        try:
            if target_locations is None:
                target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in range(n)]
            flat = [self._flat(t) for t in target_locations]
            ok = self._backend.get_pages(list(keys), [p for p, _ in flat], [s for _, s in flat])
            return [t if good else None for t, good in zip(target_locations, ok)]
        except Exception as e:  # noqa: BLE001
            self._failed("batch_get", e)
            return [None] * n

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        if not keys:
            return True
        try:
            pages = [v.contiguous() for v in (values if values is not None else target_locations)]
            flat = [self._flat(t) for t in pages]
            ok = self._backend.set_pages(list(keys), [p for p, _ in flat], [s for _, s in flat])
            del pages  # kept alive until the call returned
            return all(self._checked("batch_set", ok))
        except Exception as e:  # noqa: BLE001
            self._failed("batch_set", e)
            return False

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], None if value is None else [value], None if target_location is None else [target_location])

    # -- admin and metrics ---------------------------------------------------

    def clear(self):
        """Removes this backend's pages (its namespace) from the pool."""
        try:
            n = self._backend.clear()
            logger.info("mooncake_go: clear removed %d objects", n)
            return True
        except Exception as e:  # noqa: BLE001
            self._failed("clear", e)
            return False

    def stats(self):
        """The Go side's counters since the previous call (pages, bytes,
        seconds, failed pages, timeouts), plus this object's failed calls."""
        s = self._backend.take_stats()
        with self._lock:
            s["shim_errors"], self._errors = self._errors, 0
        return s

    def get_stats(self):
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except Exception:  # noqa: BLE001
            return None
        try:
            s = self.stats()
            m = StorageMetrics()
            if s["prefetch_pages"]:
                m.prefetch_pgs.append(s["prefetch_pages"])
                m.prefetch_bandwidth.append(s["prefetch_bytes"] / (1 << 30) / max(s["prefetch_seconds"], 1e-9))
            if s["backup_pages"]:
                m.backup_pgs.append(s["backup_pages"])
                m.backup_bandwidth.append(s["backup_bytes"] / (1 << 30) / max(s["backup_seconds"], 1e-9))
            return m
        except Exception as e:  # noqa: BLE001
            self._failed("get_stats", e)
            return None

    def close(self):
        try:
            self._backend.close()
        except Exception as e:  # noqa: BLE001
            logger.warning("mooncake_go: close: %s", e)
