"""mooncake_go.sglang: the SGLang HiCache storage backend of mooncake-go.

Switch it on with no change to SGLang (0.5.23):

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "mooncake_go",
        "module_path": "mooncake_go.sglang", "class_name": "MooncakeGoHiCacheStorage",
        "interface_v1": 1, "master_server_address": "10.0.0.1:50051",
        "metadata_server": "http://10.0.0.1:8080/metadata"}'

Importing this package loads neither SGLang nor libmooncake.so: the class
is imported from .backend on first access (SGLang's factory does
getattr(module, class_name)), and the library is loaded when a backend is
constructed. See sglang/README.md for every key.
"""

__all__ = ["MooncakeGoHiCacheStorage"]


def __getattr__(name):
    if name == "MooncakeGoHiCacheStorage":
        from .backend import MooncakeGoHiCacheStorage

        return MooncakeGoHiCacheStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
