"""mooncake.store: upstream Mooncake's store module, on mooncake-go.

The names upstream's pybind module `mooncake.store` exports, with its
signatures and return conventions (status ints: 0 or upstream's negative
ErrorCode; get() -> b"" on a miss; get_buffer() -> None; batch calls ->
lists), so integrations written for upstream (SGLang's Mooncake HiCache
backend, LMCache's mooncakestore://, vLLM's MooncakeStoreConnector, ...)
run unchanged on a mooncake-go pool (`mooncake master`, `mooncake node`).
Calls go to libmooncake.so's store C ABI (mooncake/store.h) through the
mooncake_go package's loader; nothing is loaded at import.

Where mooncake-go's own code differs from upstream's ErrorCode values
(store.h: NO_AVAILABLE_HANDLE is -1200 there, a bad argument -1, ...) this
module returns upstream's value (-200, -600, ...), so checks such as
`ret == -200` or `ret == -706` keep working. Upstream methods that are not
built raise NotImplementedError("unsupported: <name> ..."); the README's
"Drop-in for upstream Mooncake" section lists every method with its state.

Behaviour kept from upstream (read from its source and checked against
its wheel, mooncake-transfer-engine-non-cuda 0.3.13.post1, on tcp):

* put of an existing key returns 0 and keeps the stored value; upsert
  replaces it.
* A read (get, get_into, get_size, is_exist, get_replica_desc, ...) grants
  the key a lease; remove() of a leased key returns -706 unless
  force=True; remove_all() skips leased objects unless force=True and
  returns how many it removed.
* Zero-size values: put(b"") and batch_put_from with a 0 size are -600;
  put_from(key, ptr, 0) and put_parts() of no bytes are no-op successes.
* Buffers not registered with register_buffer still work with put_from,
  get_into and their batch and multi-buffer forms (as upstream's tcp
  transport allows), staged through the client's local buffer;
  get_into_ranges needs registered buffers (as upstream).
* Calls before setup() or after close() return -600 (None / b"" / [-600]
  for the calls that return objects) instead of crashing.
"""

import ctypes
import enum
import logging
import mmap
import os
import threading

from mooncake_go import _lib as _mc_lib
from mooncake_go import errors as _errors
from mooncake_go.errors import MooncakeError
from mooncake_go.store import PutConfig, Store

__all__ = [
    "BufferHandle",
    "Descriptor",
    "DiskDescriptor",
    "MemoryDescriptor",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "ObjectDataType",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "ReplicateConfig",
    "SoftPinAction",
    "TaskStatus",
    "TaskType",
    "bind_to_numa_node",
]

_log = logging.getLogger("mooncake.store")

# Upstream ErrorCode values this module returns (mooncake-store types.h).
OK = 0
INTERNAL_ERROR = -1
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
NOT_SUPPORTED = -1012

# Upstream's defaults (types.h) and limits.
DEFAULT_GLOBAL_SEGMENT_SIZE = 16 << 20
DEFAULT_LOCAL_BUFFER_SIZE = 16 << 20
MIN_SEGMENT_SIZE = 1024
MAX_SEGMENT_SIZE = 1 << 40
DEFAULT_MASTER_SERVER_ADDR = "127.0.0.1:50051"
DEFAULT_CLIENT_HTTP_PORT = 9300
_U64 = 1 << 64

# mooncake-go status codes -> upstream's. Store codes equal to upstream's
# pass through; the ones store.h moved (-1101.. -1200) go back; the ABI
# layer's own codes become the upstream code for the same situation.
_TO_UPSTREAM = {
    _errors.ERR_INVALID_ARGUMENT: INVALID_PARAMS,
    _errors.ERR_ADDRESS_NOT_REGISTERED: INVALID_PARAMS,
    _errors.ERR_ADDRESS_OVERLAPPED: INVALID_PARAMS,
    _errors.ERR_INVALID_HANDLE: INVALID_PARAMS,
    _errors.ERR_CLOSED: INVALID_PARAMS,
    _errors.STORE_ERR_BUFFER_OVERFLOW: INVALID_PARAMS,
    _errors.ERR_UNSUPPORTED: NOT_SUPPORTED,
    _errors.ERR_TIMEOUT: -901,
    _errors.ERR_NOT_FOUND: OBJECT_NOT_FOUND,
    _errors.STORE_ERR_SEGMENT_NOT_FOUND: -101,
    _errors.STORE_ERR_SEGMENT_ALREADY_EXISTS: -102,
    _errors.STORE_ERR_CLIENT_NOT_FOUND: -103,
    _errors.STORE_ERR_NO_AVAILABLE_HANDLE: -200,
}
_STORE_CODES = {
    v for k, v in vars(_errors).items() if k.startswith("STORE_ERR_") and isinstance(v, int)
} - set(_TO_UPSTREAM)


def _upstream(code):
    """Upstream's ErrorCode value for a mooncake-go status code."""
    if code >= 0:
        return code
    if code in _TO_UPSTREAM:
        return _TO_UPSTREAM[code]
    if code in _STORE_CODES:
        return code
    return INTERNAL_ERROR  # socket, DNS, metadata, memory, internal ...


def _unsupported(what, why="not implemented by mooncake-go"):
    return NotImplementedError(f"unsupported: {what}: {why}")


# -- sizes --------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def parse_size(text):
    """Bytes of a size as upstream's config dict takes it: an int, or a
    string of a number (decimals allowed) and an optional unit B, K/KB,
    M/MB, G/GB, T/TB (powers of 1024, any case, spaces allowed; KiB/MiB/
    GiB/TiB also accepted here) or "infinite". Returns None for anything
    else (negative, "50%", ...)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 else None
    s = str(text).strip()
    if not s:
        return None
    if s == "infinite":
        return _U64 - 1
    i = 0
    while i < len(s) and (s[i].isdigit() or s[i] in ".+-eE"):
        if s[i] in "eE" and not (i + 1 < len(s) and (s[i + 1].isdigit() or s[i + 1] in "+-")):
            break
        i += 1
    try:
        value = float(s[:i])
    except ValueError:
        return None
    if value < 0 or value != value:
        return None
    unit = s[i:].strip().upper()
    if unit not in _UNITS:
        return None
    return int(value * _UNITS[unit])


def _parse_bool(text, default):
    s = str(text).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    _log.warning("invalid boolean %r, using %s", text, default)
    return default


# -- enums and value classes --------------------------------------------------


class _Enum(enum.IntEnum):
    """An int enum that prints as upstream's pybind enums do
    (str: "SoftPinAction.ENABLE"; repr: "<SoftPinAction.ENABLE: 1>")."""

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"


class SoftPinAction(_Enum):
    """What a put or upsert does to the object's soft pin (upstream
    SoftPinAction): PRESERVE keeps the existing state (a new object is not
    soft-pinned), ENABLE soft-pins it, DISABLE removes the pin."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicaStatus(_Enum):
    """A replica's state (upstream ReplicaStatus)."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class ObjectDataType(_Enum):
    """Object classification (upstream ObjectDataType); accepted in
    ReplicateConfig.data_type and not used by mooncake-go."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class TaskType(_Enum):
    """Replica copy/move task kinds (upstream TaskType); the task calls are unsupported."""

    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(_Enum):
    """Task states (upstream TaskStatus); the task calls are unsupported."""

    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3



# Codes that answer a question rather than report a fault: not logged at
# ERROR by _call.
_QUIET_CODES = frozenset({OBJECT_NOT_FOUND, OBJECT_HAS_LEASE})


def _key_list(keys):
    """keys as a list, each a str or bytes-like key; a str or bytes passed
    where a list of keys belongs, or a key of another type, raises
    TypeError as upstream's bindings do (they would otherwise be taken
    character by character, or dropped)."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"keys must be a list of str or bytes, not a single {type(keys).__name__}")
    out = list(keys)
    for i, k in enumerate(out):
        if not isinstance(k, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"keys[{i}] must be str or bytes, not {type(k).__name__}")
    return out

def _uint(name, v, bits=64):
    """v as an unsigned int of bits bits, or TypeError (upstream's pybind
    casters refuse negative numbers, floats and strings the same way)."""
    if not isinstance(v, int) or v < 0 or v >= 1 << bits:
        raise TypeError(f"{name}: expected an unsigned {bits}-bit int, got {v!r}")
    return int(v)


def _flag(name, v):
    if not isinstance(v, (bool, int)):
        raise TypeError(f"{name}: expected bool, got {v!r}")
    return bool(v)


def _strings(name, v):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError(f"{name}: expected a list of str, got {v!r}")
    out = list(v)
    for x in out:
        if not isinstance(x, str):
            raise TypeError(f"{name}: expected a list of str, got an element {x!r}")
    return out


class ReplicateConfig:
    """Replication settings of a put (upstream ReplicateConfig).

    replica_num (default 1; 0 is refused by puts with -600), with_hard_pin
    (never evicted), soft_pin_action (SoftPinAction), soft_pin_ttl_ms (None
    or an unsigned 64-bit int; only with SoftPinAction.ENABLE, else puts
    return -600; mooncake-go's master applies its own soft-pin TTL,
    `mooncake master --default_kv_soft_pin_ttl`, so the value is checked
    and not used), preferred_segment / preferred_segments (segment names
    tried first), prefer_alloc_in_same_node (refused with -600, as
    upstream's put does), nof_replica_num / dfs_replica_num /
    preferred_nof_segments (NVMe-oF and DFS tiers: not built; non-zero
    values make puts return -600), data_type and group_ids (accepted, not
    used). with_soft_pin (upstream 0.3.x's bool) is kept as an alias of
    soft_pin_action == ENABLE.
    """

    __slots__ = ("_replica_num", "_nof_replica_num", "_dfs_replica_num", "_soft_pin_action", "_soft_pin_ttl_ms",
                 "_with_hard_pin", "_preferred_segments", "_preferred_nof_segments", "_preferred_segment",
                 "_prefer_alloc_in_same_node", "_data_type", "_group_ids")

    def __init__(self):
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms = None
        self._with_hard_pin = False
        self._preferred_segments = []
        self._preferred_nof_segments = []
        self._preferred_segment = ""
        self._prefer_alloc_in_same_node = False
        self._data_type = ObjectDataType.UNKNOWN
        self._group_ids = None

    @property
    def replica_num(self):
        return self._replica_num

    @replica_num.setter
    def replica_num(self, v):
        self._replica_num = _uint("replica_num", v)

    @property
    def nof_replica_num(self):
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, v):
        self._nof_replica_num = _uint("nof_replica_num", v)

    @property
    def dfs_replica_num(self):
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, v):
        self._dfs_replica_num = _uint("dfs_replica_num", v)

    @property
    def soft_pin_action(self):
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        if not isinstance(v, SoftPinAction):
            raise TypeError(f"soft_pin_action: expected SoftPinAction, got {v!r}")
        self._soft_pin_action = v

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v):
        self._soft_pin_ttl_ms = None if v is None else _uint("soft_pin_ttl_ms", v)

    @property
    def with_hard_pin(self):
        return self._with_hard_pin

    @with_hard_pin.setter
    def with_hard_pin(self, v):
        self._with_hard_pin = _flag("with_hard_pin", v)

    @property
    def with_soft_pin(self):
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v):
        self._soft_pin_action = SoftPinAction.ENABLE if _flag("with_soft_pin", v) else SoftPinAction.PRESERVE

    @property
    def preferred_segments(self):
        return list(self._preferred_segments)

    @preferred_segments.setter
    def preferred_segments(self, v):
        self._preferred_segments = _strings("preferred_segments", v)

    @property
    def preferred_nof_segments(self):
        return list(self._preferred_nof_segments)

    @preferred_nof_segments.setter
    def preferred_nof_segments(self, v):
        self._preferred_nof_segments = _strings("preferred_nof_segments", v)

    @property
    def preferred_segment(self):
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, v):
        if not isinstance(v, str):
            raise TypeError(f"preferred_segment: expected str, got {v!r}")
        self._preferred_segment = v

    @property
    def prefer_alloc_in_same_node(self):
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, v):
        self._prefer_alloc_in_same_node = _flag("prefer_alloc_in_same_node", v)

    @property
    def data_type(self):
        return self._data_type

    @data_type.setter
    def data_type(self, v):
        if not isinstance(v, ObjectDataType):
            raise TypeError(f"data_type: expected ObjectDataType, got {v!r}")
        self._data_type = v

    @property
    def group_ids(self):
        return None if self._group_ids is None else list(self._group_ids)

    @group_ids.setter
    def group_ids(self, v):
        self._group_ids = None if v is None else _strings("group_ids", v)

    def __str__(self):
        ttl = "default" if self._soft_pin_ttl_ms is None else str(self._soft_pin_ttl_ms)
        return (
            f"ReplicateConfig: {{ replica_num: {self._replica_num}, nof_replica_num: {self._nof_replica_num}, "
            f"dfs_replica_num: {self._dfs_replica_num}, soft_pin_action: {self._soft_pin_action.name}, "
            f"soft_pin_ttl_ms: {ttl}, with_hard_pin: {int(self._with_hard_pin)}, "
            f"preferred_segments: [{', '.join(self._preferred_segments)}], "
            f"preferred_nof_segments: [{', '.join(self._preferred_nof_segments)}], "
            f"prefer_alloc_in_same_node: {int(self._prefer_alloc_in_same_node)}, data_type: {self._data_type.name} }}"
        )

    def __repr__(self):
        return f"<mooncake.store.ReplicateConfig {self}>"

    def _for_put(self, upsert=False):
        """(PutConfig or None, 0) for the C ABI, or (None, -600) when the
        settings are refused, as upstream's put/upsert refuses them."""
        if self._replica_num == 0 or self._nof_replica_num or self._dfs_replica_num or self._prefer_alloc_in_same_node:
            return None, INVALID_PARAMS
        if self._soft_pin_ttl_ms is not None and self._soft_pin_action != SoftPinAction.ENABLE:
            return None, INVALID_PARAMS
        segs = ([self._preferred_segment] if self._preferred_segment else []) + self._preferred_segments
        soft = self._soft_pin_action == SoftPinAction.ENABLE
        if self._replica_num == 1 and not self._with_hard_pin and not soft and not segs:
            return None, OK
        return PutConfig(self._replica_num, self._with_hard_pin, soft, segs), OK


_DEFAULT_CONFIG = ReplicateConfig()


def _put_config(config, upsert=False):
    if config is None:
        return None, OK
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"config: expected mooncake.store.ReplicateConfig, got {type(config).__name__}")
    return config._for_put(upsert)


class BufferHandle(bytearray):
    """A copy of a value (upstream BufferHandle, from get_buffer): a
    bytearray, so it has the buffer protocol, len() and bytes(); ptr() is
    the address of its first byte (valid while the handle is alive and not
    resized) and size() its length."""

    def ptr(self):
        if len(self) == 0:
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self):
        return len(self)


class Descriptor:
    """Where a memory replica's bytes live (upstream
    AllocatedBuffer::Descriptor): size, buffer_address (in the segment
    owner's process), transport_endpoint (the segment's name)."""

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return f"<Descriptor size={self.size} buffer_address={self.buffer_address} transport_endpoint={self.transport_endpoint}>"


class MemoryDescriptor:
    """A memory replica (upstream MemoryDescriptor): buffer_descriptor
    (Descriptor). slices (ours) lists a striped replica's pieces, in value
    order, as Descriptors; one entry for an unstriped one."""

    def __init__(self, buffer_descriptor, slices=()):
        self.buffer_descriptor = buffer_descriptor
        self.slices = list(slices)


class DiskDescriptor:
    """A disk replica (upstream DiskDescriptor): file_path, object_size.
    mooncake-go's disk tier does not expose file paths (""), only the size."""

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object (upstream ReplicaDescriptor): status
    (ReplicaStatus), is_memory_replica(), is_disk_replica(),
    is_local_disk_replica(), get_memory_descriptor(), get_disk_descriptor()."""

    def __init__(self, d):
        self.status = getattr(ReplicaStatus, d.get("status", "UNDEFINED"), ReplicaStatus.UNDEFINED)
        self._kind = d.get("kind", "memory")
        size = int(d.get("size", 0))
        slices = [Descriptor(int(s["size"]), int(s["address"]), s["segment"]) for s in d.get("slices", [])]
        self._mem = MemoryDescriptor(Descriptor(size, int(d.get("address", 0)), d.get("segment", "")), slices)
        self._disk = DiskDescriptor("", size)

    def is_memory_replica(self):
        return self._kind == "memory"

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return self._kind == "local_disk"

    def get_memory_descriptor(self):
        if not self.is_memory_replica():
            raise RuntimeError("not a memory replica")
        return self._mem

    def get_disk_descriptor(self):
        if self.is_memory_replica():
            raise RuntimeError("not a disk replica")
        return self._disk

    def __repr__(self):
        return f"<ReplicaDescriptor status={self.status.name} kind={self._kind} {self._mem.buffer_descriptor!r}>"


# -- host memory and NUMA -------------------------------------------------------


class MooncakeHostMemAllocator:
    """Page-aligned shared anonymous host memory (upstream
    MooncakeHostMemAllocator, which hands out shared memory for its dummy
    clients): alloc(size) returns the address (RuntimeError for size 0 or
    when the mapping fails), free(ptr) returns 0, or -1 for an address
    alloc did not return (or already freed)."""

    def __init__(self):
        self._maps = {}
        self._mu = threading.Lock()

    def alloc(self, size):
        size = _uint("size", size)
        if size == 0:
            raise RuntimeError("Failed to map shared memory: Invalid argument (size 0)")
        try:
            m = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        except (OSError, OverflowError, ValueError) as e:
            raise RuntimeError(f"Failed to map shared memory: {e}") from e
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        with self._mu:
            self._maps[addr] = m
        return addr

    def free(self, ptr):
        with self._mu:
            m = self._maps.pop(int(ptr), None)
        if m is None:
            return -1
        try:
            m.close()
        except BufferError:  # a view of it is still alive: unmapped when that goes
            pass
        return 0


def _cpulist(text):
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


_MPOL_PREFERRED = 1
_SYS_SET_MEMPOLICY = 238  # x86_64


def bind_to_numa_node(node):
    """Runs the calling thread on the CPUs of NUMA node `node` and prefers
    that node for its future memory allocations (upstream
    bind_to_numa_node: non-strict). Problems (no NUMA information, a node
    that does not exist, a failed call) are logged as warnings and the
    binding is skipped, as upstream; returns None."""
    node = int(node)
    base = "/sys/devices/system/node"
    try:
        with open(f"{base}/node{node}/cpulist") as f:
            cpus = _cpulist(f.read())
    except OSError:
        _log.warning("bind_to_numa_node: NUMA node %d not found under %s; binding skipped", node, base)
        return None
    try:
        allowed = os.sched_getaffinity(0)
        want = (cpus & allowed) or cpus
        os.sched_setaffinity(0, want)
    except OSError as e:
        _log.warning("bind_to_numa_node: sched_setaffinity to node %d failed: %s", node, e)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = (ctypes.c_ulong * 16)()
        mask[node // 64] = 1 << (node % 64)
        if libc.syscall(_SYS_SET_MEMPOLICY, _MPOL_PREFERRED, mask, ctypes.c_ulong(16 * 64)) != 0:
            _log.warning("bind_to_numa_node: set_mempolicy(node %d) failed: %s", node, os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError, IndexError) as e:
        _log.warning("bind_to_numa_node: set_mempolicy(node %d) failed: %s", node, e)
    return None


def get_alloc_func_addr():
    """unsupported: upstream's hugepage allocator entry point for torch's pluggable allocator."""
    raise _unsupported("get_alloc_func_addr", "mooncake-go has no hugepage allocator to hand to torch")


def get_free_func_addr():
    """unsupported: see get_alloc_func_addr."""
    raise _unsupported("get_free_func_addr", "mooncake-go has no hugepage allocator to hand to torch")


# -- tensors --------------------------------------------------------------------
#
# A tensor object is stored as upstream stores it: a 304-byte header
# (TensorMetadata: magic "NOOM" 0x4d4f4f4e, version 1, header size, dtype,
# ndim, layout kind, flags, data offset, data bytes, then the global and
# local shapes as 8 int64 each, padded with -1, the layout axis count and 4
# axis records) followed by the elements in C order.

_TENSOR_MAGIC = 0x4D4F4F4E
_TENSOR_VERSION = 1
_MAX_DIMS = 8
_MAX_AXES = 4
_HEADER = "<IHHiiIIQQ"  # 40 bytes
_SHAPES = "<8q8q"  # 128 bytes
_AXES = "<II" + "iiiiiiq" * _MAX_AXES  # 8 + 4 * 32 bytes
_TORCH_DTYPES = ["float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                 "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
_ELEM_SIZE = [4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1]


def _struct():
    import struct

    return struct


def _tensor_metadata_size():
    """Bytes of the tensor header (upstream _tensor_metadata_size)."""
    st = _struct()
    return st.calcsize(_HEADER) + st.calcsize(_SHAPES) + st.calcsize(_AXES)


def _torch():
    import torch  # lazily: mooncake.store works without torch

    return torch


def _dtype_code(torch, dtype):
    for i, name in enumerate(_TORCH_DTYPES):
        if getattr(torch, name, None) == dtype:
            return i
    return -1


def _header(dtype_code, shape, nbytes):
    st = _struct()
    size = _tensor_metadata_size()
    dims = list(shape) + [-1] * (_MAX_DIMS - len(shape))
    h = st.pack(_HEADER, _TENSOR_MAGIC, _TENSOR_VERSION, size, dtype_code, len(shape), 0, 0, size, nbytes)
    h += st.pack(_SHAPES, *dims, *dims)
    h += st.pack(_AXES, 0, 0, *([0] * (7 * _MAX_AXES)))
    return h


def _parse_header(buf, total):
    """(dtype code, shape, data offset, data bytes) of a stored tensor
    object of total bytes whose first bytes are buf, or None when the
    header is not a valid one (upstream ValidateTensorMetadata's checks)."""
    st = _struct()
    size = _tensor_metadata_size()
    if total < size or len(buf) < size:
        return None
    magic, version, hsize, dtype, ndim, kind, _flags, off, nbytes = st.unpack_from(_HEADER, buf, 0)
    if magic != _TENSOR_MAGIC or version != _TENSOR_VERSION or hsize != size:
        return None
    if not (0 <= dtype < len(_TORCH_DTYPES)) or not (0 <= ndim <= _MAX_DIMS) or kind > 1:
        return None
    if off < size or off > total or nbytes != total - off:
        return None
    dims = st.unpack_from(_SHAPES, buf, st.calcsize(_HEADER))
    local = dims[_MAX_DIMS:]
    shape = local[:ndim]
    if any(d < 0 for d in dims[:ndim]) or any(d < 0 for d in shape):
        return None
    if any(d != -1 for d in dims[ndim:_MAX_DIMS]) or any(d != -1 for d in local[ndim:]):
        return None
    numel = 1
    for d in shape:
        numel *= d
    if numel * _ELEM_SIZE[dtype] != nbytes:
        return None
    return dtype, tuple(shape), off, nbytes


def _tensor_parts(tensor):
    """(header bytes, data address, data bytes, owner) of a torch tensor
    (copied to host memory and made contiguous when it is not already),
    or None for anything that is not a tensor of a supported dtype."""
    if "Tensor" not in type(tensor).__name__:
        return None
    torch = _torch()
    try:
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        code = _dtype_code(torch, t.dtype)
        if code < 0 or t.dim() > _MAX_DIMS:
            return None
        nbytes = t.numel() * t.element_size()
        return _header(code, tuple(t.shape), nbytes), t.data_ptr(), nbytes, t
    except (AttributeError, RuntimeError, TypeError):
        return None


def _tensor_from(buf, total, owner_view=None):
    """A torch tensor over the stored object buf[0..total) (a writable
    buffer; the tensor shares its memory), or None when the bytes are not a
    valid tensor object."""
    parsed = _parse_header(bytes(memoryview(buf)[: _tensor_metadata_size()]) if total >= _tensor_metadata_size() else b"", total)
    if parsed is None:
        _log.error("invalid tensor metadata (%d bytes)", total)
        return None
    dtype, shape, off, nbytes = parsed
    torch = _torch()
    tdtype = getattr(torch, _TORCH_DTYPES[dtype])
    if nbytes == 0:
        return torch.empty(shape, dtype=tdtype)
    t = torch.frombuffer(buf, dtype=tdtype, count=nbytes // _ELEM_SIZE[dtype], offset=off)
    return t.reshape(shape)


def _serialize_tensor(tensor):
    """(metadata bytes, data pointer, data bytes, owner) of a tensor, as
    upstream's _serialize_tensor; ValueError for an unsupported one."""
    parts = _tensor_parts(tensor)
    if parts is None:
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    return parts


def _deserialize_tensor(payload):
    """The tensor of a stored tensor object's bytes (upstream _deserialize_tensor)."""
    buf = bytearray(payload)
    t = _tensor_from(buf, len(buf))
    if t is None:
        raise ValueError("invalid Mooncake tensor payload")
    return t


# -- the store -------------------------------------------------------------------


def _lists_equal(*xs):
    return all(len(x) == len(xs[0]) for x in xs)


class MooncakeDistributedStore:
    """A client of a mooncake-go pool with upstream's
    MooncakeDistributedStore interface (see the module docstring).

    Every method may be called from several threads at once; close()
    waits for calls in flight. The library is loaded by the first setup().
    """

    def __init__(self):
        self._s = None  # mooncake_go.store.Store once set up
        self._mu = threading.Lock()
        self._registered = {}  # buffer address -> size, registered through this object

    # -- lifecycle ------------------------------------------------------------

    def _store(self):
        return self._s

    def setup(self, *args, **kwargs):
        """Starts the client. Positional form (upstream's): local_hostname,
        metadata_server, global_segment_size, local_buffer_size, protocol,
        rdma_devices, master_server_addr (all required), then engine=None,
        enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
        enable_client_http_server=False, client_http_port=9300. Config-dict
        form: setup(config) with upstream's keys (sizes as ints or strings
        such as "4GB" or "16 MB"). Returns 0 or a negative code (the
        reason is logged). A second setup replaces the first client.

        local_hostname without a port gets one in 12300..14300
        (MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT), as upstream.
        Only protocol "tcp" is built (mooncake-go picks shared memory for
        same-host peers by itself); "rdma" and others return -1012. A
        shared TransferEngine (engine=), SSD offload, tenants, the client
        HTTP server and ipc_socket_path raise NotImplementedError."""
        if len(args) + len(kwargs) == 1 and (args and isinstance(args[0], dict) or isinstance(kwargs.get("config"), dict)):
            return self._setup_dict(args[0] if args else kwargs["config"])
        return self._setup_positional(*args, **kwargs)

    def _setup_positional(self, local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
                          rdma_devices, master_server_addr, engine=None, enable_ssd_offload=False,
                          ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
                          client_http_port=DEFAULT_CLIENT_HTTP_PORT):
        for name, v in (("local_hostname", local_hostname), ("metadata_server", metadata_server),
                        ("protocol", protocol), ("rdma_devices", rdma_devices),
                        ("master_server_addr", master_server_addr)):
            if not isinstance(v, str):
                raise TypeError(f"setup(): {name} must be str, got {type(v).__name__}")
        gs = _uint("global_segment_size", global_segment_size)
        ls = _uint("local_buffer_size", local_buffer_size)
        self._refuse_options(engine=engine is not None, enable_ssd_offload=bool(enable_ssd_offload) or bool(ssd_offload_path),
                             tenant_id=tenant_id not in (None, "", "default"),
                             enable_client_http_server=bool(enable_client_http_server))
        return self._start(local_hostname, metadata_server, gs, ls, protocol, rdma_devices, master_server_addr)

    @staticmethod
    def _refuse_options(**given):
        for what, on in given.items():
            if on:
                raise _unsupported(f"setup({what}=...)", "mooncake-go's store client has no such mode; leave it at its default")

    def _setup_dict(self, config):
        cfg = {str(k): str(v) for k, v in config.items()}
        host, meta = cfg.get("local_hostname", ""), cfg.get("metadata_server", "")
        if not host or not meta:
            _log.error("setup: missing required config: %s", "local_hostname" if not host else "metadata_server")
            return INVALID_PARAMS
        sizes = {}
        for key, default in (("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE), ("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)):
            v = parse_size(cfg[key]) if key in cfg else default
            if v is None:
                _log.error("setup: invalid size value for config key %r: %s", key, cfg[key])
                return INVALID_PARAMS
            sizes[key] = v
        gs, ls = sizes["global_segment_size"], sizes["local_buffer_size"]
        if gs != 0 and gs < MIN_SEGMENT_SIZE:
            _log.error("setup: invalid global_segment_size %d: must be 0 or at least %d", gs, MIN_SEGMENT_SIZE)
            return INVALID_PARAMS
        if ls != 0 and (ls < MIN_SEGMENT_SIZE or ls > MAX_SEGMENT_SIZE):
            _log.error("setup: invalid local_buffer_size %d: must be 0 or between %d and %d", ls, MIN_SEGMENT_SIZE, MAX_SEGMENT_SIZE)
            return INVALID_PARAMS
        port = cfg.get("client_http_port", str(DEFAULT_CLIENT_HTTP_PORT)).strip()
        if not port.lstrip("+-").isdigit():
            _log.error("setup: invalid integer value for config key 'client_http_port': %s", port)
            return INVALID_PARAMS
        self._refuse_options(
            ipc_socket_path=bool(cfg.get("ipc_socket_path")),
            enable_ssd_offload=_parse_bool(cfg.get("enable_ssd_offload", "false"), False) or bool(cfg.get("ssd_offload_path")),
            tenant_id=cfg.get("tenant_id", "default") not in ("", "default"),
            enable_client_http_server=_parse_bool(cfg.get("enable_client_http_server", "false"), False),
        )
        return self._start(host, meta, gs, ls, cfg.get("protocol", "tcp"), cfg.get("rdma_devices", ""),
                           cfg.get("master_server_addr", DEFAULT_MASTER_SERVER_ADDR))

    def _start(self, host, meta, gs, ls, protocol, devices, master):
        self.close()
        s = Store()
        try:
            s.setup(host, meta, gs, ls, protocol or "tcp", devices, master)
        except MooncakeError as e:
            _log.error("setup failed: %s", e)
            return _upstream(e.code)
        with self._mu:
            self._s = s
        return OK

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """unsupported: a dummy client borrows memory and a transfer engine
        from a separate `mooncake_client` process over shared memory and a
        unix socket; mooncake-go has no such split (use setup(): the client
        runs in this process)."""
        raise _unsupported("setup_dummy", "mooncake-go has no dummy-client/real-client split; call setup() instead")

    def init_all(self, protocol, device_name, mount_segment_size):
        """Upstream's shortcut: setup("localhost:12345", "127.0.0.1:2379"
        (etcd metadata), mount_segment_size, 1 GiB local buffer, protocol,
        device_name, "127.0.0.1:50051"). Returns 0 or a negative code
        (-600 when already set up)."""
        if self._s is not None:
            return INVALID_PARAMS
        return self._start("localhost:12345", "127.0.0.1:2379", _uint("mount_segment_size", mount_segment_size),
                           1 << 30, protocol, device_name, DEFAULT_MASTER_SERVER_ADDR)

    def close(self):
        """Closes the client (its segment leaves the pool, so the objects
        stored on it vanish). 0; a second close, or one before setup, is 0."""
        with self._mu:
            s, self._s = self._s, None
            self._registered.clear()
        if s is None:
            return OK
        try:
            s.close()
        except MooncakeError as e:
            _log.error("close: %s", e)
            return _upstream(e.code)
        return OK

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass

    def health_check(self):
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        s = self._s
        if s is None:
            return 1
        try:
            s.health_check()
        except MooncakeError as e:
            if e.code in (_errors.ERR_INVALID_HANDLE, _errors.ERR_CLOSED):
                return 1
            return 2
        return 0

    def get_hostname(self):
        """This client's segment name, "host:port" ("" before setup)."""
        s = self._s
        if s is None:
            return ""
        try:
            return s.get_hostname()
        except MooncakeError:
            return ""

    # -- helpers --------------------------------------------------------------

    def _call(self, f, *args, default=INVALID_PARAMS):
        """Runs f(store, *args); a MooncakeError becomes its upstream code,
        a missing client `default`. Failures are logged at ERROR with their
        reason, as upstream's client logs them (a missing key or a leased
        object at DEBUG: those are answers, not faults)."""
        s = self._s
        if s is None:
            _log.error("Client is not initialized")
            return default
        try:
            return f(s, *args)
        except MooncakeError as e:
            code = _upstream(e.code)
            _log.log(logging.DEBUG if code in _QUIET_CODES else logging.ERROR, "mooncake.store: %s", e)
            return code

    # -- buffers --------------------------------------------------------------

    def register_buffer(self, buffer_ptr, size):
        """Registers [buffer_ptr, +size) for the zero-copy calls: 0, or
        -600 (size 0, registered already, overlapping)."""
        buffer_ptr, size = _uint("buffer_ptr", buffer_ptr), _uint("size", size)
        if size == 0:
            return INVALID_PARAMS

        def reg(s):
            s.register_buffer(buffer_ptr, size)
            with self._mu:
                self._registered[buffer_ptr] = size
            return OK

        return self._call(reg)

    def unregister_buffer(self, buffer_ptr):
        """0, or -600 when no buffer was registered at buffer_ptr."""
        buffer_ptr = _uint("buffer_ptr", buffer_ptr)

        def unreg(s):
            s.unregister_buffer(buffer_ptr)
            with self._mu:
                self._registered.pop(buffer_ptr, None)
            return OK

        return self._call(unreg)

    # -- puts -----------------------------------------------------------------

    def put(self, key, value, config=_DEFAULT_CONFIG):
        """Stores a copy of value (bytes-like) under key, through the local
        buffer: 0 (also when the key exists: it keeps its value) or a
        negative code (-600 for an empty value or one larger than the local
        buffer, -200 when the pool is full)."""
        cfg, rc = _put_config(config)
        if rc:
            return rc
        mv = memoryview(value)
        if mv.nbytes == 0:
            return INVALID_PARAMS
        if cfg is None:
            return self._call(lambda s: s.put(key, value) or OK)
        return self._call(lambda s: s.batch_put([key], [value], cfg)[0], default=INVALID_PARAMS)

    def put_parts(self, key, *parts, config=_DEFAULT_CONFIG):
        """Stores the concatenation of parts (1-D bytes-like objects) under
        key: 0 (also when they hold no bytes: nothing is stored) or a
        negative code."""
        for p in parts:
            mv = memoryview(p)
            if mv.ndim > 1 or mv.itemsize != 1:
                raise RuntimeError("parts must be 1-D bytes-like")
        cfg, rc = _put_config(config)
        if rc:
            return rc
        if sum(memoryview(p).nbytes for p in parts) == 0:
            return self._call(lambda s: OK)
        return self._call(lambda s: s.put_parts(key, list(parts), cfg) or OK)

    def put_batch(self, keys, values, config=_DEFAULT_CONFIG):
        """Stores a copy of each values[i] under keys[i]: 0, or the first
        failing key's code (-600 for mismatched lists or an empty value)."""
        keys, values = _key_list(keys), list(values)
        cfg, rc = _put_config(config)
        if rc:
            return rc
        if len(keys) != len(values):
            return INVALID_PARAMS
        if not keys:
            return self._call(lambda s: OK)
        if any(memoryview(v).nbytes == 0 for v in values):
            return INVALID_PARAMS

        def batch(s):
            for c in s.batch_put(keys, values, cfg):
                if c < 0:
                    return _upstream(c)
            return OK

        return self._call(batch)

    def put_from(self, key, buffer_ptr, size, config=_DEFAULT_CONFIG):
        """Stores [buffer_ptr, +size) under key, zero copy from a registered
        buffer (staged through the local buffer otherwise): 0 or a negative
        code. size 0 stores nothing and returns 0, as upstream."""
        if type(key) is str and type(buffer_ptr) is int and type(size) is int and 0 < size and 0 <= buffer_ptr < _U64:
            cfg, rc = _put_config(config)
            if rc == OK and cfg is None:  # one key, default settings: mc_store_put_from_n, no arrays
                def one(s):
                    try:
                        s.put_from(key, buffer_ptr, size)
                    except MooncakeError as e:
                        if e.code != _errors.ERR_ADDRESS_NOT_REGISTERED:
                            raise
                        c = s.batch_put_ptrs([key], [buffer_ptr], [size])[0]  # staged through the local buffer
                        return _upstream(c)
                    return OK

                return self._call(one)
        return self.batch_put_from([key], [buffer_ptr], [size], config, _single=True)[0]

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=_DEFAULT_CONFIG, _single=False):
        """put_from for each key; one code per key ([-600] * len(keys)
        when the lists differ in length)."""
        keys, ptrs, sizes = _key_list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes]
        cfg, rc = _put_config(config)
        if rc:
            return [rc] * len(keys)
        if not _lists_equal(keys, ptrs, sizes):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        if _single and sizes[0] == 0:
            return [self._call(lambda s: OK)]

        def batch(s):
            codes = s.batch_put_from_config(keys, ptrs, sizes, cfg)
            retry = [i for i, c in enumerate(codes) if c == _errors.ERR_ADDRESS_NOT_REGISTERED]
            if retry:
                again = s.batch_put_ptrs([keys[i] for i in retry], [ptrs[i] for i in retry], [sizes[i] for i in retry], cfg)
                for i, c in zip(retry, again):
                    codes[i] = c
            return [_upstream(c) for c in codes]

        out = self._call(batch)
        return [out] * len(keys) if isinstance(out, int) else out

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=_DEFAULT_CONFIG):
        """Stores under keys[i] the concatenation of the ranges
        (all_buffer_ptrs[i][j], all_sizes[i][j]), zero copy from registered
        buffers (gathered through the local buffer otherwise); one code per
        key ([-600] * len(keys) for mismatched lists; [] before setup, as
        upstream)."""
        keys = _key_list(keys)
        all_ptrs = [[int(p) for p in ps] for ps in all_buffer_ptrs]
        all_sizes = [[int(n) for n in ns] for ns in all_sizes]
        if self._s is None:
            return []
        cfg, rc = _put_config(config)
        if rc:
            return [rc] * len(keys)
        if not _lists_equal(keys, all_ptrs, all_sizes) or any(len(p) != len(n) for p, n in zip(all_ptrs, all_sizes)):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []

        def batch(s):
            codes = s.batch_put_from_parts(keys, all_ptrs, all_sizes, cfg)
            for i, c in enumerate(codes):
                if c == _errors.ERR_ADDRESS_NOT_REGISTERED:
                    try:
                        s.put_parts_ptrs(keys[i], all_ptrs[i], all_sizes[i], cfg)
                        codes[i] = OK
                    except MooncakeError as e:
                        codes[i] = e.code
            return [_upstream(c) for c in codes]

        out = self._call(batch)
        return [out] * len(keys) if isinstance(out, int) else out

    # -- upserts (remove + put; see the README) ---------------------------------

    def _upsert_prepare(self, keys):
        """Force-removes keys that exist (upsert replaces a value whatever
        its leases, as upstream); returns a code per key: 0 to go on, or
        the removal's failure."""

        def rm(s):
            return [OK if c in (0, _errors.STORE_ERR_OBJECT_NOT_FOUND) else _upstream(c) for c in s.batch_remove(keys, True)]

        out = self._call(rm)
        return [out] * len(keys) if isinstance(out, int) else out

    def upsert(self, key, value, config=_DEFAULT_CONFIG):
        """Inserts or replaces key's value (upstream upsert): 0 or a
        negative code. Here a removal followed by a put, not one atomic
        step: readers may miss the key in between, and the old value's
        pins are not carried over."""
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return rc
        if memoryview(value).nbytes == 0:
            return INVALID_PARAMS
        pre = self._upsert_prepare([key])[0]
        return pre if pre else self.put(key, value, config)

    def upsert_from(self, key, buffer_ptr, size, config=_DEFAULT_CONFIG):
        """upsert from [buffer_ptr, +size) (see upsert and put_from)."""
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return rc
        pre = self._upsert_prepare([key])[0]
        return pre if pre else self.put_from(key, buffer_ptr, size, config)

    def upsert_parts(self, key, *parts, config=_DEFAULT_CONFIG):
        """upsert of the concatenation of parts (see upsert and put_parts)."""
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return rc
        pre = self._upsert_prepare([key])[0]
        return pre if pre else self.put_parts(key, *parts, config=config)

    def upsert_batch(self, keys, values, config=_DEFAULT_CONFIG):
        """upsert of each key (see upsert and put_batch): 0 or the first failure."""
        keys, values = _key_list(keys), list(values)
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return rc
        if len(keys) != len(values):
            return INVALID_PARAMS
        for c in self._upsert_prepare(keys) if keys else []:
            if c:
                return c
        return self.put_batch(keys, values, config)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=_DEFAULT_CONFIG):
        """upsert_from for each key; one code per key."""
        keys = _key_list(keys)
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return [rc] * len(keys)
        if not keys:
            return []
        pre = self._upsert_prepare(keys)
        out = self.batch_put_from(keys, buffer_ptrs, sizes, config)
        return [p if p else o for p, o in zip(pre, out)]

    # -- gets -----------------------------------------------------------------

    def get(self, key):
        """A copy of key's value as bytes; b"" when it is missing or cannot be read."""
        out = self._call(lambda s: s.batch_get([key])[0], default=b"")
        return out if isinstance(out, bytes) else b""

    def get_batch(self, keys):
        """A copy of each key's value (b"" for a key that cannot be read).
        As upstream, an empty list gives [b""]."""
        keys = _key_list(keys)
        if not keys:
            return [b""]
        out = self._call(lambda s: s.batch_get(keys), default=None)
        if not isinstance(out, list):
            return [b""]
        return [v if isinstance(v, bytes) else b"" for v in out]

    def get_buffer(self, key):
        """key's value as a BufferHandle, or None when it cannot be read."""
        out = self.batch_get_buffer([key])
        return out[0] if out else None

    def batch_get_buffer(self, keys):
        """A BufferHandle per key, or None for a key that cannot be read."""
        keys = _key_list(keys)
        if not keys:
            return []
        out = self._call(lambda s: s.batch_get(keys, BufferHandle), default=None)
        if not isinstance(out, list):
            return [None] * len(keys)
        return [v if isinstance(v, BufferHandle) else None for v in out]

    def get_into(self, key, buffer_ptr, size):
        """Reads key's value into [buffer_ptr, +size), zero copy into a
        registered buffer (staged through the local buffer otherwise):
        the bytes read, or a negative code (-704 missing, -600 when the
        buffer is too small)."""
        if type(key) is str and type(buffer_ptr) is int and type(size) is int and 0 < size and 0 <= buffer_ptr < _U64:
            def one(s):  # one key: mc_store_get_into_n, no arrays
                try:
                    return s.get_into(key, buffer_ptr, size)
                except MooncakeError as e:
                    if e.code != _errors.ERR_ADDRESS_NOT_REGISTERED:
                        raise
                return s.get_copy_into(key, buffer_ptr, size)  # staged through the local buffer

            return self._call(one)
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """get_into for each key; per key the bytes read or a negative code
        ([-600] * len(keys) for mismatched lists)."""
        keys, ptrs, sizes = _key_list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes]
        if not _lists_equal(keys, ptrs, sizes):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []

        def batch(s):
            out = [0] * len(keys)
            ask = [i for i in range(len(keys)) if sizes[i] > 0]
            for i in range(len(keys)):
                if sizes[i] == 0:  # as upstream: a missing key says so first
                    try:
                        s.get_size(keys[i])
                        out[i] = INVALID_PARAMS
                    except MooncakeError as e:
                        out[i] = e.code
            if ask:
                got = s.batch_get_into([keys[i] for i in ask], [ptrs[i] for i in ask], [sizes[i] for i in ask])
                for i, r in zip(ask, got):
                    out[i] = r
            for i, r in enumerate(out):
                if r == _errors.ERR_ADDRESS_NOT_REGISTERED:
                    try:
                        out[i] = s.get_copy_into(keys[i], ptrs[i], sizes[i])
                    except MooncakeError as e:
                        out[i] = e.code
            return [_upstream(r) for r in out]

        out = self._call(batch)
        return [out] * len(keys) if isinstance(out, int) else out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False):
        """Reads keys[i] into its ranges (all_buffer_ptrs[i][j],
        all_sizes[i][j]) in order, zero copy into registered buffers
        (scattered from the local buffer otherwise); per key the bytes read
        or a negative code (-600 when the ranges hold less than the value)."""
        keys = _key_list(keys)
        all_ptrs = [[int(p) for p in ps] for ps in all_buffer_ptrs]
        all_sizes = [[int(n) for n in ns] for ns in all_sizes]
        if not _lists_equal(keys, all_ptrs, all_sizes) or any(len(p) != len(n) for p, n in zip(all_ptrs, all_sizes)):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []

        def batch(s):
            out = s.batch_get_into_parts(keys, all_ptrs, all_sizes)
            retry = [i for i, r in enumerate(out) if r == _errors.ERR_ADDRESS_NOT_REGISTERED]
            if retry:
                vals = s.batch_get([keys[i] for i in retry])
                for i, v in zip(retry, vals):
                    if isinstance(v, int):
                        out[i] = v
                        continue
                    if len(v) > sum(all_sizes[i]):
                        out[i] = _errors.STORE_ERR_BUFFER_OVERFLOW
                        continue
                    off = 0
                    for p, n in zip(all_ptrs[i], all_sizes[i]):
                        take = min(n, len(v) - off)
                        if take <= 0:
                            break
                        ctypes.memmove(p, v[off:off + take], take)
                        off += take
                    out[i] = len(v)
            return [_upstream(r) for r in out]

        out = self._call(batch)
        return [out] * len(keys) if isinstance(out, int) else out

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
        """Reads byte ranges of objects into registered buffers: for buffer
        i, key j of all_keys[i] and range k, the bytes
        [all_src_offsets[i][j][k], +all_sizes[i][j][k]) of the key's value
        go to buffer_ptrs[i] + all_dst_offsets[i][j][k]. Returns the same
        nesting with the bytes read or a negative code per range (-600 for
        mismatched lists, a range past the value's end or the registered
        buffer's end, an unregistered buffer; -704 for a missing key)."""
        ptrs = [int(p) for p in buffer_ptrs]
        all_keys = [list(ks) for ks in all_keys]
        all_dst = [[list(r) for r in rows] for rows in all_dst_offsets]
        all_src = [[list(r) for r in rows] for rows in all_src_offsets]
        all_n = [[list(r) for r in rows] for rows in all_sizes]
        # The result skeleton, every range -600 until read (upstream's shape).
        results = []
        for i in range(len(ptrs)):
            kc = len(all_keys[i]) if i < len(all_keys) else 1
            results.append([[INVALID_PARAMS] * (len(all_dst[i][j]) if i < len(all_dst) and j < len(all_dst[i]) else 1)
                            for j in range(kc)])
        if self._s is None or not _lists_equal(ptrs, all_keys, all_dst, all_src, all_n):
            return results
        entries = []  # (i, j, k, key, dst address, src offset, size)
        for i, base in enumerate(ptrs):
            cap = self._capacity(base)
            keys, dst, src, n = all_keys[i], all_dst[i], all_src[i], all_n[i]
            if base == 0 or cap == 0 or not _lists_equal(keys, dst, src, n):
                continue
            for j, key in enumerate(keys):
                if not _lists_equal(dst[j], src[j], n[j]):
                    continue
                for k in range(len(dst[j])):
                    d, o, m = int(dst[j][k]), int(src[j][k]), int(n[j][k])
                    if d > cap or m > cap - d:
                        continue
                    entries.append((i, j, k, key, base + d, o, m))
        if entries:
            got = self._call(lambda s: s.batch_get_ranges([e[3] for e in entries], [e[4] for e in entries],
                                                          [e[5] for e in entries], [e[6] for e in entries]))
            if isinstance(got, int):
                got = [got] * len(entries)
            for e, r in zip(entries, got):
                results[e[0]][e[1]][e[2]] = _upstream(r)
        return results

    def _capacity(self, ptr):
        """Bytes from ptr to the end of the registered buffer holding it (0 when none)."""
        with self._mu:
            for base, n in self._registered.items():
                if base <= ptr < base + n:
                    return base + n - ptr
        return 0

    # -- existence, sizes, removal --------------------------------------------

    def is_exist(self, key):
        """1 when key has a readable replica (and it gets a lease), 0 when
        not, or a negative code."""
        return self._call(lambda s: 1 if s.is_exist(key) else 0)

    def batch_is_exist(self, keys):
        """1, 0 or a negative code per key."""
        keys = _key_list(keys)
        if not keys:
            return []
        out = self._call(lambda s: [_upstream(x) for x in s.batch_is_exist(keys)])
        return [out] * len(keys) if isinstance(out, int) else out

    def get_size(self, key):
        """The value's size in bytes (the key gets a lease), or a negative code."""
        return self._call(lambda s: s.get_size(key))

    def remove(self, key, force=False):
        """Deletes key: 0, -704 missing, -706 while a reader holds a lease
        (unless force)."""
        return self._call(lambda s: s.remove(key, bool(force)) or OK)

    def remove_by_regex(self, regex_pattern, force=False):
        """Deletes the objects whose key matches regex_pattern (RE2, not
        anchored; leased ones only with force): how many, or -600 for a bad
        expression."""
        return self._call(lambda s: s.remove_by_regex(regex_pattern, bool(force)))

    def remove_all(self, force=False):
        """Deletes every object of the pool (leased ones only with force):
        how many were removed, or a negative code."""
        return self._call(lambda s: s.remove_all(bool(force)))

    def batch_remove(self, keys, force=False):
        """remove for each key; one code per key."""
        keys = _key_list(keys)
        if not keys:
            return []
        out = self._call(lambda s: [_upstream(c) for c in s.batch_remove(keys, bool(force))])
        return [out] * len(keys) if isinstance(out, int) else out

    # -- replicas -------------------------------------------------------------

    def get_replica_desc(self, key):
        """The key's replicas as ReplicaDescriptors ([] when it cannot be read)."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor, ...]} for the keys that can be read."""
        keys = _key_list(keys)
        if not keys:
            return {}
        out = self._call(lambda s: s.replica_desc(keys), default=None)
        if not isinstance(out, list):
            return {}
        return {k: [ReplicaDescriptor(r) for r in d["replicas"]] for k, d in zip(keys, out) if d.get("code") == 0}

    def get_offload_rpc_read_count(self):
        """Reads served through upstream's SSD-offload RPC server: 0 (mooncake-go has none)."""
        return 0

    # -- tensors --------------------------------------------------------------

    def put_tensor(self, key, tensor):
        """Stores a torch tensor (header + elements; a GPU tensor is copied
        to host memory first): 0 or a negative code (-600 for anything that
        is not a tensor of a supported dtype)."""
        return self.pub_tensor(key, tensor)

    def pub_tensor(self, key, tensor, config=_DEFAULT_CONFIG):
        """put_tensor with replication settings."""
        cfg, rc = _put_config(config)
        if rc:
            return rc
        parts = _tensor_parts(tensor)
        if parts is None:
            return INVALID_PARAMS
        head, ptr, n, owner = parts
        hp = ctypes.cast(ctypes.c_char_p(head), ctypes.c_void_p).value
        rc = self._call(lambda s: s.put_parts_ptrs(key, [hp, ptr if n else None], [len(head), n], cfg) or OK)
        del owner
        return rc

    def batch_put_tensor(self, keys, tensors_list):
        """put_tensor for each key; one code per key."""
        return self.batch_pub_tensor(keys, tensors_list)

    def batch_pub_tensor(self, keys, tensors_list, config=_DEFAULT_CONFIG):
        """pub_tensor for each key; one code per key."""
        keys, tensors = _key_list(keys), list(tensors_list)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * len(keys)
        return [self.pub_tensor(k, t, config) for k, t in zip(keys, tensors)]

    def upsert_tensor(self, key, tensor):
        """put_tensor that replaces an existing value (see upsert)."""
        return self.upsert_pub_tensor(key, tensor)

    def upsert_pub_tensor(self, key, tensor, config=_DEFAULT_CONFIG):
        """pub_tensor that replaces an existing value (see upsert)."""
        cfg, rc = _put_config(config, upsert=True)
        if rc:
            return rc
        if _tensor_parts(tensor) is None:
            return INVALID_PARAMS
        pre = self._upsert_prepare([key])[0]
        return pre if pre else self.pub_tensor(key, tensor, config)

    def batch_upsert_tensor(self, keys, tensors_list):
        """upsert_tensor for each key; one code per key."""
        return self.batch_upsert_pub_tensor(keys, tensors_list)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=_DEFAULT_CONFIG):
        """upsert_pub_tensor for each key; one code per key."""
        keys, tensors = _key_list(keys), list(tensors_list)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * len(keys)
        return [self.upsert_pub_tensor(k, t, config) for k, t in zip(keys, tensors)]

    def get_tensor(self, key):
        """The tensor stored under key (sharing memory with a fresh copy of
        the value), or None when it is missing or not a tensor object."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor(self, keys):
        """get_tensor for each key."""
        return [None if b is None else _tensor_from(b, len(b)) for b in self.batch_get_buffer(keys)] if keys else []

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the tensor object under key into [buffer_ptr, +size) (see
        get_into) and returns a tensor viewing that memory, or None."""
        r = self.get_into(key, buffer_ptr, size)
        return self._view_tensor(buffer_ptr, r)

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """get_tensor_into for each key ([-600] * len(keys) for mismatched
        lists or a NULL pointer, as upstream)."""
        keys, ptrs, sizes = _key_list(keys), [int(p) for p in buffer_ptrs], list(sizes)
        if not _lists_equal(keys, ptrs, sizes) or any(p == 0 for p in ptrs) or self._s is None:
            return [INVALID_PARAMS] * len(keys)
        got = self.batch_get_into(keys, ptrs, sizes)
        return [self._view_tensor(p, r) for p, r in zip(ptrs, got)]

    @staticmethod
    def _view_tensor(ptr, total):
        if not isinstance(total, int) or total < 0 or not ptr:
            return None
        if total < _tensor_metadata_size():
            _log.error("invalid data format: %d bytes is too short for tensor metadata", total)
            return None
        return _tensor_from((ctypes.c_char * total).from_address(ptr), total)

    def put_tensor_from(self, key, buffer_ptr, size):
        """Stores a tensor object already laid out at [buffer_ptr, +size)
        (header, then elements; see _serialize_tensor): 0 or a negative
        code (-600 for a NULL pointer or an invalid header)."""
        return self.batch_put_tensor_from([key], [buffer_ptr], [size])[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """put_tensor_from for each key ([-600] * len(keys) when any entry
        is invalid, as upstream)."""
        keys, ptrs, sizes = _key_list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes]
        if self._s is None or not _lists_equal(keys, ptrs, sizes):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        hs = _tensor_metadata_size()
        for p, n in zip(ptrs, sizes):
            if p == 0 or n < hs or _parse_header(ctypes.string_at(p, hs), n) is None:
                return [INVALID_PARAMS] * len(keys)
        return self.batch_put_from(keys, ptrs, sizes)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        """put_tensor_from that replaces an existing value (see upsert)."""
        return self.batch_upsert_tensor_from([key], [buffer_ptr], [size])[0]

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        """upsert_tensor_from for each key."""
        keys, ptrs, sizes = _key_list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes]
        if self._s is None or not _lists_equal(keys, ptrs, sizes):
            return [INVALID_PARAMS] * len(keys)
        hs = _tensor_metadata_size()
        for p, n in zip(ptrs, sizes):
            if p == 0 or n < hs or _parse_header(ctypes.string_at(p, hs), n) is None:
                return [INVALID_PARAMS] * len(keys)
        return self.batch_upsert_from(keys, ptrs, sizes)


# Upstream MooncakeDistributedStore methods mooncake-go does not build, with
# the reason each one raises.
_UNSUPPORTED_METHODS = {
    "_get_pyclient_capsule": "there is no C++ PyClient to hand out",
    "mount_segment": "segments are mounted by setup() and `mooncake node` only",
    "unmount_segment": "segments are unmounted by close() and `mooncake node` only",
    "allocate_and_mount_segment": "segments are mounted by setup() and `mooncake node` only",
    "unmount_and_free_segment": "segments are unmounted by close() and `mooncake node` only",
    "unmount_local_disk_segment": "the disk tier belongs to `mooncake node --storage_root_dir`",
    "alloc_from_mem_pool": "there is no client-side memory pool; use MooncakeHostMemAllocator or register_buffer",
    "put_from_with_metadata": "not built",
    "batch_get_session_start": "get sessions are not built",
    "batch_get_session_end": "get sessions are not built",
    "batch_get_into_multi_buffer_ranges": "get sessions are not built",
    "batch_put_session_start": "put sessions are not built",
    "batch_put_session_end": "put sessions are not built",
    "batch_put_session_revoke": "put sessions are not built",
    "batch_put_from_multi_buffer_ranges": "put sessions are not built",
    "batch_replica_clear": "replica tasks are not built",
    "create_copy_task": "replica copy/move tasks are not built",
    "create_move_task": "replica copy/move tasks are not built",
    "query_task": "replica copy/move tasks are not built",
    "get_tensor_into_cuda": "CUDA destinations are not built (no CUDA segments)",
    "batch_get_tensor_into_cuda": "CUDA destinations are not built (no CUDA segments)",
    "save_tensor_to_safetensor": "safetensors export is not built",
    "load_tensor_from_safetensor": "safetensors import is not built",
    "get_tensor_with_tp": "tensor-parallel shards are not built",
    "batch_get_tensor_with_tp": "tensor-parallel shards are not built",
    "put_tensor_with_tp": "tensor-parallel shards are not built",
    "batch_put_tensor_with_tp": "tensor-parallel shards are not built",
    "pub_tensor_with_tp": "tensor-parallel shards are not built",
    "batch_pub_tensor_with_tp": "tensor-parallel shards are not built",
    "get_tensor_with_tp_into": "tensor-parallel shards are not built",
    "batch_get_tensor_with_tp_into": "tensor-parallel shards are not built",
    "put_tensor_with_tp_from": "tensor-parallel shards are not built",
    "batch_put_tensor_with_tp_from": "tensor-parallel shards are not built",
    "get_tensor_with_parallelism": "parallelism layouts are not built",
    "batch_get_tensor_with_parallelism": "parallelism layouts are not built",
    "get_tensor_with_parallelism_into": "parallelism layouts are not built",
    "batch_get_tensor_with_parallelism_into": "parallelism layouts are not built",
    "put_tensor_with_parallelism": "parallelism layouts are not built",
    "batch_put_tensor_with_parallelism": "parallelism layouts are not built",
    "put_tensor_with_parallelism_from": "parallelism layouts are not built",
    "batch_put_tensor_with_parallelism_from": "parallelism layouts are not built",
    "upsert_tensor_with_parallelism": "parallelism layouts are not built",
    "upsert_tensor_with_parallelism_from": "parallelism layouts are not built",
    "batch_upsert_tensor_with_parallelism_from": "parallelism layouts are not built",
    "batch_upsert_tensor_with_parallelism": "parallelism layouts are not built",
}


def _stub(name, why):
    def method(self, *args, **kwargs):
        raise _unsupported(name, why)

    method.__name__ = name
    method.__qualname__ = f"MooncakeDistributedStore.{name}"
    method.__doc__ = f"unsupported: {why}."
    return method


for _name, _why in _UNSUPPORTED_METHODS.items():
    setattr(MooncakeDistributedStore, _name, _stub(_name, _why))
del _name, _why


# Upstream module-level classes mooncake-go does not build: constructing one
# raises NotImplementedError.
def _unsupported_class(name, why):
    def __init__(self, *args, **kwargs):
        raise _unsupported(name, why)

    return type(name, (), {"__init__": __init__, "__doc__": f"unsupported: {why}."})


MooncakeDistributedNoFRegister = _unsupported_class("MooncakeDistributedNoFRegister", "the NVMe-oF tier is not built")
EngramStore = _unsupported_class("EngramStore", "EngramStore is not built")
EngramStoreConfig = _unsupported_class("EngramStoreConfig", "EngramStore is not built")
ParallelAxis = _unsupported_class("ParallelAxis", "parallelism layouts are not built")
TensorParallelism = _unsupported_class("TensorParallelism", "parallelism layouts are not built")
ReadTarget = _unsupported_class("ReadTarget", "parallelism layouts are not built")
QueryTaskResponse = _unsupported_class("QueryTaskResponse", "replica copy/move tasks are not built")
BufferPool = _unsupported_class("BufferPool", "upstream's buffer pool is not built")
RegisteredBufferPool = _unsupported_class("RegisteredBufferPool", "upstream's buffer pool is not built")
BufferLease = _unsupported_class("BufferLease", "upstream's buffer pool is not built")
BufferLeaseView = _unsupported_class("BufferLeaseView", "upstream's buffer pool is not built")
RegisteredBufferLease = _unsupported_class("RegisteredBufferLease", "upstream's buffer pool is not built")
RegisteredBufferLeaseView = _unsupported_class("RegisteredBufferLeaseView", "upstream's buffer pool is not built")

# Upstream exports its enums' values at module level too (ReplicaStatus,
# ObjectDataType, TaskType, TaskStatus use export_values()).
for _enum in (ReplicaStatus, ObjectDataType, TaskType, TaskStatus):
    for _member in _enum:
        globals().setdefault(_member.name, _member)
del _enum, _member

# Keep the loader importable from here for diagnostics (which library runs).
loaded_library = _mc_lib.loaded
