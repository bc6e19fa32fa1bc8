"""mooncake.engine: upstream Mooncake's TransferEngine Python API on
mooncake-go's libmooncake.so (transfer_engine.h, mc_te_*, through ctypes).

Code written for upstream's ``from mooncake.engine import TransferEngine``
runs unchanged: the same methods, arguments, defaults and return
conventions (0 / negative status ints, batch ids with 0 as the failure
sentinel, 0 for "no buffer"). The differences, each on purpose:

* The only transport is tcp. ``initialize(..., protocol, ...)`` accepts
  upstream's protocol names; anything but "tcp" logs one warning and uses
  tcp, as upstream's auto-discovery does on a machine without RDMA devices
  ("xgmi" returns -1, as upstream). ``transport_hint`` is accepted and
  ignored (as upstream builds without TENT).
* Metadata: HTTP (``http://host:port/metadata``), etcd (``etcd://h:2379``,
  bare ``h:2379``, ';' or ',' separated) and ``P2PHANDSHAKE``, as upstream.
  In P2PHANDSHAKE mode this engine's segment name is ``host:rpc_port``
  (``get_rpc_port()``), as upstream.
* Bad arguments that upstream would turn into a crash (an address of 0 for
  ``write_bytes_to_buffer``, a ``length`` past the end of the bytes given,
  an unknown batch id) raise ``ValueError`` or return the failure value;
  arguments of the wrong type raise ``TypeError`` (as pybind11 does).
  ``register_memory(0, n)`` returns -1 (upstream registers address 0).
* Methods upstream has that cannot be built here raise
  ``NotImplementedError("unsupported: ...")``: get_local_topology,
  get_engine, get_engine_ptr, the CUDA-stream transfers (absent, as in
  upstream's builds without CUDA) and the RPC/shared-segment classes.
* Notifications (``transfer_sync(..., notify=TransferNotify(...))``,
  ``get_notifies()``) travel over each engine's handshake endpoint in every
  metadata mode; the notification is sent once the transfer COMPLETED.

Importing this module loads nothing; the library (and a Go runtime) is
loaded by the first ``initialize``. Every method may be called from several
threads; transfers release the GIL while they wait.
"""

import ctypes
import enum
import json
import logging
import operator
import os
import threading
import time
import weakref

from mooncake_go import _lib

__all__ = [
    "TransferEngine",
    "TransferNotify",
    "TransferOpcode",
    "Read",
    "Write",
    "SUPPORT_CUDA",
    "SUPPORT_EFA",
    "SUPPORT_HIP",
    "SUPPORT_INTRA_NVLINK",
    "SUPPORT_MNNVL",
    "SUPPORT_MUSA",
]

_log = logging.getLogger("mooncake.engine")

# Build features, as upstream's module attributes: none of the device
# transports is built into mooncake-go's engine.
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_CUDA = False

TE_ABI_MAJOR = 1
TE_ABI_MINOR = 1  # mc_te_wait_batch, probes, notifications, buffer lists

# transfer_engine.h / common.h values (a test checks them against the headers).
_OK = 0
_ERR_INVALID_ARGUMENT = -1
_ERR_ADDRESS_NOT_REGISTERED = -3
_STATUS_WAITING = 0
_STATUS_COMPLETED = 4
_STATUS_FAILED = 6
_LOCAL_SEGMENT = 0

# Upstream's managed-buffer size classes: 8 KiB << k, k = 0..15 (8 KiB to
# 256 MiB); a larger request gets a mapping of its own.
_MIN_CLASS = 8 << 10
_NUM_CLASSES = 16
_MAX_CLASS = _MIN_CLASS << (_NUM_CLASSES - 1)
# Address space reserved (mapped lazily, MAP_NORESERVE) per refill of the
# largest class; registered with the engine as one buffer.
_ARENA = 1 << 30


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer (upstream TransferEngine.TransferOpcode)."""

    Read = 0
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification (upstream TransferNotify): name is conventionally the
    sender's segment name, msg free text."""

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other):
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)

    __hash__ = None


class _Request(ctypes.Structure):
    _fields_ = [
        ("opcode", ctypes.c_int),
        ("source", ctypes.c_void_p),
        ("target_id", ctypes.c_int32),
        ("target_offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
    ]


class _Status(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("transferred_bytes", ctypes.c_uint64)]


class _Buffer(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("length", ctypes.c_uint64)]


class _Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_H = ctypes.c_void_p
_PROTOS = {
    "mc_te_create": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(_H)]),
    "mc_te_destroy": (ctypes.c_int, [_H]),
    "mc_te_register_local_memory": (ctypes.c_int, [_H, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int]),
    "mc_te_unregister_local_memory": (ctypes.c_int, [_H, ctypes.c_void_p]),
    "mc_te_open_segment": (ctypes.c_int, [_H, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)]),
    "mc_te_close_segment": (ctypes.c_int, [_H, ctypes.c_int32]),
    "mc_te_allocate_batch": (ctypes.c_int, [_H, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]),
    "mc_te_submit": (ctypes.c_int, [_H, ctypes.c_uint64, ctypes.POINTER(_Request), ctypes.c_size_t]),
    "mc_te_free_batch": (ctypes.c_int, [_H, ctypes.c_uint64]),
    "mc_te_get_local_name": (ctypes.c_int, [_H, ctypes.POINTER(_Buf)]),
    "mc_te_get_rpc_port": (ctypes.c_int, [_H, ctypes.POINTER(ctypes.c_int32)]),
    "mc_te_refresh_segment": (ctypes.c_int, [_H, ctypes.c_int32]),
    "mc_te_get_segment_buffers": (ctypes.c_int, [_H, ctypes.c_int32, ctypes.POINTER(_Buffer), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "mc_te_wait_batch": (ctypes.c_int, [_H, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(_Status)]),
    "mc_te_probe": (ctypes.c_int, [_H, ctypes.c_char_p]),
    "mc_te_send_notify": (ctypes.c_int, [_H, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]),
    "mc_te_get_notifies": (ctypes.c_int, [_H, ctypes.POINTER(_Buf)]),
}


def _library():
    lib = _lib.require("mc_te_abi_version", TE_ABI_MAJOR, _PROTOS)
    minor = lib.mc_te_abi_version() & 0xFFFF
    if minor < TE_ABI_MINOR:
        raise _lib.LibraryLoadError(
            f"{_lib.loaded()}: mc_te_abi_version() is {TE_ABI_MAJOR}.{minor}, mooncake.engine needs "
            f"{TE_ABI_MAJOR}.{TE_ABI_MINOR} or later (install matching versions)",
            [_lib.loaded()],
            _lib.loaded(),
        )
    return lib


# libc, for the managed buffers' mappings.
_PROT_READ, _PROT_WRITE = 1, 2
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x02, 0x20, 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value
_libc = None


def _c():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    return _libc


def _map(n):
    """n bytes of fresh anonymous memory (zeroed, committed lazily) or 0."""
    p = _c().mmap(None, n, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if p is None or p == _MAP_FAILED:
        _log.error("allocate_managed_buffer: mmap of %d bytes failed: %s", n, os.strerror(ctypes.get_errno()))
        return 0
    return p


def _unmap(p, n):
    _c().munmap(p, n)


def _uint(what, v, bits=64):
    """v as a non-negative int below 2**bits; TypeError otherwise (as
    pybind11's size_t / uintptr_t conversion)."""
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None
    if i < 0 or i >> bits:
        raise TypeError(f"{what} = {i} is not an unsigned {bits}-bit integer")
    return i


def _uints(what, vs):
    try:
        items = list(vs)
    except TypeError:
        raise TypeError(f"{what} must be a list of ints, not {type(vs).__name__}") from None
    return [_uint(f"{what}[{i}]", v) for i, v in enumerate(items)]


def _text(what, s):
    """s as UTF-8 bytes for a const char* (str or bytes, no NUL)."""
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:
        raise TypeError(f"{what} must be str, not {type(s).__name__}")
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL character")
    return b


def _timeout_ns():
    """Sync transfer timeout (upstream MC_TRANSFER_TIMEOUT: seconds, at least
    5, default 30), to which every call adds 1 ns per byte."""
    v = os.environ.get("MC_TRANSFER_TIMEOUT")
    if v:
        try:
            return max(5, int(v)) * 1_000_000_000
        except ValueError:
            _log.warning("MC_TRANSFER_TIMEOUT=%r is not an integer: using 30 s", v)
    return 30 * 1_000_000_000


def _split_host(local_hostname):
    """(host, port) of "host", "host:port" or "[v6]:port" (port 0 when absent)."""
    s = local_hostname
    if s.startswith("["):
        host, _, rest = s[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif s.count(":") == 1:
        host, _, port = s.partition(":")
    else:
        host, port = s, ""
    try:
        p = int(port) if port else 0
    except ValueError:
        p = 0
    return host, p if 0 <= p <= 65535 else 0


class _Failed(Exception):
    """A transfer that could not be submitted or that failed; the message is
    logged and the method returns its failure value."""


class _State:
    """What a TransferEngine owns, kept apart from it so that the finalizer
    (weakref.finalize) releases it without keeping the engine alive."""

    def __init__(self):
        self.lock = threading.Lock()  # guards every field below
        self.lib = None
        self.h = None  # mc_te_engine_t*, None before initialize / after close
        self.name = ""
        self.segments = {}  # segment name -> id (upstream handle_map_)
        self.free = [[] for _ in range(_NUM_CLASSES)]  # free blocks per class
        self.used = {}  # address -> class index, or -size for a dedicated mapping
        self.arenas = []  # (address, size) of every mapping, registered
        self.zombies = set()  # batches given up on while still running: freed later
        self.deadlines = {}  # async batch id -> deadline (time.monotonic_ns)

    def close(self):
        """Destroys the engine, then unmaps the managed buffers (the engine
        no longer touches them)."""
        with self.lock:
            h, self.h = self.h, None
            arenas, self.arenas = self.arenas, []
            self.segments.clear()
            self.used.clear()
            self.free = [[] for _ in range(_NUM_CLASSES)]
        if h is not None and self.lib is not None:
            rc = self.lib.mc_te_destroy(h)
            if rc != _OK:
                _log.warning("TransferEngine: mc_te_destroy = %d: %s", rc, _lib.last_error(self.lib))
        for p, n in arenas:
            _unmap(p, n)


class TransferEngine:
    """A transfer engine in this process (upstream mooncake.engine.TransferEngine).

    Construct, then ``initialize(local_hostname, metadata_server, protocol,
    device_name)``; register memory (``register_memory``) or take managed
    buffers (``allocate_managed_buffer``); move bytes to and from a peer's
    registered memory by its segment name. The engine stops (its descriptor
    is withdrawn, its managed buffers unmapped) when the object is garbage
    collected or the interpreter exits.
    """

    TransferOpcode = TransferOpcode

    def __init__(self):
        self._s = _State()
        self._finalizer = weakref.finalize(self, _State.close, self._s)

    # ---- set-up -----------------------------------------------------------

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Starts the engine as segment local_hostname ("host" or "host:port";
        the port is ignored unless MC_LEGACY_RPC_PORT_BINDING is set, as
        upstream) publishing to metadata_server. Returns 0, or -1 (the
        reason is logged)."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "")

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name, metadata_type):
        """As initialize; a metadata_server without a scheme is prefixed with
        metadata_type + "://" ("etcd", "http", ...) unless it is
        P2PHANDSHAKE; an empty metadata_type keeps upstream's default (a
        bare host:port is etcd)."""
        local_hostname = _text("local_hostname", local_hostname).decode()
        metadata_server = _text("metadata_server", metadata_server).decode()
        protocol = _text("protocol", protocol).decode() if protocol is not None else "tcp"
        _text("device_name", device_name if device_name is not None else "")
        metadata_type = _text("metadata_type", metadata_type).decode() if metadata_type is not None else ""
        if protocol == "xgmi":
            _log.error("Protocol 'xgmi' is not exposed in the Python API. Use 'hip' instead.")
            return -1
        if protocol not in ("tcp", ""):
            _log.warning("protocol %r is not built into mooncake-go: this engine uses tcp", protocol)
        conn = metadata_server
        if metadata_type and conn != "P2PHANDSHAKE" and "://" not in conn:
            conn = f"{metadata_type}://{conn}"
        host, port = _split_host(local_hostname)
        if not os.environ.get("MC_LEGACY_RPC_PORT_BINDING"):
            port = 0
        try:
            lib = _library()
        except _lib.LibraryLoadError as e:
            _log.error("TransferEngine.initialize: %s", e)
            return -1
        s = self._s
        with s.lock:
            if s.h is not None:
                _log.error("TransferEngine.initialize: already initialized as %r", s.name)
                return -1
            h = _H()
            rc = lib.mc_te_create(conn.encode(), local_hostname.encode(), host.encode(), port, 1, ctypes.byref(h))
            if rc != _OK:
                _log.error("TransferEngine.initialize(%r, %r): %d: %s", local_hostname, metadata_server, rc, _lib.last_error(lib))
                return -1
            s.lib, s.h = lib, h
            buf = _Buf()
            if lib.mc_te_get_local_name(h, ctypes.byref(buf)) == _OK:
                s.name = ctypes.string_at(buf.data, buf.len).rstrip(b"\0").decode()
                lib.mc_buf_free(ctypes.byref(buf))
        return 0

    def _engine(self, fn):
        s = self._s
        if s.h is None:
            raise RuntimeError(f"TransferEngine.{fn}: the engine is not initialized (call initialize first)")
        return s.lib, s.h

    def get_rpc_port(self):
        """The port of this engine's handshake endpoint (in P2PHANDSHAKE mode
        the port of its segment name "host:port")."""
        lib, h = self._engine("get_rpc_port")
        port = ctypes.c_int32()
        if lib.mc_te_get_rpc_port(h, ctypes.byref(port)) != _OK:
            raise RuntimeError(f"TransferEngine.get_rpc_port: {_lib.last_error(lib)}")
        return port.value

    # ---- memory -----------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers [buffer_addr, buffer_addr+capacity) (the caller's
        memory, which must stay mapped until unregister_memory) so peers can
        read and write it. Returns 0 or a negative code."""
        addr = _uint("buffer_addr", buffer_addr)
        n = _uint("capacity", capacity)
        loc = _text("location", location)
        lib, h = self._engine("register_memory")
        rc = lib.mc_te_register_local_memory(h, addr, n, loc, 1)
        if rc != _OK:
            _log.error("register_memory(%#x, %d): %d: %s", addr, n, rc, _lib.last_error(lib))
        return rc

    def unregister_memory(self, buffer_addr):
        """Unregisters the buffer starting at buffer_addr. 0 or a negative code."""
        addr = _uint("buffer_addr", buffer_addr)
        lib, h = self._engine("unregister_memory")
        rc = lib.mc_te_unregister_local_memory(h, addr)
        if rc != _OK:
            _log.error("unregister_memory(%#x): %d: %s", addr, rc, _lib.last_error(lib))
        return rc

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """Registers every (address, capacity) pair; on a failure the ones
        this call registered are unregistered again and the code returned."""
        addrs = _uints("buffer_addresses", buffer_addresses)
        caps = _uints("capacities", capacities)
        if len(addrs) != len(caps):
            _log.error("batch_register_memory: %d addresses but %d capacities", len(addrs), len(caps))
            return _ERR_INVALID_ARGUMENT
        done = []
        for a, n in zip(addrs, caps):
            rc = self.register_memory(a, n, location)
            if rc != _OK:
                for d in reversed(done):
                    self.unregister_memory(d)
                return rc
            done.append(a)
        return _OK

    def batch_unregister_memory(self, buffer_addresses):
        """Unregisters every address; returns 0, or the first failure's code
        (the others are still unregistered)."""
        first = _OK
        for a in _uints("buffer_addresses", buffer_addresses):
            rc = self.unregister_memory(a)
            if rc != _OK and first == _OK:
                first = rc
        return first

    def allocate_managed_buffer(self, length):
        """A buffer of at least length bytes inside memory this engine
        registered (zeroed when fresh); its address, or 0 when out of
        memory. Sizes follow upstream's classes (8 KiB doubling up to
        256 MiB, carved from 1 GiB mappings); larger requests get a mapping
        of their own. Release it with free_managed_buffer(address, length)."""
        n = _uint("length", length)
        lib, h = self._engine("allocate_managed_buffer")
        s = self._s
        with s.lock:
            if n > _MAX_CLASS:
                size = -(-n // 4096) * 4096
                p = self._map_registered_locked(lib, h, size)
                if p:
                    s.used[p] = -size
                return p
            k = max(0, (max(n, 1) - 1).bit_length() - _MIN_CLASS.bit_length() + 1)
            if not self._refill_locked(lib, h, k):
                return 0
            p = s.free[k].pop()
            s.used[p] = k
            return p

    def _refill_locked(self, lib, h, k):
        """Makes sure class k has a free block, splitting larger ones and
        mapping a new arena as needed."""
        s = self._s
        j = k
        while j < _NUM_CLASSES and not s.free[j]:
            j += 1
        if j == _NUM_CLASSES:
            p = self._map_registered_locked(lib, h, _ARENA)
            if not p:
                return False
            top = _NUM_CLASSES - 1
            s.free[top].extend(reversed(range(p, p + _ARENA, _MAX_CLASS)))
            j = top
        while j > k:
            b = s.free[j].pop()
            j -= 1
            half = _MIN_CLASS << j
            s.free[j].extend((b + half, b))  # the lower half is taken first
        return True

    def _map_registered_locked(self, lib, h, size):
        p = _map(size)
        if not p:
            return 0
        rc = lib.mc_te_register_local_memory(h, p, size, b"*", 1)
        if rc != _OK:
            _log.error("allocate_managed_buffer: registering %d bytes: %d: %s", size, rc, _lib.last_error(lib))
            _unmap(p, size)
            return 0
        self._s.arenas.append((p, size))
        return p

    def free_managed_buffer(self, buffer_addr, length):
        """Returns a buffer from allocate_managed_buffer. 0, or -1 for an
        address that is not an allocated managed buffer."""
        addr = _uint("buffer_addr", buffer_addr)
        _uint("length", length)
        lib, h = self._engine("free_managed_buffer")
        s = self._s
        with s.lock:
            k = s.used.pop(addr, None)
            if k is None:
                _log.error("free_managed_buffer(%#x): not a buffer from allocate_managed_buffer (or freed already)", addr)
                return -1
            if k >= 0:
                s.free[k].append(addr)
                return 0
            size = -k
            s.arenas.remove((addr, size))
        lib.mc_te_unregister_local_memory(h, addr)
        _unmap(addr, size)
        return 0

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        """Copies the first length bytes of src_ptr (bytes-like, or str as
        UTF-8) to dest_address. Returns 0."""
        dest = _uint("dest_address", dest_address)
        n = _uint("length", length)
        if isinstance(src_ptr, str):
            src_ptr = src_ptr.encode("utf-8")
        try:
            src = memoryview(src_ptr).cast("B")
        except TypeError:
            raise TypeError(f"src_ptr must be bytes-like, not {type(src_ptr).__name__}") from None
        if n > len(src):
            raise ValueError(f"write_bytes_to_buffer: length {n} is more than the {len(src)} bytes of src_ptr")
        if n == 0:
            return 0
        if dest == 0:
            raise ValueError("write_bytes_to_buffer: dest_address is 0")
        if isinstance(src_ptr, bytes):
            ctypes.memmove(dest, src_ptr, n)  # ctypes passes the bytes' own buffer
        elif not src.readonly:
            ctypes.memmove(dest, (ctypes.c_char * len(src)).from_buffer(src), n)
        else:
            ctypes.memmove(dest, bytes(src[:n]), n)
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        """The length bytes at source_address, as bytes."""
        src = _uint("source_address", source_address)
        n = _uint("length", length)
        if n == 0:
            return b""
        if src == 0:
            raise ValueError("read_bytes_from_buffer: source_address is 0")
        return ctypes.string_at(src, n)

    # ---- segments ---------------------------------------------------------

    def _segment(self, lib, h, name):
        """The segment id of name, opened once and cached (upstream
        handle_map_); None, with the reason logged, when it cannot be opened."""
        s = self._s
        with s.lock:
            sid = s.segments.get(name)
        if sid is not None:
            return sid
        out = ctypes.c_int32()
        rc = lib.mc_te_open_segment(h, name.encode(), ctypes.byref(out))
        if rc != _OK:
            _log.error("open segment %r: %d: %s", name, rc, _lib.last_error(lib))
            return None
        with s.lock:
            s.segments[name] = out.value
        return out.value

    def _forget(self, lib, h, name):
        """Drops the cached segment (the next transfer re-opens it and reads
        its descriptor again), as upstream after a failed transfer."""
        s = self._s
        with s.lock:
            sid = s.segments.pop(name, None)
        if sid is not None and sid != _LOCAL_SEGMENT:
            lib.mc_te_close_segment(h, sid)

    def get_first_buffer_address(self, segment_name):
        """The address of the first buffer of segment segment_name (this
        engine's own name: its own first registered buffer), re-reading the
        peer's descriptor; 0 when the segment is unknown or has no buffer."""
        name = _text("segment_name", segment_name).decode()
        lib, h = self._engine("get_first_buffer_address")
        sid = self._segment(lib, h, name)
        if sid is None:
            return 0
        if sid != _LOCAL_SEGMENT and lib.mc_te_refresh_segment(h, sid) != _OK:
            _log.warning("get_first_buffer_address(%r): %s", name, _lib.last_error(lib))
            self._forget(lib, h, name)
            sid = self._segment(lib, h, name)
            if sid is None:
                return 0
        buf, count = _Buffer(), ctypes.c_size_t()
        if lib.mc_te_get_segment_buffers(h, sid, ctypes.byref(buf), 1, ctypes.byref(count)) != _OK:
            _log.error("get_first_buffer_address(%r): %s", name, _lib.last_error(lib))
            return 0
        return buf.addr if count.value else 0

    # ---- transfers --------------------------------------------------------

    def _reap_locked(self, lib, h):
        for b in list(self._s.zombies):
            if lib.mc_te_free_batch(h, b) == _OK:
                self._s.zombies.discard(b)

    def _submit(self, fn, target_hostname, buffers, peer_buffer_addresses, lengths, opcode):
        """Opens the target, allocates a batch and submits one request per
        (buffer, peer address, length). Returns (batch id, total bytes);
        raises _Failed."""
        target = _text("target_hostname", target_hostname).decode()
        bufs = _uints("buffers", buffers)
        peers = _uints("peer_buffer_addresses", peer_buffer_addresses)
        lens = _uints("lengths", lengths)
        op = _uint("opcode", opcode, 31)
        lib, h = self._engine(fn)
        if not len(bufs) == len(peers) == len(lens):
            raise _Failed(f"{fn}: buffers, peer_buffer_addresses and lengths have different sizes ({len(bufs)}, {len(peers)}, {len(lens)})")
        sid = self._segment(lib, h, target)
        if sid is None:
            raise _Failed(f"{fn}: cannot open segment {target!r}")
        with self._s.lock:
            self._reap_locked(lib, h)
        batch = ctypes.c_uint64()
        rc = lib.mc_te_allocate_batch(h, max(1, len(bufs)), ctypes.byref(batch))
        if rc != _OK:
            raise _Failed(f"{fn}: allocate batch: {rc}: {_lib.last_error(lib)}")
        if bufs:
            reqs = (_Request * len(bufs))()
            for i, (b, p, n) in enumerate(zip(bufs, peers, lens)):
                reqs[i].opcode, reqs[i].source, reqs[i].target_id = op, b or None, sid
                reqs[i].target_offset, reqs[i].length = p, n
            rc = lib.mc_te_submit(h, batch.value, reqs, len(bufs))
            if rc != _OK:
                msg = _lib.last_error(lib)
                lib.mc_te_free_batch(h, batch.value)
                raise _Failed(f"{fn}: submit to {target!r}: {rc}: {msg}")
        return batch.value, sum(lens)

    def _wait(self, lib, h, batch, deadline_ns):
        """Waits until deadline (time.monotonic_ns) for batch; returns
        (status, reason)."""
        st = _Status()
        left = max(0, deadline_ns - time.monotonic_ns())
        rc = lib.mc_te_wait_batch(h, batch, -(-left // 1_000_000), ctypes.byref(st))
        if rc != _OK:
            return None, f"{rc}: {_lib.last_error(lib)}"
        reason = _lib.last_error(lib) if st.status == _STATUS_FAILED else ""
        return st.status, reason

    def _release(self, lib, h, batch):
        """Frees batch, or keeps it to free later while it still runs."""
        with self._s.lock:
            self._s.deadlines.pop(batch, None)
            if lib.mc_te_free_batch(h, batch) != _OK:
                self._s.zombies.add(batch)

    def _sync(self, fn, target_hostname, buffers, peers, lengths, opcode, notify=None):
        for attempt in (0, 1):
            try:
                batch, total = self._submit(fn, target_hostname, buffers, peers, lengths, opcode)
            except _Failed as e:
                _log.error("%s", e)
                return -1
            lib, h = self._engine(fn)
            st, reason = self._wait(lib, h, batch, time.monotonic_ns() + _timeout_ns() + total)
            self._release(lib, h, batch)
            if st == _STATUS_COMPLETED:
                break
            if st == _STATUS_WAITING:
                _log.error("%s to %r: timed out (MC_TRANSFER_TIMEOUT)", fn, target_hostname)
                return -1
            # A peer that registered memory after we read its descriptor, or
            # that restarted: read it again and retry once, as upstream
            # retries on another path.
            self._forget(lib, h, target_hostname)
            if attempt == 1 or "not in a published buffer" not in reason:
                _log.error("%s to %r failed: %s", fn, target_hostname, reason)
                return -1
        if notify is not None:
            rc = self._notify(target_hostname, notify)
            if rc != _OK:
                return -1
        return 0

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Writes length bytes at local buffer (registered) to
        peer_buffer_address in target_hostname's registered memory and waits.
        0 on success, -1 on failure (reason logged)."""
        return self._sync("transfer_sync_write", target_hostname, [buffer], [peer_buffer_address], [length], Write)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Reads length bytes at peer_buffer_address of target_hostname into
        local buffer and waits. 0 or -1."""
        return self._sync("transfer_sync_read", target_hostname, [buffer], [peer_buffer_address], [length], Read)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify=None, transport_hint=""):
        """transfer_sync_read/write by opcode; with notify, the notification
        is delivered to the target once the transfer completed. 0 or -1."""
        return self._sync("transfer_sync", target_hostname, [buffer], [peer_buffer_address], [length], opcode, notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """One write per (buffer, peer address, length), all in one batch;
        waits for all. 0 or -1."""
        return self._sync("batch_transfer_sync_write", target_hostname, buffers, peer_buffer_addresses, lengths, Write)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """One read per (buffer, peer address, length); waits for all. 0 or -1."""
        return self._sync("batch_transfer_sync_read", target_hostname, buffers, peer_buffer_addresses, lengths, Read)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify=None, transport_hint=""):
        """batch_transfer_sync_read/write by opcode, with an optional
        notification after completion. 0 or -1."""
        return self._sync("batch_transfer_sync", target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify)

    def _async(self, fn, target_hostname, buffers, peers, lengths, opcode):
        try:
            batch, total = self._submit(fn, target_hostname, buffers, peers, lengths, opcode)
        except _Failed as e:
            _log.error("%s", e)
            return 0
        with self._s.lock:
            self._s.deadlines[batch] = time.monotonic_ns() + _timeout_ns() + total
        return batch

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """Submits the writes and returns their batch id at once (0 on
        failure); wait with get_batch_transfer_status([id])."""
        return self._async("batch_transfer_async_write", target_hostname, buffers, peer_buffer_addresses, lengths, Write)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """Submits the reads and returns their batch id (0 on failure)."""
        return self._async("batch_transfer_async_read", target_hostname, buffers, peer_buffer_addresses, lengths, Read)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, transport_hint=""):
        """batch_transfer_async_read/write by opcode."""
        return self._async("batch_transfer_async", target_hostname, buffers, peer_buffer_addresses, lengths, opcode)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Submits one write and returns its batch id (0 on failure); poll it
        with transfer_check_status."""
        return self._async("transfer_submit_write", target_hostname, [buffer], [peer_buffer_address], [length], Write)

    def _deadline(self, batch):
        with self._s.lock:
            return self._s.deadlines.get(batch)

    def get_batch_transfer_status(self, batch_ids):
        """Waits for every batch of batch_ids (from the async calls) and frees
        them. 0 when all completed; -1 when one failed, timed out or is not a
        batch of this engine (the rest are then given up)."""
        ids = _uints("batch_ids", batch_ids)
        lib, h = self._engine("get_batch_transfer_status")
        pending = list(dict.fromkeys(ids))
        failed = False
        while pending and not failed:
            b = pending.pop(0)
            deadline = self._deadline(b)
            if deadline is None:
                _log.error("get_batch_transfer_status: %d is not a pending batch of this engine", b)
                failed = True
                break
            st, reason = self._wait(lib, h, b, deadline)
            if st == _STATUS_COMPLETED:
                self._release(lib, h, b)
                continue
            failed = True
            if st == _STATUS_WAITING:
                _log.error("get_batch_transfer_status: batch %d timed out", b)
            else:
                _log.error("get_batch_transfer_status: batch %d failed: %s", b, reason)
            pending.insert(0, b)
        if failed:
            for b in pending:
                if self._deadline(b) is not None:
                    self._release(lib, h, b)
            return -1
        return 0

    def transfer_check_status(self, batch_id):
        """State of a batch from transfer_submit_write: 1 completed (freed),
        -1 failed (freed) or unknown, 0 still running, -2 running past its
        deadline."""
        b = _uint("batch_id", batch_id)
        lib, h = self._engine("transfer_check_status")
        deadline = self._deadline(b)
        if deadline is None:
            _log.error("transfer_check_status: %d is not a pending batch of this engine", b)
            return -1
        st = _Status()
        rc = lib.mc_te_wait_batch(h, b, 0, ctypes.byref(st))
        if rc != _OK:
            _log.error("transfer_check_status(%d): %d: %s", b, rc, _lib.last_error(lib))
            return -1
        if st.status == _STATUS_COMPLETED:
            self._release(lib, h, b)
            return 1
        if st.status == _STATUS_FAILED:
            _log.error("transfer_check_status(%d): %s", b, _lib.last_error(lib))
            self._release(lib, h, b)
            return -1
        return -2 if time.monotonic_ns() > deadline else 0

    # ---- handshake: probes and notifications ------------------------------

    def _notify(self, target_hostname, notify):
        if not isinstance(notify, TransferNotify):
            raise TypeError(f"notify must be a TransferNotify, not {type(notify).__name__}")
        lib, h = self._engine("transfer_sync")
        rc = lib.mc_te_send_notify(h, _text("target_hostname", target_hostname), _text("notify.name", notify.name), _text("notify.msg", notify.msg))
        if rc != _OK:
            _log.error("notify %r: %d: %s", target_hostname, rc, _lib.last_error(lib))
        return rc

    def get_notifies(self):
        """The notifications received since the last call, oldest first, as
        a list of TransferNotify."""
        lib, h = self._engine("get_notifies")
        buf = _Buf()
        rc = lib.mc_te_get_notifies(h, ctypes.byref(buf))
        if rc != _OK:
            _log.error("Failed to get notifies: %d: %s", rc, _lib.last_error(lib))
            return []
        try:
            items = json.loads(ctypes.string_at(buf.data, buf.len)) if buf.len else []
        finally:
            lib.mc_buf_free(ctypes.byref(buf))
        return [TransferNotify(n.get("name", ""), n.get("notify_msg", "")) for n in items]

    def send_probe(self, peer_server_name):
        """0 when the engine published as peer_server_name answers a probe on
        its handshake endpoint, else a negative code."""
        name = _text("peer_server_name", peer_server_name)
        lib, h = self._engine("send_probe")
        rc = lib.mc_te_probe(h, name)
        if rc != _OK:
            _log.warning("send_probe(%r): %d: %s", peer_server_name, rc, _lib.last_error(lib))
        return rc

    def warmup_efa_segment(self, segment_name):
        """No-op returning 0, as upstream's builds without the EFA transport."""
        _text("segment_name", segment_name)
        return 0

    # ---- not built ----------------------------------------------------------

    def get_local_topology(self, device_name=None):
        raise NotImplementedError("unsupported: TransferEngine.get_local_topology: mooncake-go has no RDMA topology to report (run `mooncake info` for its CPU/NUMA/GPU view)")

    def get_engine(self):
        raise NotImplementedError("unsupported: TransferEngine.get_engine: mooncake-go's engine is not a C++ mooncake::TransferEngine object")

    def get_engine_ptr(self):
        raise NotImplementedError("unsupported: TransferEngine.get_engine_ptr: mooncake-go's engine is not a C++ mooncake::TransferEngine object")


def _unsupported(name, why):
    """A class of upstream's module that mooncake-go does not build: using it
    raises NotImplementedError("unsupported: ...")."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"unsupported: mooncake.engine.{name}: {why}")

    return type(name, (), {"__init__": __init__, "__doc__": f"Not built into mooncake-go: {why}."})


_RPC = "upstream's coro_rpc tensor RPC is not part of mooncake-go"
InnerTransferEngine = _unsupported("InnerTransferEngine", "mooncake-go's engine is not a C++ object")
RpcInterface = _unsupported("RpcInterface", _RPC)
CoroRPCInterface = RpcInterface
ReceivedData = _unsupported("ReceivedData", _RPC)
ReceivedTensor = _unsupported("ReceivedTensor", _RPC)
SharedSegment = _unsupported("SharedSegment", "upstream's shared-memory segment binding is not part of mooncake-go")


def create_rpc_client(*args, **kwargs):
    raise NotImplementedError(f"unsupported: mooncake.engine.create_rpc_client: {_RPC}")


def create_rpc_server(*args, **kwargs):
    raise NotImplementedError(f"unsupported: mooncake.engine.create_rpc_server: {_RPC}")
