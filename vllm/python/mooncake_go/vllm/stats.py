"""MooncakeGoConnector's transfer counters in vLLM's stats pipeline.

Each worker's get_kv_connector_stats returns a MooncakeGoKVConnectorStats
holding the counters of mc_vllm_take_stats since the previous step; vLLM
ships it to the engine core, sums the workers' with aggregate(), logs
reduce() as "KV Transfer metrics: ..." at each logging interval, and feeds
observe() of the Prometheus metrics built by build_prom_metrics
(vllm:mooncake_go_* counters, one child per engine).
"""

from dataclasses import dataclass, field
from typing import Any, Dict

try:  # the real base classes when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorPromMetrics,
        KVConnectorStats,
    )
except ImportError:  # vLLM absent: the same surface, for tests and tools

    @dataclass
    class KVConnectorStats:
        data: Dict[str, Any] = field(default_factory=dict)

        def to_dict(self):
            return self.data

    class KVConnectorPromMetrics:
        def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
            self._counter_cls = next(v for k, v in metric_types.items() if getattr(k, "__name__", "") == "Counter")
            self._labelnames = labelnames
            self.per_engine_labelvalues = per_engine_labelvalues


# The counters of mc_vllm_take_stats_json; all are sums over workers and
# steps. Bytes are the KV bytes that reached the pool (saves) or the KV
# cache (loads); failed blocks count failed saves, loads and P/D receives;
# busy times are the ns during which a worker had a load (save) in flight.
COUNTERS = ("saved_blocks", "loaded_blocks", "failed_blocks", "saved_bytes", "loaded_bytes", "load_busy_ns", "save_busy_ns")

# Prometheus counter names and help texts (vllm: prefix, as vLLM's own
# connectors; prometheus_client adds _total).
_PROM = {
    "saved_blocks": ("vllm:mooncake_go_saved_blocks", "KV blocks MooncakeGoConnector saved to the pool."),
    "loaded_blocks": ("vllm:mooncake_go_loaded_blocks", "KV blocks MooncakeGoConnector loaded from the pool (external hits)."),
    "failed_blocks": ("vllm:mooncake_go_failed_blocks", "KV blocks whose save, load or P/D receive failed."),
    "saved_bytes": ("vllm:mooncake_go_saved_bytes", "KV bytes MooncakeGoConnector saved to the pool."),
    "loaded_bytes": ("vllm:mooncake_go_loaded_bytes", "KV bytes MooncakeGoConnector loaded from the pool."),
    "load_busy_ns": ("vllm:mooncake_go_load_busy_ns", "Nanoseconds a worker had a pool load in flight (loaded_bytes / this = load throughput)."),
    "save_busy_ns": ("vllm:mooncake_go_save_busy_ns", "Nanoseconds a worker had a pool save in flight (saved_bytes / this = save throughput)."),
}


@dataclass
class MooncakeGoKVConnectorStats(KVConnectorStats):
    """Counters of one interval: data maps each name of COUNTERS to an int
    (blocks or bytes). Serializable (plain dict), as vLLM requires."""

    def __post_init__(self):
        data = dict(self.data or {})
        self.data = {k: int(data.get(k, 0) or 0) for k in COUNTERS}

    def reset(self):
        self.data = {k: 0 for k in COUNTERS}

    def aggregate(self, other):
        """Adds other's counters (another worker's, or a later step's)."""
        for k in COUNTERS:
            self.data[k] += int((getattr(other, "data", None) or {}).get(k, 0) or 0)
        return self

    def reduce(self):
        """The interval's figures for vLLM's log line."""
        d = self.data
        return {
            "Saved blocks": d["saved_blocks"],
            "Loaded blocks": d["loaded_blocks"],
            "Failed blocks": d["failed_blocks"],
            "Saved MiB": round(d["saved_bytes"] / 2**20, 3),
            "Loaded MiB": round(d["loaded_bytes"] / 2**20, 3),
            "Save GB/s": round(d["saved_bytes"] / d["save_busy_ns"], 3) if d["save_busy_ns"] else 0,
            "Load GB/s": round(d["loaded_bytes"] / d["load_busy_ns"], 3) if d["load_busy_ns"] else 0,
        }

    def is_empty(self):
        return not any(self.data.values())


class MooncakeGoPromMetrics(KVConnectorPromMetrics):
    """vllm:mooncake_go_{saved,loaded,failed}_blocks and _{saved,loaded}_bytes
    Prometheus counters, one child per engine index."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {}
        for key, (name, doc) in _PROM.items():
            c = self._counter_cls(name=name, documentation=doc, labelnames=labelnames)
            self._counters[key] = {i: c.labels(*v) for i, v in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data, engine_idx=0):
        data = getattr(transfer_stats_data, "data", transfer_stats_data) or {}
        for key, children in self._counters.items():
            n = int(data.get(key, 0) or 0)
            if n > 0 and engine_idx in children:
                children[engine_idx].inc(n)
