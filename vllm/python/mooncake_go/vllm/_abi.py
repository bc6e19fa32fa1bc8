"""ctypes bindings of mooncake/vllm.h (mc_vllm_*)."""

import base64
import ctypes
import json

from mooncake_go import _lib
from mooncake_go.errors import MooncakeError, error_for

ABI_MAJOR = 1
ROLE_SCHEDULER = 0
ROLE_WORKER = 1


class Region(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("block_bytes", ctypes.c_uint64),
        ("num_blocks", ctypes.c_uint64),
        ("device_id", ctypes.c_int32),
        ("layer", ctypes.c_uint32),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("saved_blocks", ctypes.c_uint64),
        ("loaded_blocks", ctypes.c_uint64),
        ("failed_blocks", ctypes.c_uint64),
        ("saved_bytes", ctypes.c_uint64),
        ("loaded_bytes", ctypes.c_uint64),
    ]


class Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_H = ctypes.c_void_p
_S = ctypes.c_char_p
_PROTOS = {
    "mc_vllm_create": (ctypes.c_int, [_S, ctypes.c_int, ctypes.POINTER(_H)]),
    "mc_vllm_destroy": (ctypes.c_int, [_H]),
    "mc_vllm_lookup": (ctypes.c_int, [_H, _S, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32)]),
    "mc_vllm_update_after_alloc": (ctypes.c_int, [_H, _S]),
    "mc_vllm_plan_save": (ctypes.c_int, [_H, _S, ctypes.POINTER(ctypes.c_int64)]),
    "mc_vllm_preempted": (ctypes.c_int, [_H, _S]),
    "mc_vllm_request_finished": (ctypes.c_int, [_H, _S, ctypes.POINTER(Buf)]),
    "mc_vllm_build_meta": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_vllm_reset": (ctypes.c_int, [_H, ctypes.POINTER(ctypes.c_int64)]),
    "mc_vllm_register_kv_caches": (ctypes.c_int, [_H, ctypes.POINTER(Region), ctypes.c_size_t]),
    "mc_vllm_start_load": (ctypes.c_int, [_H, ctypes.c_char_p, ctypes.c_size_t]),
    "mc_vllm_handle_preemptions": (ctypes.c_int, [_H, _S]),
    "mc_vllm_save_layer": (ctypes.c_int, [_H, ctypes.c_int32]),
    "mc_vllm_wait_layer_load": (ctypes.c_int, [_H, ctypes.c_int32]),
    "mc_vllm_wait_for_save": (ctypes.c_int, [_H]),
    "mc_vllm_get_finished": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_vllm_take_stats": (ctypes.c_int, [_H, ctypes.POINTER(Stats)]),
    "mc_vllm_pool_error": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_vllm_take_stats_json": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_vllm_take_notes": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_vllm_load_failed": (ctypes.c_int, [_H, _S]),
    "mc_vllm_wait_idle": (ctypes.c_int, [_H]),
}


def _lib_handle():
    return _lib.require("mc_vllm_abi_version", ABI_MAJOR, _PROTOS)


def _int_bytes(v):
    """An int hash as little-endian two's complement, at least 16 bytes."""
    return v.to_bytes(max(16, (v.bit_length() + 8) // 8), "little", signed=True)


def b64(h):
    """A block hash as the base64 text the ABI's JSON carries. vLLM's
    BlockHash is bytes; older releases had a named tuple with an int
    hash_value; anything else is hashed by its repr."""
    if isinstance(h, (bytes, bytearray, memoryview)):
        raw = bytes(h)
    elif hasattr(h, "hash_value"):
        v = h.hash_value
        raw = v if isinstance(v, bytes) else _int_bytes(int(v))
    elif isinstance(h, int):
        raw = _int_bytes(h)
    else:
        raw = repr(h).encode()
    return base64.b64encode(raw).decode("ascii")


class Connector:
    """One mc_vllm_connector_t. Every method raises MooncakeError (a
    subclass naming the code) on failure; the connector class decides
    what to do with it."""

    def __init__(self, settings, role):
        self._lib = _lib_handle()
        h = _H()
        self._check(self._lib.mc_vllm_create(json.dumps(settings).encode(), role, ctypes.byref(h)))
        self._h = h

    def _check(self, rc):
        if rc != 0:
            raise error_for(rc, _lib.last_error(self._lib))

    def _json(self, obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    def _take(self, buf):
        try:
            return ctypes.string_at(buf.data, buf.len) if buf.len else b""
        finally:
            self._lib.mc_buf_free(ctypes.byref(buf))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._check(self._lib.mc_vllm_destroy(h))

    # Scheduler side.
    def lookup(self, args):
        n, a = ctypes.c_int64(), ctypes.c_int32()
        self._check(self._lib.mc_vllm_lookup(self._h, self._json(args), ctypes.byref(n), ctypes.byref(a)))
        return n.value, bool(a.value)

    def update_after_alloc(self, args):
        self._check(self._lib.mc_vllm_update_after_alloc(self._h, self._json(args)))

    def plan_save(self, args):
        n = ctypes.c_int64()
        self._check(self._lib.mc_vllm_plan_save(self._h, self._json(args), ctypes.byref(n)))
        return n.value

    def preempted(self, ids):
        self._check(self._lib.mc_vllm_preempted(self._h, self._json(list(ids))))

    def load_failed(self, hashes):
        """hashes: base64 block hashes whose load failed (see vllm.h)."""
        self._check(self._lib.mc_vllm_load_failed(self._h, self._json(list(hashes))))

    def request_finished(self, args):
        buf = Buf()
        self._check(self._lib.mc_vllm_request_finished(self._h, self._json(args), ctypes.byref(buf)))
        r = json.loads(self._take(buf))
        return bool(r.get("hold")), r.get("params")

    def build_meta(self):
        buf = Buf()
        self._check(self._lib.mc_vllm_build_meta(self._h, ctypes.byref(buf)))
        return self._take(buf)

    def reset(self):
        n = ctypes.c_int64()
        self._check(self._lib.mc_vllm_reset(self._h, ctypes.byref(n)))
        return n.value

    # Worker side.
    def register_kv_caches(self, regions):
        """regions: (base, block_bytes, num_blocks, layer[, device_id])
        tuples; device_id -1 (the default) is host memory, N >= 0 GPU
        memory of CUDA device N."""
        rs = [tuple(r) + (-1,) if len(r) == 4 else tuple(r) for r in regions]
        arr = (Region * len(rs))(*[Region(base, bb, nb, dev, layer) for base, bb, nb, layer, dev in rs])
        self._check(self._lib.mc_vllm_register_kv_caches(self._h, arr, len(regions)))

    def start_load(self, meta):
        self._check(self._lib.mc_vllm_start_load(self._h, meta or None, len(meta or b"")))

    def save_layer(self, layer):
        self._check(self._lib.mc_vllm_save_layer(self._h, layer))

    def wait_layer_load(self, layer):
        self._check(self._lib.mc_vllm_wait_layer_load(self._h, layer))

    def handle_preemptions(self, ids):
        self._check(self._lib.mc_vllm_handle_preemptions(self._h, self._json(list(ids))))

    def wait_for_save(self):
        self._check(self._lib.mc_vllm_wait_for_save(self._h))

    def wait_idle(self):
        """An empty step's wait (at most mc_idle_wait_ms) for a load or
        save in flight to complete; True when one has something to report."""
        rc = self._lib.mc_vllm_wait_idle(self._h)
        if rc < 0:
            self._check(rc)
        return rc == 1

    def get_finished(self):
        buf = Buf()
        rc = self._lib.mc_vllm_get_finished(self._h, ctypes.byref(buf))
        data = self._take(buf)  # filled even when rc reports a save that could not start
        out = json.loads(data) if data else {}
        return out, (None if rc == 0 else error_for(rc, _lib.last_error(self._lib)))

    def take_notes(self):
        """The pool config's remarks for the log (once), a list of str."""
        buf = Buf()
        self._check(self._lib.mc_vllm_take_notes(self._h, ctypes.byref(buf)))
        return json.loads(self._take(buf) or b"[]")

    def pool_error(self):
        """Why this store-mode connector serves without its pool
        (mc_pool_required false), or "" while the pool is open."""
        buf = Buf()
        self._check(self._lib.mc_vllm_pool_error(self._h, ctypes.byref(buf)))
        return self._take(buf).decode("utf-8", "replace")

    def take_stats(self):
        """The worker's counters since the previous call, as a dict:
        saved/loaded/failed blocks, saved/loaded bytes, and load/save busy
        time in ns (mc_vllm_take_stats_json)."""
        buf = Buf()
        self._check(self._lib.mc_vllm_take_stats_json(self._h, ctypes.byref(buf)))
        return json.loads(self._take(buf) or b"{}")


__all__ = ["Connector", "MooncakeError", "ROLE_SCHEDULER", "ROLE_WORKER", "b64"]
