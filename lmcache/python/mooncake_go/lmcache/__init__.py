"""mooncake_go.lmcache: the LMCache remote-storage plugin of mooncake-go.

LMCache 0.5.6 loads it with no change to LMCache:

    remote_storage_plugins: ["mooncake_go"]
    extra_config:
      remote_storage_plugin.mooncake_go.module_path: mooncake_go.lmcache
      remote_storage_plugin.mooncake_go.class_name: MooncakeGoConnectorAdapter
      remote_storage_plugin.mooncake_go.master_server_address: "10.0.0.1:50051"
      remote_storage_plugin.mooncake_go.metadata_server: "http://10.0.0.1:8080/metadata"

(class_name MooncakeGoConnector works too: LMCache then builds the
connector itself, without metadata.) See lmcache/README.md for every key.

Importing this package imports neither LMCache nor libmooncake.so: the
classes are loaded on first access (LMCache's getattr of class_name), and
the library when a connector is constructed.
"""

__all__ = ["MooncakeGoConnector", "MooncakeGoConnectorAdapter", "PLUGIN_TYPE"]


def __getattr__(name):
    if name in __all__:
        from . import connector

        return getattr(connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
