"""Finds and loads libmooncake.so, once per process, on first use.

Loading the library starts a Go runtime in the process (threads, signal
handlers), so nothing here runs at import time: adapters call load() from
the constructor that runs in the final process (after any fork). One Go
runtime per process: every adapter of the mooncake-go distribution goes
through this one loader, so they share one copy of the library.

Search order (the first existing file wins; load() fails if none exists):

1. $MOONCAKE_GO_LIB, when set: exactly that file, no fallback.
2. libmooncake.so in this package's directory (the installed wheel).
3. build/libmooncake.so of the source tree this package sits in
   (abi/python/mooncake_go -> <repo>/build; `make lib` builds it).

The library must speak the C ABI major this package was written for
(ABI_MAJOR, checked against mc_abi_version()); each adapter also checks its
own header's *_abi_version() through require().
"""

import ctypes
import os
import pathlib
import threading

ENV_LIBRARY = "MOONCAKE_GO_LIB"
LIBRARY_NAME = "libmooncake.so"
# mc_abi_version() major (common.h) this package speaks; minors only add.
ABI_MAJOR = 1

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent

_lock = threading.Lock()
_lib = None  # the loaded ctypes.CDLL
_path = None  # its path
_failed = None  # a LibraryLoadError after the file was loaded: it cannot be unloaded
_required = set()  # (symbol, major) checked by require()


class LibraryLoadError(ImportError):
    """libmooncake.so could not be used: not found, not loadable, or of
    another ABI. .tried lists the paths looked at; .path is the file that
    failed (None when nothing was found)."""

    def __init__(self, message, tried, path=None):
        super().__init__(message, path=path)
        self.tried = tuple(tried)


def candidates():
    """The paths load() tries, in order."""
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return [env]
    return [str(_PACKAGE_DIR / LIBRARY_NAME), str(_PACKAGE_DIR.parents[2] / "build" / LIBRARY_NAME)]


def loaded():
    """The path of the loaded library, or None when it was not loaded yet."""
    return _path


def load():
    """Returns the process's libmooncake.so as a ctypes.CDLL, loading it
    (thread-safe, once) on the first call. Raises LibraryLoadError (an
    ImportError) naming the path(s) tried."""
    lib = _lib
    if lib is not None:
        return lib
    with _lock:
        return _load_locked()


class _unpinned:
    """Widens the calling thread's CPU affinity to every CPU the process may
    use while the library loads, then restores it.

    The Go runtime starts in a thread cloned from the loading one and sizes
    itself (GOMAXPROCS) from that thread's affinity; its threads inherit
    it. Engines pin their main thread to one core (vLLM's CPU worker binds
    it to the first core of VLLM_CPU_OMP_THREADS_BIND, where it busy-polls
    its work queue), which would confine every transfer thread to that
    core: loads and saves then ran at a fifth of their speed. Set
    MC_KEEP_AFFINITY=1 to load with the caller's affinity unchanged."""

    def __enter__(self):
        self.saved = None
        if os.environ.get("MC_KEEP_AFFINITY") or not hasattr(os, "sched_setaffinity"):
            return self
        try:
            self.saved = os.sched_getaffinity(0)
            want = set(range(os.cpu_count() or 1))
            if want != self.saved:
                os.sched_setaffinity(0, want)  # the kernel keeps it within the cgroup's cpuset
            else:
                self.saved = None
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            try:
                os.sched_setaffinity(0, self.saved)
            except OSError:
                pass
        return False


def _load_locked():
    global _lib, _path, _failed
    if _lib is not None:
        return _lib
    if _failed is not None:
        raise _failed
    tried = []
    for path in candidates():
        tried.append(path)
        if not os.path.exists(path):
            continue
        with _unpinned():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise LibraryLoadError(f"cannot load {path}: {e}", tried, path) from e
            try:
                version = lib.mc_abi_version
            except AttributeError:
                _failed = LibraryLoadError(f"{path} is not libmooncake.so of mooncake-go: it has no mc_abi_version", tried, path)
                raise _failed from None
            version.restype, version.argtypes = ctypes.c_uint32, []
            v = version()  # waits for the Go runtime's start-up
        if v >> 16 != ABI_MAJOR:
            _failed = LibraryLoadError(
                f"{path} has C ABI version {v >> 16}.{v & 0xFFFF}; this mooncake_go package needs {ABI_MAJOR}.x "
                f"(install matching versions, or point ${ENV_LIBRARY} at a matching libmooncake.so)",
                tried,
                path,
            )
            raise _failed
        lib.mc_last_error.restype, lib.mc_last_error.argtypes = ctypes.c_char_p, []
        lib.mc_buf_free.restype, lib.mc_buf_free.argtypes = None, [ctypes.c_void_p]
        _lib, _path = lib, path
        return lib
    where = f"${ENV_LIBRARY}={tried[0]}" if os.environ.get(ENV_LIBRARY) else "; ".join(tried)
    raise LibraryLoadError(
        f"libmooncake.so not found (tried {where}); build it with `make lib` at the repository root, "
        f"install the mooncake-go distribution, or set ${ENV_LIBRARY} to its path",
        tried,
    )


def require(symbol, major, protos, minor=0):
    """Loads the library, checks that the adapter version function symbol
    (e.g. "mc_store_abi_version") exists and returns the given major and at
    least the given minor, and declares protos ({name: (restype,
    argtypes)}) once. Returns the library. Raises LibraryLoadError when the
    library lacks the adapter, speaks another major of its ABI, or an older
    minor than the calls in protos need."""
    lib = load()
    with _lock:
        if (symbol, major) in _required:
            return lib
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            raise LibraryLoadError(f"{_path} has no {symbol}: this libmooncake.so was built without that adapter", [_path], _path) from None
        fn.restype, fn.argtypes = ctypes.c_uint32, []
        v = fn()
        if v >> 16 != major:
            raise LibraryLoadError(f"{_path}: {symbol}() is {v >> 16}.{v & 0xFFFF}, this package needs {major}.x", [_path], _path)
        if v & 0xFFFF < minor:
            raise LibraryLoadError(
                f"{_path}: {symbol}() is {v >> 16}.{v & 0xFFFF}, this package needs {major}.{minor} or later "
                "(install matching versions of mooncake_go and libmooncake.so)",
                [_path],
                _path,
            )
        for name, (restype, argtypes) in protos.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = restype, argtypes
        _required.add((symbol, major))
        return lib


def last_error(lib):
    """This thread's mc_last_error() as str (call it on the thread that made the failing call)."""
    msg = lib.mc_last_error()
    return msg.decode("utf-8", "replace") if msg else ""
