"""mooncake_go: Python access to libmooncake.so, the one shared library of
mooncake-go (all its C ABIs, one Go runtime per process).

Importing this package, or any module of it, loads nothing: the library
(and with it a Go runtime) is loaded on first use, by load() or by the
first Store.setup(), in the process that uses it (after any fork).

    from mooncake_go import Store
    with Store() as s:
        s.setup("10.0.0.2", "http://10.0.0.1:8080/metadata", 0, 64 << 20, "tcp", "", "10.0.0.1:50051")
        s.put("key", b"value")

The engine adapters (mooncake_go.vllm, .sglang, .lmcache) load the library
through the same loader, so they share one copy of it.
"""

# The engine adapters are subpackages that live in each adapter's python/
# folder of the source tree (vllm/python/mooncake_go/vllm, ...) and are
# mapped into this package by the distribution; from a source checkout,
# any mooncake_go folder on sys.path contributes its subpackages.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from ._lib import ENV_LIBRARY, LibraryLoadError, candidates, load, loaded
from .errors import (
    AlreadyExistsError,
    BufferOverflowError,
    InvalidArgumentError,
    InvalidHandleError,
    LeaseExpiredError,
    MooncakeError,
    NoSpaceError,
    NotFoundError,
    NotRegisteredError,
    UnsupportedError,
)
from .store import MooncakeDistributedStore, Store

__all__ = [
    "ENV_LIBRARY",
    "AlreadyExistsError",
    "BufferOverflowError",
    "InvalidArgumentError",
    "InvalidHandleError",
    "LeaseExpiredError",
    "LibraryLoadError",
    "MooncakeDistributedStore",
    "MooncakeError",
    "NoSpaceError",
    "NotFoundError",
    "NotRegisteredError",
    "Store",
    "UnsupportedError",
    "candidates",
    "load",
    "loaded",
]
