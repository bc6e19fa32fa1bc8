"""The KV-cache pool client of libmooncake.so (mooncake/store.h, mc_store_*).

Two classes over the same calls:

* Store raises: every failure is a MooncakeError subclass (errors.py) with
  the library's code and reason; success returns a value or None. Batch
  calls raise only when the call itself is unusable and return one int per
  key otherwise (0 / bytes read / 1 or 0, or that key's negative code).
* MooncakeDistributedStore keeps upstream Mooncake's return conventions
  (mooncake.store.MooncakeDistributedStore): status ints (0 or a negative
  code), get() -> b"" on a miss, get_into() -> bytes read or a negative
  code, is_exist() -> 1 / 0 / negative, get_size() -> size or negative,
  batch calls -> lists of ints. Shims ported from upstream integrations keep
  their checks (ret < 0, ret == -704, ...).

Codes are upstream's store values (-704 OBJECT_NOT_FOUND, -705, -707, ...)
except where a common code already has upstream's value (store.h): e.g.
NO_AVAILABLE_HANDLE is -1200 here, not -200, and a NULL/empty argument is
-1 (upstream returns -1 for any error from is_exist).

Keys are bytes: a key may be bytes (any byte, NUL included, not
necessarily UTF-8; bytearray and memoryview too) or str (encoded UTF-8),
1 to MAX_KEY_LEN bytes; the calls pass it to the library with its length
(store.h's _n functions), so str and the bytes of its UTF-8 encoding name
the same key.

Pointers are ints (addresses); buffers passed to put_from / get_into and the
batch forms must lie inside memory registered with register_buffer and stay
valid until unregister_buffer. The library is loaded by setup(), not at
import. Every method may be called from several threads at once (the
library releases the GIL); close() waits for calls in flight.
"""

import ctypes
import json
import threading

from . import _lib
from .errors import (
    ERR_INVALID_ARGUMENT,
    ERR_INVALID_HANDLE,
    ERR_UNSUPPORTED,
    STORE_ERR_BUFFER_OVERFLOW,
    MooncakeError,
    InvalidHandleError,
    error_for,
)

STORE_ABI_MAJOR = 1
STORE_ABI_MINOR = 1  # the _n functions: keys by pointer and length
MAX_KEY_LEN = 4096  # MC_STORE_MAX_KEY_LEN
MIB = 1 << 20

_H = ctypes.c_void_p  # mc_store_t*: opaque
_P = ctypes.c_void_p
_S = ctypes.c_size_t
_STR = ctypes.c_char_p
_KEYS = ctypes.POINTER(_STR)  # const char* const* keys
_LENS = ctypes.POINTER(_S)  # const size_t* key_lens / sizes
_PROTOS = {
    "mc_store_setup": (
        ctypes.c_int,
        [_STR, _STR, ctypes.c_uint64, ctypes.c_uint64, _STR, _STR, _STR, ctypes.POINTER(_H)],
    ),
    "mc_store_destroy": (ctypes.c_int, [_H]),
    "mc_store_get_hostname": (ctypes.c_int, [_H, ctypes.c_char_p, _S, ctypes.POINTER(_S)]),
    "mc_store_register_buffer": (ctypes.c_int, [_H, _P, _S]),
    "mc_store_unregister_buffer": (ctypes.c_int, [_H, _P]),
    "mc_store_put": (ctypes.c_int, [_H, _STR, _P, _S]),
    "mc_store_get": (ctypes.c_int, [_H, _STR, _P, _S, ctypes.POINTER(_S)]),
    "mc_store_put_from": (ctypes.c_int, [_H, _STR, _P, _S]),
    "mc_store_get_into": (ctypes.c_int, [_H, _STR, _P, _S, ctypes.POINTER(ctypes.c_int64)]),
    "mc_store_batch_put_from": (ctypes.c_int, [_H, ctypes.POINTER(_STR), ctypes.POINTER(_P), ctypes.POINTER(_S), _S, ctypes.POINTER(ctypes.c_int32)]),
    "mc_store_batch_get_into": (ctypes.c_int, [_H, ctypes.POINTER(_STR), ctypes.POINTER(_P), ctypes.POINTER(_S), _S, ctypes.POINTER(ctypes.c_int64)]),
    "mc_store_is_exist": (ctypes.c_int, [_H, _STR]),
    "mc_store_batch_is_exist": (ctypes.c_int, [_H, ctypes.POINTER(_STR), _S, ctypes.POINTER(ctypes.c_int32)]),
    "mc_store_remove": (ctypes.c_int, [_H, _STR, ctypes.c_int]),
    "mc_store_get_size": (ctypes.c_int, [_H, _STR, ctypes.POINTER(ctypes.c_uint64)]),
    # Keys by pointer and length (ABI 1.1); the calls below use these.
    "mc_store_put_n": (ctypes.c_int, [_H, _STR, _S, _P, _S]),
    "mc_store_get_n": (ctypes.c_int, [_H, _STR, _S, _P, _S, ctypes.POINTER(_S)]),
    "mc_store_put_from_n": (ctypes.c_int, [_H, _STR, _S, _P, _S]),
    "mc_store_get_into_n": (ctypes.c_int, [_H, _STR, _S, _P, _S, ctypes.POINTER(ctypes.c_int64)]),
    "mc_store_batch_put_from_n": (ctypes.c_int, [_H, _KEYS, _LENS, ctypes.POINTER(_P), _LENS, _S, ctypes.POINTER(ctypes.c_int32)]),
    "mc_store_batch_get_into_n": (ctypes.c_int, [_H, _KEYS, _LENS, ctypes.POINTER(_P), _LENS, _S, ctypes.POINTER(ctypes.c_int64)]),
    "mc_store_is_exist_n": (ctypes.c_int, [_H, _STR, _S]),
    "mc_store_batch_is_exist_n": (ctypes.c_int, [_H, _KEYS, _LENS, _S, ctypes.POINTER(ctypes.c_int32)]),
    "mc_store_remove_n": (ctypes.c_int, [_H, _STR, _S, ctypes.c_int]),
    "mc_store_get_size_n": (ctypes.c_int, [_H, _STR, _S, ctypes.POINTER(ctypes.c_uint64)]),
}


# store.h 1.2: the calls mooncake.store needs (see _library12).
STORE_ABI_MINOR_12 = 2


class ReplicateConfigC(ctypes.Structure):
    """mc_store_replicate_config_t of store.h 1.2."""

    _fields_ = [
        ("replica_num", ctypes.c_uint32),
        ("with_hard_pin", ctypes.c_int32),
        ("with_soft_pin", ctypes.c_int32),
        ("preferred_segments", ctypes.POINTER(_STR)),
        ("n_preferred_segments", _S),
    ]


_CFG = ctypes.POINTER(ReplicateConfigC)
_I32P = ctypes.POINTER(ctypes.c_int32)
_I64P = ctypes.POINTER(ctypes.c_int64)
_STRP = ctypes.POINTER(_STR)
_PP = ctypes.POINTER(_P)
_SP = ctypes.POINTER(_S)
_PROTOS_12 = {
    "mc_store_batch_put": (ctypes.c_int, [_H, _STRP, _SP, _PP, _SP, _S, _CFG, _I32P]),
    "mc_store_put_parts": (ctypes.c_int, [_H, _STR, _S, _PP, _SP, _S, _CFG]),
    "mc_store_batch_put_from_config": (ctypes.c_int, [_H, _STRP, _SP, _PP, _SP, _S, _CFG, _I32P]),
    "mc_store_batch_put_from_parts": (ctypes.c_int, [_H, _STRP, _SP, _PP, _SP, _SP, _S, _CFG, _I32P]),
    "mc_store_batch_get_into_parts": (ctypes.c_int, [_H, _STRP, _SP, _PP, _SP, _SP, _S, _I64P]),
    "mc_store_batch_get": (ctypes.c_int, [_H, _STRP, _SP, _S, ctypes.c_void_p, _I64P]),
    "mc_store_batch_get_ranges": (ctypes.c_int, [_H, _STRP, _SP, _PP, ctypes.POINTER(ctypes.c_uint64), _SP, _S, _I64P]),
    "mc_store_batch_remove": (ctypes.c_int, [_H, _STRP, _SP, _S, ctypes.c_int, _I32P]),
    "mc_store_remove_by_regex": (ctypes.c_int, [_H, _STR, ctypes.c_int, _I64P]),
    "mc_store_remove_all": (ctypes.c_int, [_H, ctypes.c_int, _I64P]),
    "mc_store_get_replica_desc": (ctypes.c_int, [_H, _STRP, _SP, _S, ctypes.c_void_p]),
    "mc_store_health_check": (ctypes.c_int, [_H]),
}
_protos12_done = False
_protos12_lock = threading.Lock()


# store.h 1.3: mc_store_batch_get_alloc (see _library13).
STORE_ABI_MINOR_13 = 3
_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object, _S, _S)  # mc_store_alloc_fn, ctx = a Python list
_PROTOS_13 = {
    "mc_store_batch_get_alloc": (ctypes.c_int, [_H, _STRP, _SP, _S, _ALLOC_FN, ctypes.py_object, _I64P]),
}
_protos13 = None  # None: not checked yet; False: the library is older than 1.3 (or bytes cannot be filled in place)


def _bytes_layout():
    """(PyBytes_FromStringAndSize, offset of a bytes object's data from its
    id()) when this is CPython and the layout checks out, else None. A bytes
    object made by PyBytes_FromStringAndSize(NULL, n) is filled before any
    other code sees it, as C extensions do."""
    try:
        new = ctypes.pythonapi.PyBytes_FromStringAndSize
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_ssize_t]
        off = bytes.__basicsize__ - 1  # PyBytesObject: header, ob_shash, ob_sval[1]
        probe = new(None, 16)
        ctypes.memmove(id(probe) + off, b"mooncake-go:0123", 16)
        if probe != b"mooncake-go:0123" or ctypes.string_at(id(probe) + off, 16) != probe:
            return None
        return new, off
    except (AttributeError, TypeError, ValueError, OSError):
        return None


_BYTES = None


@_ALLOC_FN
def _alloc_bytes(vals, i, size):
    """mc_store_alloc_fn for batch_get: a new bytes object of size bytes,
    kept in vals[i]; its data's address (0 when it cannot be made)."""
    try:
        new, off = _BYTES
        b = new(None, size)
        vals[i] = b
        return id(b) + off
    except BaseException:  # noqa: BLE001 - no exception may cross into the library; 0 fails the key
        return 0


def _library13():
    """The library with store.h 1.3's prototypes declared, or None when it
    is older (or this Python's bytes cannot be filled in place): callers
    fall back to the 1.2 calls."""
    global _protos13, _BYTES
    if _protos13 is not None:
        return _protos13 or None
    lib = _library12()
    with _protos12_lock:
        if _protos13 is None:
            layout = _bytes_layout()
            if (lib.mc_store_abi_version() & 0xFFFF) < STORE_ABI_MINOR_13 or layout is None:
                _protos13 = False
            else:
                _BYTES = layout
                for name, (restype, argtypes) in _PROTOS_13.items():
                    f = getattr(lib, name)
                    f.restype, f.argtypes = restype, argtypes
                _protos13 = lib
    return _protos13 or None


class _Buf(ctypes.Structure):
    """mc_buf_t of common.h."""

    _fields_ = [("data", ctypes.c_void_p), ("len", _S)]


def _library():
    return _lib.require("mc_store_abi_version", STORE_ABI_MAJOR, _PROTOS, STORE_ABI_MINOR)


def _library12():
    """The library, checked to speak store.h 1.2 or later (the calls
    mooncake.store needs), with those prototypes declared."""
    global _protos12_done
    lib = _library()
    if _protos12_done:
        return lib
    with _protos12_lock:
        if not _protos12_done:
            v = lib.mc_store_abi_version()
            if (v & 0xFFFF) < STORE_ABI_MINOR_12:
                raise _lib.LibraryLoadError(
                    f"{_lib.loaded()}: mc_store_abi_version() is {v >> 16}.{v & 0xFFFF}; this call needs "
                    f"{STORE_ABI_MAJOR}.{STORE_ABI_MINOR_12} or later (install matching versions of mooncake_go and "
                    "libmooncake.so, or rebuild it with `make lib`)",
                    [_lib.loaded()],
                    _lib.loaded(),
                )
            for name, (restype, argtypes) in _PROTOS_12.items():
                f = getattr(lib, name)
                f.restype, f.argtypes = restype, argtypes
            _protos12_done = True
    return lib


class PutConfig:
    """Replication settings of a put (store.h mc_store_replicate_config_t,
    upstream ReplicateConfig): replica_num (0 = the client's default, 1),
    with_hard_pin, with_soft_pin, preferred_segments (names tried first)."""

    __slots__ = ("replica_num", "with_hard_pin", "with_soft_pin", "preferred_segments")

    def __init__(self, replica_num=0, with_hard_pin=False, with_soft_pin=False, preferred_segments=()):
        self.replica_num = replica_num
        self.with_hard_pin = with_hard_pin
        self.with_soft_pin = with_soft_pin
        self.preferred_segments = tuple(preferred_segments)

    def to_c(self):
        """(pointer argument, keep-alive) for a const mc_store_replicate_config_t*."""
        segs = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in self.preferred_segments]
        arr = (_STR * max(len(segs), 1))(*segs)
        c = ReplicateConfigC(int(self.replica_num), 1 if self.with_hard_pin else 0, 1 if self.with_soft_pin else 0, arr if segs else None, len(segs))
        return ctypes.byref(c), (c, arr, segs)


def _config_arg(config):
    if config is None:
        return None, None
    return config.to_c()


def _address(value):
    """(address, length, keep-alive) of a bytes-like value's memory: bytes
    and writable contiguous buffers are used in place, other read-only
    buffers copied once."""
    if isinstance(value, bytes):
        if not value:
            return None, 0, value
        return ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value, len(value), value
    arg, n, keep = _readable(value)
    if n == 0:
        return None, 0, keep
    if isinstance(arg, bytes):
        return ctypes.cast(ctypes.c_char_p(arg), ctypes.c_void_p).value, n, keep
    return ctypes.addressof(arg), n, keep


def _key(key):
    """A key as bytes: str is encoded UTF-8; bytes, bytearray and memoryview
    are taken byte for byte (NUL and bytes that are not UTF-8 included).
    Emptiness and length are checked by the library (the _n calls)."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise error_for(ERR_INVALID_ARGUMENT, f"key must be str or bytes, not {type(key).__name__}")


def _readable(value):
    """(pointer argument, length, keep-alive) for a bytes-like value."""
    if isinstance(value, bytes):
        return value, len(value), value
    mv = memoryview(value)
    if not mv.contiguous:
        raise error_for(ERR_INVALID_ARGUMENT, "value must be a contiguous buffer")
    n = mv.nbytes
    if mv.readonly or n == 0:
        b = mv.tobytes()
        return b, n, b
    arr = (ctypes.c_char * n).from_buffer(mv.cast("B"))
    return arr, n, arr


class Store:
    """A pool client (store.h) whose methods raise MooncakeError on failure.
    See the module docstring."""

    def __init__(self):
        self._lib = None
        self._h = None
        self._mu = threading.Lock()

    # -- lifecycle --------------------------------------------------------

    def setup(
        self,
        local_hostname,
        metadata_server=None,
        global_segment_size=None,
        local_buffer_size=None,
        protocol=None,
        rdma_devices=None,
        master_server_addr=None,
        engine=None,
        enable_ssd_offload=False,
        ssd_offload_path="",
        tenant_id="default",
        enable_client_http_server=False,
        client_http_port=9300,
    ):
        """Starts the client (upstream setup()). Positional form: the first
        seven arguments are required, as upstream. Dict form: setup(config)
        with keys local_hostname and metadata_server (required),
        global_segment_size and local_buffer_size (default 16 MiB),
        protocol ("tcp"), rdma_devices or device_name, master_server_addr or
        master_server_address ("127.0.0.1:50051"). The upstream options not
        built here (a shared engine, SSD offload, tenants, the client HTTP
        server) raise UnsupportedError unless left at their defaults."""
        if isinstance(local_hostname, dict):
            cfg = dict(local_hostname)
            local_hostname = cfg.get("local_hostname")
            metadata_server = cfg.get("metadata_server")
            global_segment_size = cfg.get("global_segment_size", 16 * MIB)
            local_buffer_size = cfg.get("local_buffer_size", 16 * MIB)
            protocol = cfg.get("protocol", "tcp")
            rdma_devices = cfg.get("rdma_devices", cfg.get("device_name", ""))
            master_server_addr = cfg.get("master_server_addr", cfg.get("master_server_address", "127.0.0.1:50051"))
        else:
            missing = [
                name
                for name, v in (
                    ("metadata_server", metadata_server),
                    ("global_segment_size", global_segment_size),
                    ("local_buffer_size", local_buffer_size),
                    ("protocol", protocol),
                    ("rdma_devices", rdma_devices),
                    ("master_server_addr", master_server_addr),
                )
                if v is None
            ]
            if missing:
                raise error_for(ERR_INVALID_ARGUMENT, f"setup: missing {', '.join(missing)}", "mc_store_setup")
        for what, given in (
            ("engine", engine is not None),
            ("enable_ssd_offload", bool(enable_ssd_offload) or bool(ssd_offload_path)),
            ("tenant_id", tenant_id not in (None, "", "default")),
            ("enable_client_http_server", bool(enable_client_http_server)),
        ):
            if given:
                raise error_for(ERR_UNSUPPORTED, f"setup: {what} is not implemented by mooncake-go", "mc_store_setup")
        with self._mu:
            if self._h is not None:
                raise error_for(ERR_INVALID_ARGUMENT, "setup: this store is already set up", "mc_store_setup")
            lib = _library()
            h = _H()
            enc = lambda s: None if s is None else (s.encode() if isinstance(s, str) else bytes(s))  # noqa: E731
            rc = lib.mc_store_setup(
                enc(local_hostname),
                enc(metadata_server),
                int(global_segment_size),
                int(local_buffer_size),
                enc(protocol),
                enc(rdma_devices),
                enc(master_server_addr),
                ctypes.byref(h),
            )
            self._check(lib, rc, "mc_store_setup")
            self._lib, self._h = lib, h

    def close(self):
        """Closes the client (waits for calls in flight, unmounts its
        segment). A second close does nothing."""
        with self._mu:
            h, self._h = self._h, None
        if h is not None:
            self._check(self._lib, self._lib.mc_store_destroy(h), "mc_store_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass

    # -- helpers ------------------------------------------------------------

    @staticmethod
    def _check(lib, rc, call):
        if rc < 0:
            raise error_for(rc, _lib.last_error(lib), call)
        return rc

    def _handle(self):
        h = self._h
        if h is None:
            raise InvalidHandleError(ERR_INVALID_HANDLE, "the store is not set up or was closed")
        return self._lib, h

    @staticmethod
    def _arrays(keys, ptrs=None, sizes=None):
        keys = list(keys)
        n = len(keys)
        if ptrs is not None and (len(ptrs) != n or len(sizes) != n):
            raise error_for(ERR_INVALID_ARGUMENT, f"{n} keys, {len(ptrs)} pointers, {len(sizes)} sizes")
        kb = [_key(x) for x in keys]
        k = (_STR * max(n, 1))(*kb)
        kl = (_S * max(n, 1))(*[len(x) for x in kb])
        if ptrs is None:
            return n, k, kl, None, None
        p = (_P * max(n, 1))(*[int(x) for x in ptrs])
        s = (_S * max(n, 1))(*[int(x) for x in sizes])
        return n, k, kl, p, s

    # -- calls ----------------------------------------------------------------

    def get_hostname(self):
        """This client's segment name ("host:port")."""
        lib, h = self._handle()
        buf = ctypes.create_string_buffer(1024)
        n = _S()
        self._check(lib, lib.mc_store_get_hostname(h, buf, len(buf), ctypes.byref(n)), "mc_store_get_hostname")
        return buf.raw[: n.value].decode("utf-8", "replace")

    def register_buffer(self, ptr, size):
        """Registers [ptr, ptr+size) for the zero-copy calls."""
        lib, h = self._handle()
        self._check(lib, lib.mc_store_register_buffer(h, ptr, size), "mc_store_register_buffer")

    def unregister_buffer(self, ptr):
        """Removes the registration starting at ptr."""
        lib, h = self._handle()
        self._check(lib, lib.mc_store_unregister_buffer(h, ptr), "mc_store_unregister_buffer")

    def put(self, key, value):
        """Stores a copy of value (bytes-like, non-empty) under key, through
        the client's local buffer. An existing key keeps its value."""
        lib, h = self._handle()
        arg, n, keep = _readable(value)
        k = _key(key)
        rc = lib.mc_store_put_n(h, k, len(k), arg, n)
        del keep
        self._check(lib, rc, "mc_store_put_n")

    def get_size(self, key):
        """The size in bytes of key's value."""
        lib, h = self._handle()
        out = ctypes.c_uint64()
        k = _key(key)
        self._check(lib, lib.mc_store_get_size_n(h, k, len(k), ctypes.byref(out)), "mc_store_get_size_n")
        return out.value

    def get(self, key):
        """A copy of key's value as bytes. Raises NotFoundError on a miss."""
        lib, h = self._handle()
        k = _key(key)
        for _ in range(3):  # the value may be replaced between size and read
            size = self.get_size(k)
            buf = ctypes.create_string_buffer(max(size, 1))
            n = _S()
            rc = lib.mc_store_get_n(h, k, len(k), buf, len(buf), ctypes.byref(n))
            if rc == STORE_ERR_BUFFER_OVERFLOW and size < self.get_size(k):
                continue
            self._check(lib, rc, "mc_store_get_n")
            return buf.raw[: n.value]
        self._check(lib, rc, "mc_store_get_n")

    def put_from(self, key, ptr, size):
        """Stores [ptr, ptr+size) (registered memory) under key, zero copy."""
        lib, h = self._handle()
        k = _key(key)
        self._check(lib, lib.mc_store_put_from_n(h, k, len(k), ptr, size), "mc_store_put_from_n")

    def get_into(self, key, ptr, size):
        """Reads key's value into [ptr, ptr+size) (registered memory), zero
        copy; returns the bytes read."""
        lib, h = self._handle()
        out = ctypes.c_int64()
        k = _key(key)
        self._check(lib, lib.mc_store_get_into_n(h, k, len(k), ptr, size, ctypes.byref(out)), "mc_store_get_into_n")
        return out.value

    def batch_put_from(self, keys, ptrs, sizes):
        """Stores each [ptrs[i], +sizes[i]) under keys[i]; returns one code
        per key (0, or that key's negative code)."""
        lib, h = self._handle()
        n, k, kl, p, s = self._arrays(keys, ptrs, sizes)
        out = (ctypes.c_int32 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_put_from_n(h, k, kl, p, s, n, out), "mc_store_batch_put_from_n")
        return list(out[:n])

    def batch_get_into(self, keys, ptrs, sizes):
        """Reads keys[i] into [ptrs[i], +sizes[i]); returns per key the
        bytes read or that key's negative code."""
        lib, h = self._handle()
        n, k, kl, p, s = self._arrays(keys, ptrs, sizes)
        out = (ctypes.c_int64 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_get_into_n(h, k, kl, p, s, n, out), "mc_store_batch_get_into_n")
        return list(out[:n])

    def is_exist(self, key):
        """Whether key has a readable replica (True grants a lease)."""
        lib, h = self._handle()
        k = _key(key)
        return self._check(lib, lib.mc_store_is_exist_n(h, k, len(k)), "mc_store_is_exist_n") == 1

    def batch_is_exist(self, keys):
        """Per key: 1 (exists), 0 (not) or that key's negative code."""
        lib, h = self._handle()
        n, k, kl, _, _ = self._arrays(keys)
        out = (ctypes.c_int32 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_is_exist_n(h, k, kl, n, out), "mc_store_batch_is_exist_n")
        return list(out[:n])

    def remove(self, key, force=False):
        """Deletes key (force: even while a reader holds a lease)."""
        lib, h = self._handle()
        k = _key(key)
        self._check(lib, lib.mc_store_remove_n(h, k, len(k), 1 if force else 0), "mc_store_remove_n")

    # -- store.h 1.2 ------------------------------------------------------

    def _handle12(self):
        lib, h = self._handle()
        return _library12(), h

    def batch_put(self, keys, values, config=None):
        """Stores a copy of each values[i] (bytes-like) under keys[i],
        staged through the local buffer, with the PutConfig given; returns
        one code per key (0 or negative)."""
        values = list(values)
        addrs = [_address(v) for v in values]
        return self.batch_put_ptrs(keys, [a for a, _, _ in addrs], [m for _, m, _ in addrs], config)

    def batch_put_ptrs(self, keys, ptrs, sizes, config=None):
        """batch_put of the ranges [ptrs[i], +sizes[i]) (any readable
        memory, copied during the call); one code per key."""
        lib, h = self._handle12()
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            raise error_for(ERR_INVALID_ARGUMENT, f"{n} keys, {len(ptrs)} values, {len(sizes)} sizes", "mc_store_batch_put")
        n, k, kl, _, _ = self._arrays(keys)
        p = (_P * max(n, 1))(*[None if x is None else int(x) for x in ptrs])
        sz = (_S * max(n, 1))(*[int(x) for x in sizes])
        cfg, keep = _config_arg(config)
        out = (ctypes.c_int32 * max(n, 1))()
        rc = lib.mc_store_batch_put(h, k, kl, p, sz, n, cfg, out)
        del keep
        self._check(lib, rc, "mc_store_batch_put")
        return list(out[:n])

    def put_parts(self, key, parts, config=None):
        """Stores the concatenation of parts (bytes-like, in order) under
        key, gathered once into the local buffer."""
        addrs = [_address(v) for v in parts]
        self.put_parts_ptrs(key, [a for a, _, _ in addrs], [m for _, m, _ in addrs], config)
        del addrs

    def put_parts_ptrs(self, key, ptrs, sizes, config=None):
        """put_parts of the ranges [ptrs[i], +sizes[i]) (any readable memory)."""
        lib, h = self._handle12()
        ptrs, sizes = list(ptrs), list(sizes)
        if len(ptrs) != len(sizes):
            raise error_for(ERR_INVALID_ARGUMENT, f"{len(ptrs)} parts, {len(sizes)} sizes", "mc_store_put_parts")
        n = len(ptrs)
        p = (_P * max(n, 1))(*[None if x is None else int(x) for x in ptrs])
        sz = (_S * max(n, 1))(*[int(x) for x in sizes])
        cfg, keep = _config_arg(config)
        kb = _key(key)
        rc = lib.mc_store_put_parts(h, kb, len(kb), p, sz, n, cfg)
        del keep
        self._check(lib, rc, "mc_store_put_parts")

    def get_copy_into(self, key, ptr, size):
        """Copies key's value into [ptr, ptr+size) (any writable memory),
        staged through the local buffer; returns the bytes read."""
        lib, h = self._handle()
        n = _S()
        kb = _key(key)
        self._check(lib, lib.mc_store_get_n(h, kb, len(kb), ptr, size, ctypes.byref(n)), "mc_store_get_n")
        return n.value

    def batch_put_from_config(self, keys, ptrs, sizes, config=None):
        """batch_put_from with a PutConfig; one code per key."""
        lib, h = self._handle12()
        n, k, kl, p, s = self._arrays(keys, ptrs, sizes)
        cfg, keep = _config_arg(config)
        out = (ctypes.c_int32 * max(n, 1))()
        rc = lib.mc_store_batch_put_from_config(h, k, kl, p, s, n, cfg, out)
        del keep
        self._check(lib, rc, "mc_store_batch_put_from_config")
        return list(out[:n])

    @staticmethod
    def _parts_arrays(keys, all_ptrs, all_sizes):
        keys, all_ptrs, all_sizes = list(keys), list(all_ptrs), list(all_sizes)
        n = len(keys)
        if len(all_ptrs) != n or len(all_sizes) != n:
            raise error_for(ERR_INVALID_ARGUMENT, f"{n} keys, {len(all_ptrs)} pointer lists, {len(all_sizes)} size lists")
        counts, flat_p, flat_s = [], [], []
        for ps, ss in zip(all_ptrs, all_sizes):
            ps, ss = list(ps), list(ss)
            if len(ps) != len(ss):
                raise error_for(ERR_INVALID_ARGUMENT, f"a key has {len(ps)} pointers and {len(ss)} sizes")
            counts.append(len(ps))
            flat_p.extend(int(x) for x in ps)
            flat_s.extend(int(x) for x in ss)
        kb = [_key(x) for x in keys]
        k = (_STR * max(n, 1))(*kb)
        kl = (_S * max(n, 1))(*[len(x) for x in kb])
        c = (_S * max(n, 1))(*counts)
        p = (_P * max(len(flat_p), 1))(*flat_p)
        s = (_S * max(len(flat_s), 1))(*flat_s)
        return n, k, kl, p, s, c

    def batch_put_from_parts(self, keys, all_ptrs, all_sizes, config=None):
        """Stores under keys[i] the concatenation of the registered ranges
        (all_ptrs[i][j], all_sizes[i][j]), zero copy; one code per key."""
        lib, h = self._handle12()
        n, k, kl, p, s, c = self._parts_arrays(keys, all_ptrs, all_sizes)
        cfg, keep = _config_arg(config)
        out = (ctypes.c_int32 * max(n, 1))()
        rc = lib.mc_store_batch_put_from_parts(h, k, kl, p, s, c, n, cfg, out)
        del keep
        self._check(lib, rc, "mc_store_batch_put_from_parts")
        return list(out[:n])

    def batch_get_into_parts(self, keys, all_ptrs, all_sizes):
        """Reads keys[i] into its registered ranges, in order, zero copy;
        per key the bytes read or a negative code."""
        lib, h = self._handle12()
        n, k, kl, p, s, c = self._parts_arrays(keys, all_ptrs, all_sizes)
        out = (ctypes.c_int64 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_get_into_parts(h, k, kl, p, s, c, n, out), "mc_store_batch_get_into_parts")
        return list(out[:n])

    def batch_get(self, keys, factory=None):
        """Per key a copy of its value, or its negative code. The copy is
        bytes, or factory(n) (a writable buffer of n bytes, e.g.
        bytearray) filled with the value when factory is given."""
        lib, h = self._handle12()
        if factory is None:
            lib13 = _library13()
            if lib13 is not None:
                return self._batch_get_bytes(lib13, h, keys)
        n, k, kl, _, _ = self._arrays(keys)
        bufs = (_Buf * max(n, 1))()
        out = (ctypes.c_int64 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_get(h, k, kl, n, bufs, out), "mc_store_batch_get")
        res = []
        for i in range(n):
            b = bufs[i]
            if out[i] >= 0 and factory is not None:
                v = factory(b.len)
                if b.len:
                    ctypes.memmove((ctypes.c_char * b.len).from_buffer(v), b.data, b.len)
                res.append(v)
            elif out[i] >= 0:
                res.append(ctypes.string_at(b.data, b.len) if b.len else b"")
            else:
                res.append(out[i])
            if b.data:
                lib.mc_buf_free(ctypes.byref(b))
        return res

    def _batch_get_bytes(self, lib, h, keys):
        """batch_get into bytes objects the library fills straight from
        the local buffer (mc_store_batch_get_alloc: one copy)."""
        n, k, kl, _, _ = self._arrays(keys)
        vals = [None] * n
        out = (ctypes.c_int64 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_get_alloc(h, k, kl, n, _alloc_bytes, vals, out), "mc_store_batch_get_alloc")
        res = []
        for i in range(n):
            r = out[i]
            if r < 0:
                res.append(r)
            elif vals[i] is None or r == 0:
                res.append(b"")
            else:
                res.append(vals[i] if r == len(vals[i]) else vals[i][:r])
        return res

    def batch_get_ranges(self, keys, dsts, offsets, sizes):
        """Reads bytes [offsets[i], +sizes[i]) of keys[i] into dsts[i]
        (registered memory); per entry sizes[i] or a negative code."""
        lib, h = self._handle12()
        keys, dsts, offsets, sizes = list(keys), list(dsts), list(offsets), list(sizes)
        n = len(keys)
        if not (len(dsts) == len(offsets) == len(sizes) == n):
            raise error_for(ERR_INVALID_ARGUMENT, "keys, dsts, offsets and sizes differ in length")
        _, k, kl, _, _ = self._arrays(keys)
        d = (_P * max(n, 1))(*[int(x) for x in dsts])
        o = (ctypes.c_uint64 * max(n, 1))(*[int(x) for x in offsets])
        s = (_S * max(n, 1))(*[int(x) for x in sizes])
        out = (ctypes.c_int64 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_get_ranges(h, k, kl, d, o, s, n, out), "mc_store_batch_get_ranges")
        return list(out[:n])

    def batch_remove(self, keys, force=False):
        """Deletes each key; one code per key."""
        lib, h = self._handle12()
        n, k, kl, _, _ = self._arrays(keys)
        out = (ctypes.c_int32 * max(n, 1))()
        self._check(lib, lib.mc_store_batch_remove(h, k, kl, n, 1 if force else 0, out), "mc_store_batch_remove")
        return list(out[:n])

    def remove_by_regex(self, regex, force=False):
        """Deletes the objects whose key matches regex (RE2); returns how many."""
        lib, h = self._handle12()
        out = ctypes.c_int64()
        expr = regex.encode("utf-8") if isinstance(regex, str) else bytes(regex)
        if b"\0" in expr:
            raise error_for(ERR_INVALID_ARGUMENT, "regex contains a NUL byte", "mc_store_remove_by_regex")
        self._check(lib, lib.mc_store_remove_by_regex(h, expr, 1 if force else 0, ctypes.byref(out)), "mc_store_remove_by_regex")
        return out.value

    def remove_all(self, force=False):
        """Deletes every complete object (leased ones with force); returns how many."""
        lib, h = self._handle12()
        out = ctypes.c_int64()
        self._check(lib, lib.mc_store_remove_all(h, 1 if force else 0, ctypes.byref(out)), "mc_store_remove_all")
        return out.value

    def replica_desc(self, keys):
        """Per key, in order, a dict {"code", "replicas": [{"status",
        "kind", "size", "segment", "address", "slices"}]} (store.h
        mc_store_get_replica_desc)."""
        lib, h = self._handle12()
        n, k, kl, _, _ = self._arrays(keys)
        buf = _Buf()
        self._check(lib, lib.mc_store_get_replica_desc(h, k, kl, n, ctypes.byref(buf)), "mc_store_get_replica_desc")
        try:
            text = ctypes.string_at(buf.data, buf.len) if buf.len else b"[]"
        finally:
            lib.mc_buf_free(ctypes.byref(buf))
        return json.loads(text)

    def health_check(self):
        """Pings the master; raises when it does not answer."""
        lib, h = self._handle12()
        self._check(lib, lib.mc_store_health_check(h), "mc_store_health_check")


def _code(f, *args, **kwargs):
    """Runs a raising Store method; returns its result, or the error's code."""
    try:
        return f(*args, **kwargs)
    except MooncakeError as e:
        return e.code


class MooncakeDistributedStore(Store):
    """Store with upstream Mooncake's return conventions (see the module
    docstring). Loader failures (LibraryLoadError) still raise."""

    def setup(self, *args, **kwargs):
        """0, or a negative code."""
        r = _code(super().setup, *args, **kwargs)
        return 0 if r is None else r

    def close(self):
        r = _code(super().close)
        return 0 if r is None else r

    def register_buffer(self, ptr, size):
        r = _code(super().register_buffer, ptr, size)
        return 0 if r is None else r

    def unregister_buffer(self, ptr):
        r = _code(super().unregister_buffer, ptr)
        return 0 if r is None else r

    def put(self, key, value, config=None):
        """0 or a negative code. config (ReplicateConfig) is accepted and ignored."""
        r = _code(super().put, key, value)
        return 0 if r is None else r

    def get(self, key):
        """The value, or b"" when it is missing or cannot be read."""
        r = _code(super().get, key)
        return b"" if isinstance(r, int) else r

    def get_size(self, key):
        """The size, or a negative code."""
        return _code(super().get_size, key)

    def put_from(self, key, ptr, size, config=None):
        r = _code(super().put_from, key, ptr, size)
        return 0 if r is None else r

    def get_into(self, key, ptr, size):
        """Bytes read, or a negative code."""
        return _code(super().get_into, key, ptr, size)

    def batch_put_from(self, keys, ptrs, sizes, config=None):
        r = _code(super().batch_put_from, keys, ptrs, sizes)
        return [r] * len(keys) if isinstance(r, int) else r

    def batch_get_into(self, keys, ptrs, sizes):
        r = _code(super().batch_get_into, keys, ptrs, sizes)
        return [r] * len(keys) if isinstance(r, int) else r

    def is_exist(self, key):
        """1, 0, or a negative code."""
        r = _code(super().is_exist, key)
        return int(r) if isinstance(r, bool) else r

    def batch_is_exist(self, keys):
        r = _code(super().batch_is_exist, keys)
        return [r] * len(keys) if isinstance(r, int) else r

    def remove(self, key, force=False):
        r = _code(super().remove, key, force)
        return 0 if r is None else r
