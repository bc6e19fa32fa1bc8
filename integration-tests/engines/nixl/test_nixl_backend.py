"""Real NIXL 1.5.1 (PyPI wheel, nixl._api unchanged) loading our backend
plugin libplugin_MOONCAKE_GO.so by name from a plugin folder filled by
`mooncake install-plugin nixl` from the built wheel, with NIXL's own UCX
backend as the control running the same two-process scenario (peer.py).

Run by `make test-nixl-engine` in the cached NIXL environment (venv.sh
nixl); MC_WHEEL_SITE names the unpacked wheel.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import mcrig  # noqa: E402

PEER = HERE / "peer.py"
LOGS = pathlib.Path(os.environ.get("MC_ENGINE_LOGS", "build/engine-logs")) / "nixl"


def wheel_bin():
    site = os.environ.get("MC_WHEEL_SITE")
    return str(pathlib.Path(site) / "mooncake_go" / "bin" / "mooncake") if site else mcrig.mooncake_bin()


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("nixl-plugins")
    args = [wheel_bin(), "install-plugin", "nixl", "--dir", str(d)]
    if not os.environ.get("MC_WHEEL_SITE"):
        args += ["--from", str(mcrig.REPO / "build")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in d.iterdir()) == ["libmooncake.so", "libplugin_MOONCAKE_GO.so"]
    return d


def env_for(backend, plugin_dir):
    env = dict(os.environ)
    env.pop("NIXL_PLUGIN_DIR", None)
    if backend == "MOONCAKE_GO":
        # NIXL_PLUGIN_DIR replaces NIXL's own folder: only ours is there.
        env["NIXL_PLUGIN_DIR"] = str(plugin_dir)
    return env


# Our backend on each of its paths between two processes of one host
# (cross-memory attach, the default; tcp with cma=off), then NIXL's UCX.
@pytest.mark.parametrize("backend,path", [("MOONCAKE_GO", "cma"), ("MOONCAKE_GO", "tcp"), ("UCX", "ucx")])
def test_two_agents(backend, path, plugin_dir, tmp_path):
    LOGS.mkdir(parents=True, exist_ok=True)
    env = env_for(backend, plugin_dir)
    if path == "tcp":
        env["MC_NIXL_PARAMS"] = json.dumps({"cma": "off"})
    target = mcrig.Proc([sys.executable, str(PEER), "target", str(tmp_path), backend], LOGS / f"{backend}-{path}-target.log", env=env, name=f"{backend} target")
    try:
        init = mcrig.Proc([sys.executable, str(PEER), "initiator", str(tmp_path), backend], LOGS / f"{backend}-{path}-initiator.log", env=env, name=f"{backend} initiator")
        m = init.wait_line(r"^RESULT (.*)$", timeout=300)
        rc = init.wait(120)
        res = json.loads(m.group(1))
        tails = f"\n--- initiator ---\n{init.tail()}\n--- target ---\n{target.tail()}"
        assert res["peer"] == "target"
        assert [w["size"] for w in res["writes"]] == [1, 4096, 65536, 1 << 20, (4 << 20) - 3]
        for w in res["writes"]:
            assert w["state"] == "DONE" and w["ack_ok"], f"write of {w['size']} B: {w}{tails}"
        for r in res["reads"]:
            assert r["state"] == "DONE" and r["ok"], f"read of {r['size']} B: {r}{tails}"
        assert res["batch"] == {"write": "DONE", "read": "DONE", "ok": True}, tails
        for e in res["errors"]:
            assert e.get("raised"), f"{e['case']}: the bad request was not refused{tails}"
        assert res["after_errors"], tails
        assert rc == 0, tails
        assert target.wait(120) == 0, target.tail()
        if backend == "MOONCAKE_GO":
            # The plugin's teardown line names the path the posts took.
            m = re.search(r"agent \"initiator\": (\d+) posts by cross-memory attach, (\d+) over tcp", init.log.read_text(errors="replace"))
            assert m, f"no path line in the initiator's log{tails}"
            cma, tcp = int(m.group(1)), int(m.group(2))
            assert (cma > 0 and tcp == 0) if path == "cma" else (cma == 0 and tcp > 0), f"posts: {cma} by cma, {tcp} over tcp{tails}"
    finally:
        target.stop()


PROBE = r"""
import json, sys
import numpy as np
from nixl._api import nixl_agent, nixl_agent_config
out = {}
a = nixl_agent("probe", nixl_agent_config(backends=[]))
out["plugins"] = a.get_plugin_list()
out["params"] = a.get_plugin_params("MOONCAKE_GO")
out["mems"] = a.get_plugin_mem_types("MOONCAKE_GO")
try:
    a.create_backend("MOONCAKE_GO", {"ip_addr": "127.0.0.1", "bogus": "1"})
    out["bad_param"] = "created"
except Exception as e:
    out["bad_param"] = type(e).__name__
b = nixl_agent("probe2", nixl_agent_config(backends=[]))
b.create_backend("MOONCAKE_GO", {"ip_addr": "127.0.0.1"})
out["backend_mems"] = b.get_backend_mem_types("MOONCAKE_GO")
try:
    b.register_memory([(0x7f0000000000, 4096, 0, "")], "VRAM")
    out["vram"] = "registered"
except Exception as e:
    out["vram"] = type(e).__name__
# Loopback: an agent writing into its own registration.
buf = np.zeros(1 << 20, dtype=np.uint8)
buf[: 1 << 19] = np.arange(1 << 19, dtype=np.uint32).view(np.uint8)[: 1 << 19]
b.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
h = b.initialize_xfer("WRITE", b.get_xfer_descs([(buf.ctypes.data, 1 << 19, 0)], "DRAM"),
                      b.get_xfer_descs([(buf.ctypes.data + (1 << 19), 1 << 19, 0)], "DRAM"), "probe2", b"self")
st = b.transfer(h)
import time
deadline = time.monotonic() + 120
while st == "PROC" and time.monotonic() < deadline:
    st = b.check_xfer_state(h)
out["loopback"] = st == "DONE" and bool((buf[: 1 << 19] == buf[1 << 19 :]).all())
notifs = {}
while not notifs and time.monotonic() < deadline:
    notifs = b.get_new_notifs()
out["loopback_notif"] = [m.decode() for m in notifs.get("probe2", [])]
print("PROBE " + json.dumps(out))
"""


def test_plugin_discovery_and_refusals(plugin_dir, tmp_path):
    LOGS.mkdir(parents=True, exist_ok=True)
    p = mcrig.Proc([sys.executable, "-c", PROBE], LOGS / "probe.log", env=env_for("MOONCAKE_GO", plugin_dir), name="nixl probe")
    try:
        out = json.loads(p.wait_line(r"^PROBE (.*)$", timeout=180).group(1))
        assert p.wait(60) == 0, p.tail()
    finally:
        p.stop()
    assert out["plugins"] == ["MOONCAKE_GO"], out
    assert out["params"] == {"cma": "auto", "ip_addr": "", "request_timeout_ms": "60000", "workers": "16"}
    assert out["mems"] == ["DRAM_SEG"]
    assert out["bad_param"] != "created", "an unknown backend parameter must fail the backend's creation"
    assert out["backend_mems"] == ["DRAM_SEG"], "no CUDA here: DRAM only"
    assert out["vram"] != "registered", "VRAM without CUDA must be refused"
    assert out["loopback"] is True
    assert out["loopback_notif"] == ["self"]
