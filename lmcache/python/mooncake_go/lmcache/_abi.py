"""ctypes bindings of mooncake/lmcache.h (mc_lmcache_*). Every method
blocks (the connector runs them off LMCache's event loop) and raises
MooncakeError (a subclass naming the code) when the call itself fails;
per-key outcomes of the batched calls come back as values."""

import ctypes
import json

from mooncake_go import _lib
from mooncake_go.errors import error_for

ABI_MAJOR = 1


class Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_H = ctypes.c_void_p
_S = ctypes.c_char_p
_SA = ctypes.POINTER(ctypes.c_char_p)
_PA = ctypes.POINTER(ctypes.c_void_p)
_ZA = ctypes.POINTER(ctypes.c_size_t)
_PROTOS = {
    "mc_lmcache_create": (ctypes.c_int, [_S, _S, ctypes.POINTER(_H)]),
    "mc_lmcache_destroy": (ctypes.c_int, [_H]),
    "mc_lmcache_notes": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_lmcache_register_buffer": (ctypes.c_int, [_H, ctypes.c_void_p, ctypes.c_size_t]),
    "mc_lmcache_unregister_buffer": (ctypes.c_int, [_H, ctypes.c_void_p]),
    "mc_lmcache_exists": (ctypes.c_int, [_H, _S]),
    "mc_lmcache_batched_contains": (ctypes.c_int, [_H, _SA, ctypes.c_size_t, ctypes.c_int, _ZA]),
    "mc_lmcache_batched_put": (ctypes.c_int, [_H, _SA, _PA, _ZA, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32)]),
    "mc_lmcache_batched_get": (ctypes.c_int, [_H, _SA, _PA, _ZA, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64)]),
    "mc_lmcache_remove": (ctypes.c_int, [_H, _S]),
    "mc_lmcache_list": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
    "mc_lmcache_ping": (ctypes.c_int, [_H]),
}


def _keys(keys):
    return (ctypes.c_char_p * len(keys))(*[k.encode("utf-8") for k in keys])


class Connector:
    """One mc_lmcache_connector_t."""

    def __init__(self, url, settings):
        self._lib = _lib.require("mc_lmcache_abi_version", ABI_MAJOR, _PROTOS)
        h = _H()
        self._check(self._lib.mc_lmcache_create(url.encode(), json.dumps(settings, default=str).encode(), ctypes.byref(h)))
        self._h = h

    def _check(self, rc):
        if rc < 0:
            raise error_for(rc, _lib.last_error(self._lib))
        return rc

    def _take(self, buf):
        try:
            return ctypes.string_at(buf.data, buf.len) if buf.len else b""
        finally:
            self._lib.mc_buf_free(ctypes.byref(buf))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._check(self._lib.mc_lmcache_destroy(h))

    def notes(self):
        buf = Buf()
        self._check(self._lib.mc_lmcache_notes(self._h, ctypes.byref(buf)))
        return json.loads(self._take(buf) or b"[]")

    def register_buffer(self, ptr, size):
        self._check(self._lib.mc_lmcache_register_buffer(self._h, ptr, size))

    def unregister_buffer(self, ptr):
        self._check(self._lib.mc_lmcache_unregister_buffer(self._h, ptr))

    def exists(self, key):
        """True/False; raises on a failed lookup (the caller maps it to False)."""
        return self._check(self._lib.mc_lmcache_exists(self._h, key.encode("utf-8"))) == 1

    def batched_contains(self, keys, pin=False):
        """The number of leading keys that exist; raises on a failed lookup."""
        if not keys:
            return 0
        out = ctypes.c_size_t()
        self._check(self._lib.mc_lmcache_batched_contains(self._h, _keys(keys), len(keys), int(bool(pin)), ctypes.byref(out)))
        return out.value

    def batched_put(self, keys, ptrs, sizes):
        """Per-key codes (0 = stored)."""
        n = len(keys)
        codes = (ctypes.c_int32 * n)()
        if n:
            self._check(self._lib.mc_lmcache_batched_put(
                self._h, _keys(keys), (ctypes.c_void_p * n)(*ptrs), (ctypes.c_size_t * n)(*sizes), n, codes))
        return list(codes)

    def batched_get(self, keys, ptrs, caps):
        """Per key: bytes read (> 0) or a negative code."""
        n = len(keys)
        res = (ctypes.c_int64 * n)()
        if n:
            self._check(self._lib.mc_lmcache_batched_get(
                self._h, _keys(keys), (ctypes.c_void_p * n)(*ptrs), (ctypes.c_size_t * n)(*caps), n, res))
        return list(res)

    def remove(self, key):
        self._check(self._lib.mc_lmcache_remove(self._h, key.encode("utf-8")))

    def list(self):
        buf = Buf()
        self._check(self._lib.mc_lmcache_list(self._h, ctypes.byref(buf)))
        return json.loads(self._take(buf) or b"[]")

    def ping(self):
        """0 when the master answers, else the negative code."""
        return self._lib.mc_lmcache_ping(self._h)


__all__ = ["Connector"]
