"""transfer_engine_bench: upstream's transfer-engine benchmark command line,
run by mooncake-go's `mooncake bench transfer` (which takes upstream's
flag names: --mode, --metadata_server, --local_server_name, --segment_id,
--operation, --protocol, --block_size, --batch_size, --threads,
--duration). gflags syntax (see _gflags); --duration in seconds as
upstream; upstream flags without a counterpart (--device_name,
--buffer_size, --gpu_id, --use_vram, --report_unit, --report_precision,
--auto_discovery, ...) are ignored with one warning each.
"""

import sys

from . import _gflags as g

TOOL = "transfer_engine_bench"
B, I, U, S = g.BOOL, g.INT, g.UINT, g.STRING
SPEC = {
    "mode": (S, "initiator"),
    "metadata_server": (S, "192.168.3.77:2379"),
    "local_server_name": (S, ""),
    "segment_id": (S, "192.168.3.76"),
    "operation": (S, "read"),
    "protocol": (S, "rdma"),
    "device_name": (S, "mlx5_2"),
    "nic_priority_matrix": (S, ""),
    "block_size": (U, 65536),
    "batch_size": (I, 128),
    "threads": (I, 12),
    "duration": (I, 10),
    "buffer_size": (U, 1 << 30),
    "gpu_id": (I, -1),
    "use_vram": (B, True),
    "auto_discovery": (B, False),
    "report_unit": (S, "GB"),
    "report_precision": (U, 2),
}
MAPPED = {"mode", "metadata_server", "local_server_name", "segment_id", "operation", "protocol", "block_size", "batch_size", "threads", "duration"}


def translate(argv):
    p = g.parse(TOOL, argv, SPEC)
    v = p.values
    warnings = [f"--{n}={g.show(v[n])} is accepted for compatibility and ignored" for n in sorted((set(SPEC) - MAPPED) & p.given)]
    if p.help or p.version:
        return None, warnings, p
    protocol = v["protocol"]
    if protocol not in ("tcp", "shm"):
        warnings.append(f"--protocol={protocol} is not built into mooncake-go: using tcp")
        protocol = "tcp"
    args = ["bench", "transfer", f"--mode={v['mode']}", f"--operation={v['operation']}", f"--protocol={protocol}",
            f"--block_size={v['block_size']}", f"--batch_size={v['batch_size']}", f"--threads={v['threads']}",
            f"--duration={v['duration']}s"]
    for n in ("metadata_server", "local_server_name", "segment_id"):
        if p.set(n):
            args.append(f"--{n}={v[n]}")
    return args, warnings, p


def usage():
    """The --help text."""
    return f"usage: {TOOL} [--flag=value ...]\nUpstream's transfer_engine_bench flags, run by `mooncake bench transfer`. Mapped: {', '.join(sorted(MAPPED))}."


def main(argv=None):
    """Entry point of the transfer_engine_bench console script."""
    return g.run_tool(TOOL, translate, usage, argv)


if __name__ == "__main__":
    sys.exit(main())
