"""ctypes bindings of mooncake/sglang.h (mc_sglang_*)."""

import array
import ctypes
import json

from mooncake_go import _lib
from mooncake_go.errors import MooncakeError, error_for

ABI_MAJOR = 1


class Stats(ctypes.Structure):
    _fields_ = [
        ("prefetch_pages", ctypes.c_uint64),
        ("backup_pages", ctypes.c_uint64),
        ("prefetch_bytes", ctypes.c_uint64),
        ("backup_bytes", ctypes.c_uint64),
        ("prefetch_seconds", ctypes.c_double),
        ("backup_seconds", ctypes.c_double),
        ("failed_gets", ctypes.c_uint64),
        ("failed_sets", ctypes.c_uint64),
        ("timeouts", ctypes.c_uint64),
        ("exists_calls", ctypes.c_uint64),
        ("exists_errors", ctypes.c_uint64),
    ]


class Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_H = ctypes.c_void_p
_S = ctypes.c_char_p
_P = ctypes.c_void_p  # arrays passed by address
_XFER = [_H, _P, ctypes.c_size_t, ctypes.c_size_t, _P, _P, _P]
_PAGES = [_H, _P, ctypes.c_size_t, _P, _P, _P]
_PROTOS = {
    "mc_sglang_create": (ctypes.c_int, [_S, ctypes.POINTER(_H)]),
    "mc_sglang_destroy": (ctypes.c_int, [_H]),
    "mc_sglang_register_host_pool": (ctypes.c_int, [_H, _S, ctypes.c_void_p, ctypes.c_size_t]),
    "mc_sglang_batch_exists": (ctypes.c_int, [_H, _P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "mc_sglang_batch_get": (ctypes.c_int, _XFER),
    "mc_sglang_batch_set": (ctypes.c_int, _XFER),
    "mc_sglang_get_pages": (ctypes.c_int, _PAGES),
    "mc_sglang_set_pages": (ctypes.c_int, _PAGES),
    "mc_sglang_clear": (ctypes.c_int, [_H, ctypes.POINTER(ctypes.c_uint64)]),
    "mc_sglang_take_stats": (ctypes.c_int, [_H, ctypes.POINTER(Stats)]),
    "mc_sglang_take_notes": (ctypes.c_int, [_H, ctypes.POINTER(Buf)]),
}


def _lib_handle():
    return _lib.require("mc_sglang_abi_version", ABI_MAJOR, _PROTOS)


def _keys(keys):
    arr = (ctypes.c_char_p * len(keys))(*[k.encode() if isinstance(k, str) else bytes(k) for k in keys])
    return arr


def _u64(values):
    """values as a C array of uint64 (pointers, sizes), and its address."""
    a = array.array("Q", values)
    return a, a.buffer_info()[0]


class Backend:
    """One mc_sglang_backend_t. Every method raises MooncakeError (a
    subclass naming the code) on a failure of the whole call; per-page
    outcomes come back as lists of bool. The HiCacheStorage class decides
    what to do with errors (SGLang's threads must never see them)."""

    def __init__(self, settings):
        self._lib = _lib_handle()
        h = _H()
        self._check(self._lib.mc_sglang_create(json.dumps(settings).encode(), ctypes.byref(h)))
        self._h = h

    def _check(self, rc):
        if rc != 0:
            raise error_for(rc, _lib.last_error(self._lib))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._check(self._lib.mc_sglang_destroy(h))

    def register_host_pool(self, geometry, base, size):
        self._check(self._lib.mc_sglang_register_host_pool(self._h, json.dumps(geometry).encode(), base, size))

    def batch_exists(self, keys):
        if not keys:
            return 0
        ks = _keys(keys)
        n = ctypes.c_size_t()
        self._check(self._lib.mc_sglang_batch_exists(self._h, ctypes.addressof(ks), len(keys), ctypes.byref(n)))
        return n.value

    def _transfer(self, fn, keys, ptrs, sizes, per_page):
        n = len(keys)
        if n == 0:
            return []
        ks = _keys(keys)
        pa, paddr = _u64(ptrs)
        sa, saddr = _u64(sizes)
        ok = (ctypes.c_uint8 * n)()
        if per_page is None:
            rc = fn(self._h, ctypes.addressof(ks), n, paddr, saddr, ctypes.addressof(ok))
        else:
            rc = fn(self._h, ctypes.addressof(ks), n, per_page, paddr, saddr, ctypes.addressof(ok))
        del pa, sa
        self._check(rc)
        return [bool(v) for v in ok]

    def batch_get(self, keys, ptrs, sizes):
        """Zero-copy read of len(keys) pages into the host pool: ptrs and
        sizes as get_page_buffer_meta returns them."""
        return self._transfer(self._lib.mc_sglang_batch_get, keys, ptrs, sizes, self._per_page(keys, ptrs, sizes))

    def batch_set(self, keys, ptrs, sizes):
        return self._transfer(self._lib.mc_sglang_batch_set, keys, ptrs, sizes, self._per_page(keys, ptrs, sizes))

    def get_pages(self, keys, ptrs, sizes):
        """Reads flat pages (one buffer of page_bytes per key, any memory)."""
        return self._transfer(self._lib.mc_sglang_get_pages, keys, ptrs, sizes, None)

    def set_pages(self, keys, ptrs, sizes):
        return self._transfer(self._lib.mc_sglang_set_pages, keys, ptrs, sizes, None)

    @staticmethod
    def _per_page(keys, ptrs, sizes):
        if not keys:
            return 1
        if len(ptrs) != len(sizes) or len(ptrs) % len(keys) != 0:
            raise ValueError(f"{len(ptrs)} buffers and {len(sizes)} sizes for {len(keys)} pages")
        return len(ptrs) // len(keys)

    def clear(self):
        n = ctypes.c_uint64()
        self._check(self._lib.mc_sglang_clear(self._h, ctypes.byref(n)))
        return n.value

    def take_stats(self):
        s = Stats()
        self._check(self._lib.mc_sglang_take_stats(self._h, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in Stats._fields_}

    def take_notes(self):
        buf = Buf()
        self._check(self._lib.mc_sglang_take_notes(self._h, ctypes.byref(buf)))
        try:
            data = ctypes.string_at(buf.data, buf.len) if buf.len else b"[]"
        finally:
            self._lib.mc_buf_free(ctypes.byref(buf))
        return json.loads(data)


__all__ = ["ABI_MAJOR", "Backend", "MooncakeError", "Stats"]
