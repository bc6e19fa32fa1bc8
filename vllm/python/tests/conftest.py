"""Fixtures of the vLLM connector tests: the session's `mooncake master`
and `mooncake node` come from abi/python/tests/conftest.py (same binaries,
same library: $MOONCAKE_GO_LIB or build/libmooncake.so), and both
mooncake_go (abi/python) and mooncake_go.vllm (vllm/python) import from
the source tree."""

import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
ABI_TESTS = REPO / "abi" / "python" / "tests"
for p in (str(ABI_TESTS), str(REPO / "vllm" / "python"), str(REPO / "abi" / "python")):
    if p not in sys.path:
        sys.path.insert(0, p)

_spec = importlib.util.spec_from_file_location("abi_conftest", ABI_TESTS / "conftest.py")
abi_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(abi_conftest)

lib_path = abi_conftest.lib_path
mooncake_bin = abi_conftest.mooncake_bin
master_info = abi_conftest.master_info
master = abi_conftest.master
pool = abi_conftest.pool
child_env = abi_conftest.child_env
free_port = abi_conftest.free_port
