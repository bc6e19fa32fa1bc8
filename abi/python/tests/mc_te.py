"""ctypes bindings of libmooncake.so's transfer-engine C ABI, for the tests.

Only ctypes and the headers: the constants (status codes, opcodes, task
statuses) are read from abi/include/mooncake/*.h, so the tests check the
library against its headers rather than against a copy of their values.
Loading the library starts a Go runtime in the process; load it lazily and
only in processes that need it.
"""

import ctypes
import os
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[3]
INCLUDE = REPO / "abi" / "include" / "mooncake"
ENV_LIBRARY = "MC_LIBMOONCAKE"


def library_path():
    """Path of libmooncake.so: $MC_LIBMOONCAKE or build/libmooncake.so."""
    return os.environ.get(ENV_LIBRARY) or str(REPO / "build" / "libmooncake.so")


_DEFINE = re.compile(r"^#define\s+(MC_\w+)\s+\(?(-?\d+)\)?\s*(/\*.*)?$")


def header_constants():
    """Integer MC_ #defines of common.h and transfer_engine.h."""
    out = {}
    for name in ("common.h", "transfer_engine.h"):
        for line in (INCLUDE / name).read_text().splitlines():
            m = _DEFINE.match(line)
            if m:
                out[m.group(1)] = int(m.group(2))
    return out


C = header_constants()


class Request(ctypes.Structure):
    """mc_te_request_t."""

    _fields_ = [
        ("opcode", ctypes.c_int),
        ("source", ctypes.c_void_p),
        ("target_id", ctypes.c_int32),
        ("target_offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
    ]


class Status(ctypes.Structure):
    """mc_te_status_t."""

    _fields_ = [("status", ctypes.c_int), ("transferred_bytes", ctypes.c_uint64)]


_Engine = ctypes.c_void_p  # mc_te_engine_t*: opaque


def load(path=None):
    """Opens libmooncake.so and declares the prototypes of the headers."""
    lib = ctypes.CDLL(path or library_path())
    protos = {
        "mc_abi_version": (ctypes.c_uint32, []),
        "mc_last_error": (ctypes.c_char_p, []),
        "mc_te_abi_version": (ctypes.c_uint32, []),
        "mc_te_create": (
            ctypes.c_int,
            [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(_Engine)],
        ),
        "mc_te_destroy": (ctypes.c_int, [_Engine]),
        "mc_te_install_transport": (ctypes.c_int, [_Engine, ctypes.c_char_p]),
        "mc_te_register_local_memory": (
            ctypes.c_int,
            [_Engine, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int],
        ),
        "mc_te_unregister_local_memory": (ctypes.c_int, [_Engine, ctypes.c_void_p]),
        "mc_te_open_segment": (ctypes.c_int, [_Engine, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)]),
        "mc_te_close_segment": (ctypes.c_int, [_Engine, ctypes.c_int32]),
        "mc_te_allocate_batch": (ctypes.c_int, [_Engine, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]),
        "mc_te_submit": (ctypes.c_int, [_Engine, ctypes.c_uint64, ctypes.POINTER(Request), ctypes.c_size_t]),
        "mc_te_get_status": (ctypes.c_int, [_Engine, ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(Status)]),
        "mc_te_free_batch": (ctypes.c_int, [_Engine, ctypes.c_uint64]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def last_error(lib):
    """This thread's mc_last_error() as str."""
    return lib.mc_last_error().decode("utf-8", "replace")


class MCError(RuntimeError):
    def __init__(self, call, code, msg):
        super().__init__(f"{call} = {code}: {msg}")
        self.code = code


def check(lib, call, rc):
    """Raises MCError unless rc is MC_OK."""
    if rc != C["MC_OK"]:
        raise MCError(call, rc, last_error(lib))


class Engine:
    """A transfer engine in this process, bound to 127.0.0.1."""

    def __init__(self, lib, metadata, name, host=b"127.0.0.1", port=0):
        self.lib = lib
        self.h = _Engine()
        check(lib, "mc_te_create", lib.mc_te_create(metadata.encode(), name.encode(), host, port, 0, ctypes.byref(self.h)))

    def register(self, addr, length, location=b"cpu:0", remote=1):
        check(self.lib, "mc_te_register_local_memory", self.lib.mc_te_register_local_memory(self.h, addr, length, location, remote))

    def unregister(self, addr):
        check(self.lib, "mc_te_unregister_local_memory", self.lib.mc_te_unregister_local_memory(self.h, addr))

    def open_segment(self, name):
        out = ctypes.c_int32()
        check(self.lib, "mc_te_open_segment", self.lib.mc_te_open_segment(self.h, name.encode(), ctypes.byref(out)))
        return out.value

    def allocate_batch(self, size):
        out = ctypes.c_uint64()
        check(self.lib, "mc_te_allocate_batch", self.lib.mc_te_allocate_batch(self.h, size, ctypes.byref(out)))
        return out.value

    def submit(self, batch, reqs):
        arr = (Request * len(reqs))(*reqs)
        check(self.lib, "mc_te_submit", self.lib.mc_te_submit(self.h, batch, arr, len(reqs)))

    def status(self, batch, task):
        """(status, transferred_bytes, reason) of one task; reason is the
        mc_last_error text for a FAILED task, else ""."""
        st = Status()
        check(self.lib, "mc_te_get_status", self.lib.mc_te_get_status(self.h, batch, task, ctypes.byref(st)))
        reason = last_error(self.lib) if st.status == C["MC_TE_STATUS_FAILED"] else ""
        return st.status, st.transferred_bytes, reason

    def free_batch(self, batch):
        check(self.lib, "mc_te_free_batch", self.lib.mc_te_free_batch(self.h, batch))

    def destroy(self):
        if self.h:
            check(self.lib, "mc_te_destroy", self.lib.mc_te_destroy(self.h))
            self.h = _Engine()
