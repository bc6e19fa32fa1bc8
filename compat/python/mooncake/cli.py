"""mooncake_master: upstream Mooncake's master command line, run by
mooncake-go's `mooncake master`.

Every flag of upstream's mooncake_master is accepted with upstream's
spelling (gflags syntax, see _gflags) and upstream's default, including
the embedded HTTP metadata server, which is off unless
``--enable_http_metadata_server=true`` (``mooncake master`` on its own has
it on). The flags then fall in three groups (``MAPPED``, ``IGNORED``,
``UNSUPPORTED_WHEN_ON``):

* mapped: passed to ``mooncake master`` with the same meaning (``--port``
  and ``--rpc_port`` become ``--rpc_port``; duration flags such as
  ``--default_kv_lease_ttl=5s`` become milliseconds; ``--rpc_interface``
  is resolved to its IPv4 address; ``--enable_ha`` with ``--etcd_endpoints``
  or ``--ha_backend_connstring``);
* ignored with one warning line each when given: tuning knobs of
  upstream's implementation that have no counterpart here (thread counts,
  task-manager limits, NoF, CXL paths, ...);
* refused with one error line and exit status 2 when switched on:
  features mooncake-go does not have (CXL, snapshots, OpLog, KV events,
  multi-tenancy, promotion on hit, dynamic replication, a master config
  file).

A flag upstream does not have either is an error, as in gflags.
"""

import socket
import struct
import sys

from . import _gflags as g

TOOL = "mooncake_master"

B, I, U, D, S = g.BOOL, g.INT, g.UINT, g.DOUBLE, g.STRING

# name -> (kind, upstream default)
SPEC = {
    "config_path": (S, ""),
    "port": (I, 50051),
    "max_threads": (I, 16),
    "enable_metric_reporting": (B, True),
    "metrics_port": (I, 9003),
    "metrics_host": (S, "0.0.0.0"),
    "default_kv_lease_ttl": (S, "10000"),
    "default_kv_soft_pin_ttl": (S, "1800000"),
    "max_kv_soft_pin_ttl": (S, "86400000"),
    "allow_evict_soft_pinned_objects": (B, True),
    "eviction_ratio": (D, 0.05),
    "eviction_high_watermark_ratio": (D, 0.90),
    "nof_eviction_ratio": (D, 0.05),
    "nof_eviction_high_watermark_ratio": (D, 0.90),
    "rpc_thread_num": (I, 0),
    "rpc_port": (I, 0),
    "rpc_address": (S, "0.0.0.0"),
    "rpc_interface": (S, ""),
    "rpc_conn_timeout_seconds": (I, 0),
    "rpc_enable_tcp_no_delay": (B, True),
    "enable_ha": (B, False),
    "enable_offload": (B, False),
    "offload_on_evict": (B, False),
    "offload_force_evict": (B, False),
    "offloading_queue_limit": (U, 50000),
    "offload_cap_ratio": (D, 0.5),
    "promotion_on_hit": (B, False),
    "promotion_admission_threshold": (U, 2),
    "promotion_queue_limit": (U, 50000),
    "promotion_max_per_heartbeat": (U, 1),
    "dynamic_replication_mode": (S, "off"),
    "dynamic_replication_heat_window_seconds": (U, 10),
    "dynamic_replication_admission_qps_threshold": (D, 0.8),
    "dynamic_replication_max_memory_replicas": (U, 2),
    "enable_kv_events": (B, False),
    "kv_events_bind_endpoint": (S, ""),
    "kv_events_model_name": (S, ""),
    "kv_events_backend_id": (S, ""),
    "kv_events_tenant_id": (S, "default"),
    "kv_events_additional_salt": (S, ""),
    "kv_events_lora_name": (S, ""),
    "kv_events_block_size": (U, 0),
    "kv_events_dp_rank": (U, 0),
    "kv_events_emit_legacy_compat": (B, True),
    "kv_events_emit_object_key": (B, True),
    "kv_events_queue_capacity": (U, 65536),
    "ha_backend_type": (S, "etcd"),
    "ha_backend_connstring": (S, ""),
    "etcd_endpoints": (S, ""),
    "client_ttl": (I, 10),
    "nof_heartbeat_interval_sec": (I, 10),
    "nof_heartbeat_probe_timeout_ms": (U, 1000),
    "nof_heartbeat_failures_threshold": (U, 3),
    "root_fs_dir": (S, ""),
    "global_file_segment_size": (I, 0),
    "cluster_id": (S, "mooncake_cluster"),
    "enable_oplog": (B, False),
    "oplog_poll_interval_ms": (I, 1000),
    "oplog_batch_max_entries": (U, 1024),
    "batch_oplog_retry_timeout_sec": (U, 180),
    "memory_allocator": (S, "offset"),
    "allocation_strategy": (S, "random"),
    "enable_http_metadata_server": (B, False),
    "http_metadata_server_port": (I, 8080),
    "http_metadata_server_host": (S, "0.0.0.0"),
    "enable_metadata_cleanup_on_timeout": (B, False),
    "pod_name": (S, ""),
    "pod_namespace": (S, ""),
    "put_start_discard_timeout_sec": (U, 30),
    "put_start_release_timeout_sec": (U, 600),
    "enable_disk_eviction": (B, True),
    "quota_bytes": (U, 0),
    "enable_multi_tenants": (B, False),
    "tenant_quota_connector_type": (S, "file"),
    "tenant_quota_connector_uri": (S, ""),
    "snapshot_backup_dir": (S, ""),
    "enable_snapshot_restore": (B, False),
    "enable_snapshot": (B, False),
    "snapshot_interval_seconds": (U, 60),
    "snapshot_child_timeout_seconds": (U, 300),
    "snapshot_retention_count": (U, 3),
    "snapshot_object_store_type": (S, ""),
    "snapshot_payload_store_type": (S, ""),
    "snapshot_payload_backend_type": (S, ""),
    "snapshot_catalog_store_type": (S, ""),
    "snapshot_catalog_backend_type": (S, ""),
    "snapshot_catalog_store_connstring": (S, ""),
    "snapshot_catalog_backend_connstring": (S, ""),
    "max_total_finished_tasks": (U, 10000),
    "max_total_pending_tasks": (U, 10000),
    "max_total_processing_tasks": (U, 10000),
    "pending_task_timeout_sec": (U, 300),
    "processing_task_timeout_sec": (U, 300),
    "max_retry_attempts": (U, 10),
    "cxl_path": (S, "/dev/dax0.0"),
    "cxl_size": (U, 8 << 30),
    "enable_cxl": (B, False),
}

# Passed on to `mooncake master` (same meaning; see translate()).
MAPPED = {
    "port", "rpc_port", "rpc_address", "rpc_interface", "metrics_port", "metrics_host",
    "default_kv_lease_ttl", "default_kv_soft_pin_ttl", "allow_evict_soft_pinned_objects",
    "eviction_ratio", "eviction_high_watermark_ratio", "enable_ha", "ha_backend_type",
    "ha_backend_connstring", "etcd_endpoints", "client_ttl", "cluster_id", "allocation_strategy",
    "enable_http_metadata_server", "http_metadata_server_port", "http_metadata_server_host",
    "put_start_discard_timeout_sec", "put_start_release_timeout_sec", "enable_offload", "offload_on_evict",
}

# Features mooncake-go does not have: an error when switched on.
UNSUPPORTED_WHEN_ON = {
    "config_path": "a master config file (pass the settings as flags)",
    "enable_cxl": "CXL memory",
    "enable_snapshot": "snapshots of the master's data (with --enable_ha the object table is replicated through etcd instead)",
    "enable_snapshot_restore": "restoring the master from a snapshot",
    "enable_oplog": "the batch-record OpLog (with --enable_ha the object table is replicated through etcd instead)",
    "enable_kv_events": "KV cache events over ZMQ",
    "enable_multi_tenants": "multi-tenant quotas",
    "promotion_on_hit": "promotion of disk-only objects to memory on a hit (a read of a disk-only object is staged back on its own)",
    "dynamic_replication_mode": "dynamic memory replication",
}

# Everything else upstream has: accepted, no effect here, one warning when given.
IGNORED = set(SPEC) - MAPPED - set(UNSUPPORTED_WHEN_ON)

STRATEGIES = {"random", "free_ratio_first", "local_first"}


def interface_ipv4(name):
    """IPv4 address of network interface name (SIOCGIFADDR), or None."""
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("256s", name.encode()[:15])
            res = fcntl.ioctl(s.fileno(), 0x8915, req)  # SIOCGIFADDR
        return socket.inet_ntoa(res[20:24])
    except (OSError, ImportError):
        return None


def _bool(v):
    return "true" if v else "false"


def translate(argv):
    """(arguments of `mooncake master`, warning lines, the parsed command
    line) for upstream argv; the arguments are None for --help and
    --version. Raises g.UsageError with one line for what cannot be
    honoured."""
    p = g.parse(TOOL, argv, SPEC)
    v = p.values
    warnings = []
    if p.help or p.version:
        return None, warnings, p
    for name, what in UNSUPPORTED_WHEN_ON.items():
        if v[name] not in ("", False, "off"):
            raise g.UsageError(f"{TOOL}: --{name}={g.show(v[name])}: unsupported: {what} is not implemented by mooncake-go")
    for name in sorted(IGNORED & p.given):
        warnings.append(f"--{name}={g.show(v[name])} is accepted for compatibility and ignored (upstream tuning with no counterpart in mooncake-go)")
    if p.positional:
        warnings.append(f"ignoring non-flag arguments {p.positional} (as upstream)")
    strategy = v["allocation_strategy"]
    if strategy not in STRATEGIES:
        raise g.UsageError(f"{TOOL}: --allocation_strategy={strategy}: unsupported: mooncake-go places replicas with random, free_ratio_first or local_first")
    rpc_port = v["rpc_port"] or v["port"]
    rpc_address = v["rpc_address"]
    if v["rpc_interface"]:
        ip = interface_ipv4(v["rpc_interface"])
        if ip is None:
            raise g.UsageError(f"{TOOL}: --rpc_interface={v['rpc_interface']}: no such interface with an IPv4 address")
        rpc_address = ip
    lease = g.parse_duration_ms(TOOL, "default_kv_lease_ttl", v["default_kv_lease_ttl"])
    soft_pin = g.parse_duration_ms(TOOL, "default_kv_soft_pin_ttl", v["default_kv_soft_pin_ttl"])
    g.parse_duration_ms(TOOL, "max_kv_soft_pin_ttl", v["max_kv_soft_pin_ttl"])
    for name in ("eviction_ratio",):
        if not 0.0 <= v[name] <= 1.0:
            raise g.UsageError(f"{TOOL}: --{name}={v[name]}: must be between 0.0 and 1.0")
    args = [
        "master",
        f"--rpc_port={rpc_port}",
        f"--rpc_address={rpc_address}",
        f"--metrics_port={v['metrics_port']}",
        f"--metrics_host={v['metrics_host']}",
        f"--enable_http_metadata_server={_bool(v['enable_http_metadata_server'])}",
        f"--http_metadata_server_port={v['http_metadata_server_port']}",
        f"--http_metadata_server_host={v['http_metadata_server_host']}",
        f"--default_kv_lease_ttl={lease}",
        f"--default_kv_soft_pin_ttl={soft_pin}",
        f"--allow_evict_soft_pinned_objects={_bool(v['allow_evict_soft_pinned_objects'])}",
        f"--eviction_ratio={v['eviction_ratio']}",
        f"--eviction_high_watermark_ratio={v['eviction_high_watermark_ratio']}",
        f"--client_ttl={v['client_ttl']}",
        f"--put_start_discard_timeout_sec={v['put_start_discard_timeout_sec']}",
        f"--put_start_release_timeout_sec={v['put_start_release_timeout_sec']}",
        f"--allocation_strategy={strategy}",
        f"--enable_offload={_bool(v['enable_offload'])}",
        f"--offload_on_evict={_bool(v['offload_on_evict'])}",
        f"--cluster_id={v['cluster_id']}",
    ]
    if v["enable_ha"]:
        if v["ha_backend_type"] != "etcd":
            raise g.UsageError(f"{TOOL}: --ha_backend_type={v['ha_backend_type']}: unsupported: mooncake-go's HA runs on etcd only")
        endpoints = v["ha_backend_connstring"] or v["etcd_endpoints"]
        if endpoints.startswith("etcd://"):
            endpoints = endpoints[len("etcd://"):]
        if not endpoints:
            raise g.UsageError(f"{TOOL}: --enable_ha needs --etcd_endpoints (or --ha_backend_connstring)")
        args += ["--enable_ha=true", f"--etcd_endpoints={endpoints}"]
    elif p.set("etcd_endpoints") or p.set("ha_backend_connstring"):
        warnings.append("--etcd_endpoints / --ha_backend_connstring are ignored without --enable_ha=true (as upstream)")
    return args, warnings, p


def usage():
    return (
        f"usage: {TOOL} [--flag=value ...]\n"
        "Upstream Mooncake's mooncake_master flags, run by mooncake-go's `mooncake master`.\n"
        f"Mapped: {', '.join(sorted(MAPPED))}.\n"
        f"Refused when switched on: {', '.join(sorted(UNSUPPORTED_WHEN_ON))}.\n"
        "Every other upstream flag is accepted and ignored with a warning.\n"
    )


def main(argv=None):
    """Entry point of the mooncake_master console script."""
    return g.run_tool(TOOL, translate, usage, argv)


if __name__ == "__main__":
    sys.exit(main())
