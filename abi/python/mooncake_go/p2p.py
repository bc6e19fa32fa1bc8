"""The P2P Store of libmooncake.so (mooncake/p2p.h, mc_p2p_*): upstream
mooncake-p2p-store's operations for Python, e.g. a trainer publishing its
torch tensors as a checkpoint that other nodes fetch peer to peer.

    store = P2PStore("127.0.0.1:2379", "trainer-0")
    store.register("ckpt/step-100", [t for t in model.state_dict().values()])
    ...
    peer = P2PStore("127.0.0.1:2379")
    dst = [torch.empty_like(t) for t in ...]          # same byte sizes, in order
    peer.get_replica("ckpt/step-100", dst)             # fetched, verified, then served
    peer.delete_replica("ckpt/step-100")

A buffer is anything with data_ptr() (a CPU torch tensor: its nbytes, or
numel() * element_size(), bytes), an object supporting the writable buffer
protocol (bytearray, a numpy array, a mmap), or an (address, size) tuple of
ints. The memory stays the caller's but peers read it until unregister /
delete_replica / close: keep it alive and unmodified until then (the store
keeps a reference to the objects it was given meanwhile). Tensors must be
contiguous host memory.

Every failure raises MooncakeError (errors.py) with the library's code;
the P2P codes are P2P_ERR_* below (p2p.h), plus ERR_NOT_FOUND (no such
object), ERR_METADATA (etcd unreachable), ERR_INVALID_ARGUMENT. The library
is loaded by the constructor, not at import. Calls block (get_replica until
the object landed) and release the GIL.
"""

import ctypes
import json
import threading

from . import _lib
from .errors import ERR_INVALID_ARGUMENT, error_for

P2P_ABI_MAJOR = 1

# p2p.h
P2P_ERR_EXISTS = -3500
P2P_ERR_OPENED = -3501
P2P_ERR_NOT_OPENED = -3502
P2P_ERR_NO_HOLDER = -3503
P2P_ERR_SIZE = -3504


class _Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_H = ctypes.c_void_p
_STR = ctypes.c_char_p
_ADDRS = ctypes.POINTER(ctypes.c_void_p)
_SIZES = ctypes.POINTER(ctypes.c_uint64)
_PROTOS = {
    "mc_p2p_create": (ctypes.c_int, [_STR, _STR, ctypes.POINTER(_H)]),
    "mc_p2p_destroy": (ctypes.c_int, [_H]),
    "mc_p2p_register": (ctypes.c_int, [_H, _STR, _ADDRS, _SIZES, ctypes.c_size_t, ctypes.c_uint64, _STR]),
    "mc_p2p_unregister": (ctypes.c_int, [_H, _STR]),
    "mc_p2p_get_replica": (ctypes.c_int, [_H, _STR, _ADDRS, _SIZES, ctypes.c_size_t]),
    "mc_p2p_delete_replica": (ctypes.c_int, [_H, _STR]),
    "mc_p2p_list": (ctypes.c_int, [_H, _STR, ctypes.POINTER(_Buf)]),
}


def _span(obj, writable):
    """(address, size, keepalive) of one buffer."""
    if isinstance(obj, tuple) and len(obj) == 2 and all(isinstance(v, int) for v in obj):
        return obj[0], obj[1], None
    if hasattr(obj, "data_ptr"):
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise error_for(ERR_INVALID_ARGUMENT, "tensor is not contiguous")
        if getattr(getattr(obj, "device", None), "type", "cpu") != "cpu":
            raise error_for(ERR_INVALID_ARGUMENT, f"tensor is on {obj.device}: only host memory is supported")
        n = obj.nbytes if hasattr(obj, "nbytes") else obj.numel() * obj.element_size()
        return obj.data_ptr(), n, obj
    try:
        view = memoryview(obj)
    except TypeError:
        raise error_for(ERR_INVALID_ARGUMENT, f"{type(obj).__name__} is not a buffer (want a tensor, a buffer or (address, size))") from None
    if not view.contiguous:
        raise error_for(ERR_INVALID_ARGUMENT, "buffer is not contiguous")
    if view.readonly:
        if writable:
            raise error_for(ERR_INVALID_ARGUMENT, "get_replica needs writable buffers")
        # Read-only memory (bytes) cannot be exported writable to ctypes:
        # it is registered through a copy (use a bytearray or a tensor to
        # avoid it).
        arr = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        return ctypes.addressof(arr), view.nbytes, arr
    arr = (ctypes.c_char * view.nbytes).from_buffer(view)
    return ctypes.addressof(arr), view.nbytes, (arr, view)


def _spans(buffers, writable):
    if not buffers:
        raise error_for(ERR_INVALID_ARGUMENT, "no buffers")
    spans = [_span(b, writable) for b in buffers]
    addrs = (ctypes.c_void_p * len(spans))(*[a for a, _, _ in spans])
    sizes = (ctypes.c_uint64 * len(spans))(*[n for _, n, _ in spans])
    return addrs, sizes, [k for _, _, k in spans]


class P2PStore:
    """One node of the P2P store (upstream P2PStore): an etcd session and a
    transfer engine. metadata_uri is an etcd endpoint list
    ("h1:2379,h2:2379"), local_segment_name this node's unique name (None:
    generated)."""

    def __init__(self, metadata_uri, local_segment_name=None):
        self._lib = _lib.require("mc_p2p_abi_version", P2P_ABI_MAJOR, _PROTOS)
        h = _H()
        name = local_segment_name.encode() if local_segment_name else None
        self._check(self._lib.mc_p2p_create(metadata_uri.encode(), name, ctypes.byref(h)), "mc_p2p_create")
        self._h = h
        self._mu = threading.Lock()
        self._keep = {}  # name -> objects whose memory peers may read

    def _check(self, rc, call):
        if rc != 0:
            raise error_for(rc, _lib.last_error(self._lib), call)

    def register(self, name, buffers, max_shard_size=0, location="cpu:0"):
        """Publish buffers as object name without copying (upstream Register);
        max_shard_size 0 means 64 MiB."""
        addrs, sizes, keep = _spans(buffers, writable=False)
        self._check(
            self._lib.mc_p2p_register(self._h, name.encode(), addrs, sizes, len(keep), max_shard_size, location.encode()),
            "mc_p2p_register",
        )
        with self._mu:
            self._keep[name] = keep

    def unregister(self, name):
        """Stop serving an object this node registered (upstream Unregister)."""
        self._check(self._lib.mc_p2p_unregister(self._h, name.encode()), "mc_p2p_unregister")
        with self._mu:
            self._keep.pop(name, None)

    def get_replica(self, name, buffers):
        """Fetch object name into buffers (sizes as the object's), then serve it."""
        addrs, sizes, keep = _spans(buffers, writable=True)
        self._check(self._lib.mc_p2p_get_replica(self._h, name.encode(), addrs, sizes, len(keep)), "mc_p2p_get_replica")
        with self._mu:
            self._keep[name] = keep

    def delete_replica(self, name):
        """Stop serving an object this node fetched (upstream DeleteReplica)."""
        self._check(self._lib.mc_p2p_delete_replica(self._h, name.encode()), "mc_p2p_delete_replica")
        with self._mu:
            self._keep.pop(name, None)

    def list(self, prefix=""):
        """Objects whose name starts with prefix: dicts with name, total_size,
        max_shard_size, size_list, shards, holders, origin (sizes in bytes)."""
        buf = _Buf()
        self._check(self._lib.mc_p2p_list(self._h, prefix.encode(), ctypes.byref(buf)), "mc_p2p_list")
        try:
            return json.loads(ctypes.string_at(buf.data, buf.len)) if buf.len else []
        finally:
            self._lib.mc_buf_free(ctypes.byref(buf))

    def close(self):
        """Stop serving everything; buffers are the caller's again. Idempotent."""
        h, self._h = self._h, None
        if h:
            self._check(self._lib.mc_p2p_destroy(h), "mc_p2p_destroy")
        with self._mu:
            self._keep.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
