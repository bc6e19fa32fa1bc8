"""mooncake: upstream Mooncake's Python API (mooncake.engine, mooncake.store,
the mooncake_master / mooncake_client / mooncake_http_metadata_server tools)
on mooncake-go's core (libmooncake.so and the `mooncake` binary), from the
mooncake-go distribution. Importing it loads nothing."""

try:
    import _mooncake_go_guard
except ImportError:  # this folder is used without the guard module beside it
    pass
else:
    _mooncake_go_guard.check(__path__)
