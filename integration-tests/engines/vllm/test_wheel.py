"""The engine processes import our packages from the built wheel when the
make targets say so (MC_WHEEL_SITE): the connector vLLM loads, its
library and the upstream-compatible `mooncake` package are the wheel's,
so what `pip install` gives a user is what these tests run."""

import os
import pathlib
import subprocess
import sys

import pytest

import mcrig

PROBE = "import mooncake_go, mooncake_go.vllm, mooncake, mooncake.store, mooncake.engine; " \
        "print(mooncake_go.__file__); print(mooncake_go.vllm.__file__); print(mooncake.store.__file__); " \
        "print(mooncake_go.load()._name)"


@pytest.mark.skipif(not mcrig.WHEEL_SITE, reason="MC_WHEEL_SITE not set: the tests import the source tree (run through make)")
def test_engine_processes_import_the_wheel():
    env = mcrig.child_env(compat=True)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    site = pathlib.Path(mcrig.WHEEL_SITE).resolve()
    paths = [pathlib.Path(line).resolve() for line in out.stdout.split()]
    assert len(paths) == 4, out.stdout
    for p in paths:
        assert site in p.parents, f"{p} is not inside the unpacked wheel {site}"
    assert os.path.samefile(paths[3], site / "mooncake_go" / "libmooncake.so")
