"""Environment variables reach the Go side inside a renamed process.

vLLM renames its processes with setproctitle, which overwrites the memory
holding the process environment; the Go runtime of libmooncake.so reads
its environment from there, so os.Getenv would miss MOONCAKE_CONFIG_PATH.
The library reads variables through libc instead (abi/cbridge.Environ):
each order below must open the pool named only by the config file.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import child_env

PEER = __file__.replace("test_env.py", "env_peer.py")


@pytest.mark.parametrize("order", ["title-first", "load-first", "set-after-load"])
def test_config_path_survives_setproctitle(pool, tmp_path, order):
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({"metadata_server": pool.url, "master_server_address": pool.rpc, "protocol": "tcp"}))
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(__file__).resolve().parents[1]), env["PYTHONPATH"]])
    env.pop("MOONCAKE_CONFIG_PATH", None)
    if order != "set-after-load":
        env["MOONCAKE_CONFIG_PATH"] = str(cfg)
    r = subprocess.run([sys.executable, PEER, order, str(cfg)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok pool open"), f"{order}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
