"""The LMCache RemoteConnector of mooncake-go (LMCache 0.5.6's
lmcache/v1/storage_backend/connector/base_connector.py contract) and its
ConnectorAdapter, over mc_lmcache_* of libmooncake.so (_abi.py).

Values are each chunk's raw KV bytes, exactly as long as the memory object
(a partial last chunk is shorter): the reader allocates a full chunk from
LMCache's local CPU backend, the pool writes the value straight into it
(LMCache's pinned CPU buffer is registered with our store client once, so
no byte is copied on this side) and reshape_partial_chunk trims it to the
bytes read. Every call into the library blocks, so the async methods run
it on a small thread pool, never on LMCache's event loop.

Reference counts: put / batched_put take one reference of their own for
the time the library reads the object and drop exactly that one (LMCache's
InstrumentedRemoteConnector drops the caller's after the put returns, so a
cancelled put cannot free memory the library still reads); get / batched_get
hand LMCache objects with the one reference of allocate(), and release an
object themselves only when it is not handed over (a miss, a failure, or a
cancelled call, once the library is done writing into it).
"""

import asyncio
import concurrent.futures
import logging
import os
import threading
from typing import List, Optional

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector import (
    ConnectorAdapter,
    ConnectorContext,
    SafeLocalCPUBackend,
    extract_plugin_type,
)
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from . import _abi

logger = logging.getLogger("mooncake_go.lmcache")

# The plugin type the adapter claims: remote_storage_plugins entries
# "mooncake_go" and "mooncake_go.<instance>" (LMCache builds the URL
# plugin://<entry>).
PLUGIN_TYPE = "mooncake_go"
MODULE_PATHS = ("mooncake_go.lmcache", "mooncake_go.lmcache.connector")
# Threads that run the blocking library calls of one connector.
WORKERS = int(os.environ.get("MC_LMCACHE_WORKERS", "8"))


def _scope(plugin):
    return f"remote_storage_plugin.{plugin}."


def _plugin_of_class(config, cls):
    """The remote_storage_plugins entry whose class_name names cls directly
    (LMCache's DynamicConnectorAdapter does not tell the connector its
    name). ValueError when none or several do."""
    extra = config.extra_config or {}
    names = []
    for name in config.remote_storage_plugins or []:
        s = _scope(name)
        if extra.get(s + "class_name") == cls.__name__ and extra.get(s + "module_path") in MODULE_PATHS:
            names.append(name)
    if len(names) == 1:
        return names[0]
    if not names:
        raise ValueError(
            f"mooncake_go: no remote_storage_plugins entry has class_name {cls.__name__} and module_path "
            f"mooncake_go.lmcache: cannot tell which remote_storage_plugin.<name>.* keys are this connector's")
    raise ValueError(
        f"mooncake_go: several remote_storage_plugins entries ({', '.join(sorted(names))}) name {cls.__name__} "
        f"directly, and LMCache does not tell a connector built that way its name: set their class_name to "
        f"MooncakeGoConnectorAdapter (which gets the name)")


_DTYPES = {
    "half": torch.float16, "float16": torch.float16, "bfloat16": torch.bfloat16, "float": torch.float32,
    "float32": torch.float32, "float64": torch.float64, "uint8": torch.uint8, "int8": torch.int8,
    "fp8_e4m3fn": torch.float8_e4m3fn, "float8_e4m3fn": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2,
}


def _metadata_from_config(config, scope):
    """LMCacheMetadata from the scope's geometry keys (kv_shape, kv_dtype,
    use_mla, chunk_size), or None when kv_shape is absent. ValueError
    naming the key for a bad value."""
    extra = config.extra_config or {}
    shape = extra.get(scope + "kv_shape")
    if shape is None:
        return None
    if not (isinstance(shape, (list, tuple)) and len(shape) == 5 and all(isinstance(v, int) and v > 0 for v in shape)):
        raise ValueError(f"mooncake_go: {scope}kv_shape = {shape!r}: want [num_layers, 2, chunk_size, num_kv_heads, head_size] "
                         f"(positive integers; 1 instead of 2 for MLA)")
    dt = extra.get(scope + "kv_dtype")
    if dt is None:
        raise ValueError(f"mooncake_go: {scope}kv_shape is set but {scope}kv_dtype is missing (e.g. \"bfloat16\")")
    dtype = _DTYPES.get(str(dt).removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"mooncake_go: {scope}kv_dtype = {dt!r}: want one of {', '.join(sorted(_DTYPES))}")
    chunk = extra.get(scope + "chunk_size", config.chunk_size)
    if not isinstance(chunk, int) or chunk <= 0:
        raise ValueError(f"mooncake_go: {scope}chunk_size = {chunk!r}: want a positive integer")
    return LMCacheMetadata(
        model_name="", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0, kv_dtype=dtype,
        kv_shape=tuple(shape), use_mla=bool(extra.get(scope + "use_mla", False)), chunk_size=chunk,
    )


class _Once:
    """Releases a memory object at most once."""

    def __init__(self, obj):
        self.obj, self._lock = obj, threading.Lock()

    def release(self):
        with self._lock:
            obj, self.obj = self.obj, None
        if obj is not None:
            obj.ref_count_down()


class MooncakeGoConnector(RemoteConnector):
    """LMCache RemoteConnector on a mooncake-go pool.

    Built by MooncakeGoConnectorAdapter (metadata and plugin name given), or
    by LMCache itself when class_name names this class (loop,
    local_cpu_backend and config only): the chunk geometry then comes from
    local_cpu_backend.metadata, else from remote_storage_plugin.<name>.kv_shape
    / .kv_dtype; a worker with neither fails with one error saying so. A
    scheduler (LMCache's stub local CPU backend) needs no geometry: it only
    looks keys up.
    """

    def __init__(self, loop, local_cpu_backend, config, metadata: Optional[LMCacheMetadata] = None,
                 plugin_name: Optional[str] = None):
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self._plugin = plugin_name or _plugin_of_class(config, type(self))
        scope = _scope(self._plugin)
        self._worker = local_cpu_backend is not None and not isinstance(local_cpu_backend, SafeLocalCPUBackend)
        md = metadata or getattr(local_cpu_backend, "metadata", None) or _metadata_from_config(config, scope)
        self._geometry = md is not None
        if md is not None:
            super().__init__(config, md)
        elif self._worker:
            raise ValueError(
                f"mooncake_go: no chunk geometry for plugin {self._plugin}: LMCache built {type(self).__name__} without "
                f"metadata (class_name names the connector class) and its local_cpu_backend has none; set "
                f"{scope}class_name to MooncakeGoConnectorAdapter, or give {scope}kv_shape "
                f"([num_layers, 2, chunk_size, num_kv_heads, head_size]) and {scope}kv_dtype")
        # Raw bytes of exact length, whatever LMCache's save_chunk_meta says.
        self.save_chunk_meta = False
        if (config.remote_serde or "naive") != "naive":
            raise ValueError(f"mooncake_go: unsupported: remote_serde {config.remote_serde!r} (the plugin stores raw "
                             f"chunk bytes; use remote_serde: naive)")
        if config.use_layerwise:
            raise ValueError("mooncake_go: unsupported: use_layerwise (the plugin stores whole chunks)")
        self._conn = _abi.Connector(f"plugin://{self._plugin}", {
            "role": "worker" if self._worker else "scheduler",
            "extra_config": dict(config.extra_config or {}),
        })
        for note in self._conn.notes():
            logger.warning("mooncake_go %s: %s", self._plugin, note)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mooncake-go-lmcache")
        self._registered = None
        if self._worker:
            self._register_cpu_buffer()
        logger.info("mooncake_go %s: connector ready (%s, registered buffer %s)", self._plugin,
                    "worker" if self._worker else "scheduler", self._registered)

    def _register_cpu_buffer(self):
        """Registers LMCache's pinned CPU buffer once, for zero copy; without
        one, each call registers its objects for the call (slower)."""
        alloc = getattr(self.local_cpu_backend, "memory_allocator", None)
        buf = getattr(getattr(alloc, "pin_allocator", None), "buffer", None)
        if buf is None:
            logger.warning("mooncake_go %s: LMCache's allocator %s has no pinned buffer to register; "
                           "each put/get registers its objects for the call", self._plugin, type(alloc).__name__)
            return
        ptr, size = buf.data_ptr(), buf.numel() * buf.element_size()
        self._conn.register_buffer(ptr, size)
        self._registered = (ptr, size)

    def __repr__(self):
        return f"<MooncakeGoConnector {self._plugin}>"

    # --- helpers ---------------------------------------------------------

    async def _run(self, fn, *args, abandon=None):
        """fn(*args) on the thread pool. If the awaiting task is cancelled
        while fn runs, abandon() runs once fn is done (it owns what fn
        still writes into), then the cancellation goes on."""
        cf = self._pool.submit(fn, *args)
        try:
            return await asyncio.wrap_future(cf)
        except asyncio.CancelledError:
            if abandon is not None:
                cf.add_done_callback(lambda _f: abandon())
            raise

    def _allocate(self):
        if not (self._worker and self._geometry):
            return None
        return self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)

    def _get_many(self, keys):
        """Blocking: one full-chunk object per key (None where allocation
        failed), filled by one library call; returns the aligned results
        (None at a miss) and releases what it does not hand over."""
        objs = [self._allocate() for _ in keys]
        idx = [i for i, o in enumerate(objs) if o is not None]
        out = [None] * len(keys)
        if not idx:
            return out
        try:
            got = self._conn.batched_get([keys[i].to_string() for i in idx], [objs[i].data_ptr for i in idx],
                                         [objs[i].get_size() for i in idx])
        except Exception:
            for i in idx:
                objs[i].ref_count_down()
            raise
        for i, n in zip(idx, got):
            obj = objs[i]
            if n <= 0:
                if n != -704:  # OBJECT_NOT_FOUND is a plain miss
                    logger.warning("mooncake_go %s: get %s failed (code %d)", self._plugin, keys[i].to_string(), n)
                obj.ref_count_down()
                continue
            try:
                out[i] = self.reshape_partial_chunk(obj, n)
            except Exception as e:  # a length that is no whole number of tokens: corrupt
                logger.error("mooncake_go %s: get %s: %s", self._plugin, keys[i].to_string(), e)
                obj.ref_count_down()
        return out

    async def _get_batch(self, keys):
        box = {}

        def work():
            box["out"] = self._get_many(keys)
            return box["out"]

        def abandon():  # the caller went away: nobody takes these objects
            for o in box.get("out") or []:
                if o is not None:
                    o.ref_count_down()

        return await self._run(work, abandon=abandon)

    def _put_many(self, keys, objs):
        """Blocking: stores the objects (the caller holds them)."""
        codes = self._conn.batched_put([k.to_string() for k in keys], [o.data_ptr for o in objs],
                                       [o.get_size() for o in objs])
        bad = [(k.to_string(), c) for k, c in zip(keys, codes) if c != 0]
        if bad:
            raise RuntimeError(f"mooncake_go {self._plugin}: {len(bad)} of {len(keys)} puts failed; "
                               f"first {bad[0][0]} (code {bad[0][1]})")

    async def _put_objs(self, keys, objs):
        """Stores the objects, holding one reference of its own on each until
        the library has read it (also when the awaiting task is cancelled:
        LMCache then drops its reference at once)."""
        held = [_Once(o) for o in objs]
        for o in objs:
            o.ref_count_up()

        def release(_f):
            for h in held:
                h.release()

        cf = self._pool.submit(self._put_many, keys, objs)
        cf.add_done_callback(release)  # after the call, or at once if it never starts
        await asyncio.wrap_future(cf)

    # --- RemoteConnector ------------------------------------------------

    async def exists(self, key: CacheEngineKey) -> bool:
        try:
            return await self._run(self._conn.exists, key.to_string())
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an error is a miss, never a hit
            logger.warning("mooncake_go %s: exists: %s", self._plugin, e)
            return False

    def exists_sync(self, key: CacheEngineKey) -> bool:
        try:
            return self._conn.exists(key.to_string())
        except Exception as e:
            logger.warning("mooncake_go %s: exists_sync: %s", self._plugin, e)
            return False

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        try:
            return (await self._get_batch([key]))[0]
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("mooncake_go %s: get: %s", self._plugin, e)
            return None

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        if not keys:
            return []
        try:
            return await self._get_batch(list(keys))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("mooncake_go %s: batched_get: %s", self._plugin, e)
            return [None] * len(keys)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj):
        await self._put_objs([key], [memory_obj])

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: List[CacheEngineKey], memory_objs: List[MemoryObj]):
        if keys:
            await self._put_objs(list(keys), list(memory_objs))

    async def list(self) -> List[str]:
        return await self._run(self._conn.list)

    async def close(self):
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def _close(self):
        self._pool.shutdown(wait=True)  # no library call in flight after this
        self._conn.close()

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            return await self._run(self._conn.ping)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("mooncake_go %s: ping: %s", self._plugin, e)
            return -1

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        try:
            return await self._run(self._conn.batched_contains, [k.to_string() for k in keys], pin)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.warning("mooncake_go %s: batched_async_contains: %s", self._plugin, e)
            return 0

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        try:
            return self._conn.batched_contains([k.to_string() for k in keys])
        except Exception as e:
            logger.warning("mooncake_go %s: batched_contains: %s", self._plugin, e)
            return 0

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey]) -> List[MemoryObj]:
        """The leading run of objects read; the ones after the first miss
        are released, not returned."""
        got = await self.batched_get(keys)
        out = []
        for i, obj in enumerate(got):
            if obj is None:
                for later in got[i + 1:]:
                    if later is not None:
                        later.ref_count_down()
                break
            out.append(obj)
        return out

    def remove_sync(self, key: CacheEngineKey) -> bool:
        try:
            self._conn.remove(key.to_string())
            return True
        except Exception as e:
            logger.warning("mooncake_go %s: remove: %s", self._plugin, e)
            return False


class MooncakeGoConnectorAdapter(ConnectorAdapter):
    """ConnectorAdapter for remote_storage_plugins entries of type
    mooncake_go ("mooncake_go", "mooncake_go.<instance>"): LMCache hands it
    the metadata and the entry's name."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN_TYPE}")

    def can_parse(self, url: str) -> bool:
        name = url[len("plugin://"):] if url.startswith("plugin://") else None
        return name is not None and extract_plugin_type(name) == PLUGIN_TYPE

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        return MooncakeGoConnector(
            loop=context.loop, local_cpu_backend=context.local_cpu_backend, config=context.config,
            metadata=context.metadata, plugin_name=context.plugin_name or context.url[len("plugin://"):],
        )


__all__ = ["MooncakeGoConnector", "MooncakeGoConnectorAdapter", "PLUGIN_TYPE"]
