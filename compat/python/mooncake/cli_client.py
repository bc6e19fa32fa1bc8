"""mooncake_client: upstream Mooncake's standalone store process (the
"real client" that contributes DRAM to the pool), run by mooncake-go's
`mooncake node`.

Upstream's flags and defaults, gflags syntax (see _gflags):

* ``--master_server_address`` (127.0.0.1:50051) -> ``--master``;
  ``--metadata_server`` (http://127.0.0.1:8080/metadata) -> the same;
  ``--global_segment_size`` ("4 GB"; upstream's size spellings) ->
  ``--segment-size``; ``--protocol`` (tcp; any other value is warned about
  and tcp used, as mooncake.engine does); ``--host`` (0.0.0.0) -> the
  node's segment name and bind address when it is a specific host (with
  0.0.0.0 the node binds every interface and names itself).
* Ignored with one warning each when given: ``--port`` (upstream serves
  an RPC for "dummy" clients on it; mooncake-go's node has no such
  service), ``--local_buffer_size``, ``--threads``, ``--device_names``,
  ``--tenant_id``, ``--enable_offload`` (the SSD tier is
  ``mooncake node --storage_root_dir``), ``--start_offload_rpc_server``,
  ``--enable_http_server``, ``--http_port``.

A flag upstream does not have either is an error, as in gflags.
"""

import ipaddress
import sys

from . import _gflags as g

TOOL = "mooncake_client"

B, I, S = g.BOOL, g.INT, g.STRING
SPEC = {
    "host": (S, "0.0.0.0"),
    "metadata_server": (S, "http://127.0.0.1:8080/metadata"),
    "device_names": (S, ""),
    "master_server_address": (S, "127.0.0.1:50051"),
    "protocol": (S, "tcp"),
    "port": (I, 50052),
    "global_segment_size": (S, "4 GB"),
    "local_buffer_size": (S, "0"),
    "threads": (I, 1),
    "tenant_id": (S, "default"),
    "enable_offload": (B, False),
    "start_offload_rpc_server": (B, True),
    "enable_http_server": (B, False),
    "http_port": (I, 9300),
}
MAPPED = {"host", "metadata_server", "master_server_address", "protocol", "global_segment_size"}
IGNORED = set(SPEC) - MAPPED


def _is_ip(h):
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return False


def translate(argv):
    """(arguments of `mooncake node`, warning lines, parsed command line);
    the arguments are None for --help / --version. Raises g.UsageError."""
    p = g.parse(TOOL, argv, SPEC)
    v = p.values
    warnings = []
    if p.help or p.version:
        return None, warnings, p
    for name in sorted(IGNORED & p.given):
        warnings.append(f"--{name}={g.show(v[name])} is accepted for compatibility and ignored (mooncake-go's `mooncake node` has no counterpart)")
    if p.positional:
        warnings.append(f"ignoring non-flag arguments {p.positional} (as upstream)")
    protocol = v["protocol"]
    if protocol != "tcp":
        warnings.append(f"--protocol={protocol} is not built into mooncake-go: the node uses tcp")
        protocol = "tcp"
    size = v["global_segment_size"]
    from .store import parse_size  # no library load: store.py loads it at setup

    if parse_size(size) in (None, 0):
        raise g.UsageError(f"--global_segment_size={g.show(size)}: not a size (want e.g. 4GB, 512MB or a byte count above 0)")
    args = [
        "node",
        f"--master={v['master_server_address']}",
        f"--metadata_server={v['metadata_server']}",
        f"--segment-size={v['global_segment_size']}",
        f"--protocol={protocol}",
    ]
    host = v["host"]
    if host.rpartition(":")[2].isdigit() and host.count(":") == 1:
        host = host.rpartition(":")[0]
    if host and host not in ("0.0.0.0", "::"):
        args.append(f"--local_hostname={host}")
        if _is_ip(host):
            args.append(f"--bind={host}:0" if ":" not in host else f"--bind=[{host}]:0")
    return args, warnings, p


def usage():
    """The --help text."""
    return (f"usage: {TOOL} [--flag=value ...]\nUpstream's mooncake_client flags, run by mooncake-go's `mooncake node`.\n"
            f"Mapped: {', '.join(sorted(MAPPED))}; ignored with a warning: {', '.join(sorted(IGNORED))}.")


def main(argv=None):
    """Entry point of the mooncake_client console script."""
    return g.run_tool(TOOL, translate, usage, argv)


if __name__ == "__main__":
    sys.exit(main())
