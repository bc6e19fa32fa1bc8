"""Our LMCache remote-storage plugin, mooncake_go.lmcache, inside LMCache
0.5.6's own storage stack (StorageManager, LocalCPUBackend,
RemoteBackend, its ConnectorManager and InstrumentedRemoteConnector),
loaded as an operator configures it, with no change to LMCache:

    remote_storage_plugins: ["mooncake_go"]
    extra_config:
      remote_storage_plugin.mooncake_go.module_path: mooncake_go.lmcache
      remote_storage_plugin.mooncake_go.class_name: MooncakeGoConnectorAdapter  # or MooncakeGoConnector
      remote_storage_plugin.mooncake_go.master_server_address: ...
      remote_storage_plugin.mooncake_go.metadata_server: ...

One process stores the chunks of a vLLM-shaped KV tensor (3 full chunks
and a partial one), a fresh process reads them back byte for byte through
both construction routes (the adapter with LMCache's metadata, and
class_name naming the connector, which LMCache builds with loop,
local_cpu_backend and config only) and the store settings from either the
plugin's keys or an upstream MOONCAKE_CONFIG_PATH file; prefix lookups
count the leading run of hits; with the master killed, lookups miss fast;
the plugin URL resolves to our adapter beside all of LMCache's built-ins,
and bad configs name the key. plugin_driver.py does the LMCache side.

Run by `make test-lmcache-mooncake` (part of `make test`).
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

RUN_TIMEOUT = float(os.environ.get("MC_ENGINE_CMD_TIMEOUT", 180))
TOKENS = 868  # 3 full 256-token chunks and a 100-token tail
TOKEN_BYTES = 2 * 4 * 2 * 64 * 2  # plugin_driver.py's geometry, bf16


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = os.environ.get("MC_ENGINE_LOGS")
    if d:
        p = pathlib.Path(d) / "lmcache" / "plugin"
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("lmcache-plugin")


@pytest.fixture(scope="module")
def pool(workdir):
    p = mcrig.Pool(workdir / "pool", nodes=(("lmcplugin", "256MiB"),), master_args=["--default_kv_lease_ttl=1000"])
    yield p
    p.stop()


def config_file(path, pool, class_name="MooncakeGoConnectorAdapter", scope_keys=True, extra=""):
    s = "remote_storage_plugin.mooncake_go."
    lines = [
        "chunk_size: 256",
        "local_cpu: false",
        "max_local_cpu_size: 0.25",
        "remote_serde: naive",
        "save_unfull_chunk: true",
        'remote_storage_plugins: ["mooncake_go"]',
        "extra_config:",
        f"  {s}module_path: mooncake_go.lmcache",
        f"  {s}class_name: {class_name}",
    ]
    if scope_keys:
        lines += [
            f'  {s}master_server_address: "{pool.master}"',
            f'  {s}metadata_server: "{pool.metadata}"',
            f'  {s}local_hostname: "127.0.0.1"',
            f"  {s}global_segment_size: 0",
            f"  {s}lookup_timeout_ms: 2000",
        ]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def run_driver(op, config, plan, workdir, tag, env=None, stdin_after=None):
    log = workdir / f"plugin-{tag}-{op}.log"
    env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1", "PYTHONHASHSEED": "0", **(env or {})}, compat=True)
    proc = mcrig.Proc([sys.executable, str(HERE / "plugin_driver.py"), op, str(config), str(plan)], log, env=env,
                      name=f"lmcache plugin driver {op}", stdin=subprocess.PIPE if stdin_after else None)
    if stdin_after:
        proc.wait_line(r"^READY$", RUN_TIMEOUT)
        stdin_after()
        proc.p.stdin.write(b"go\n")
        proc.p.stdin.flush()
    rc = proc.wait(RUN_TIMEOUT)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    assert rc == 0 and summary.get("ok"), f"driver {op} exited {rc}: {summary.get('error')}\n--- {log} ---\n{proc.tail(60)}"
    return summary


def plan_file(tmp_path, model, seed, cls="MooncakeGoConnector"):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"seed": seed, "model": model, "tokens": TOKENS, "class": cls}))
    return p


@pytest.mark.parametrize("route", ["adapter", "class_name"])
def test_chunks_round_trip(pool, workdir, tmp_path, route):
    """Put through one route in one process; a fresh process reads through
    the other route: the same pool keys, bytes equal, exact lengths."""
    model = f"tiny-llama-plugin-{route}"
    cls = {"adapter": "MooncakeGoConnectorAdapter", "class_name": "MooncakeGoConnector"}
    other = "class_name" if route == "adapter" else "adapter"
    plan = plan_file(tmp_path, model, 21 if route == "adapter" else 22)
    put = run_driver("put", config_file(tmp_path / "put.yaml", pool, cls[route]), plan, workdir, route)
    assert put["chunks"] == 4
    if mcrig.WHEEL_SITE:
        # Under make, LMCache imported our plugin and its library from the
        # built wheel (what `pip install` gives a user).
        site = pathlib.Path(mcrig.WHEEL_SITE).resolve()
        for f in (put["module_file"], put["library"]):
            assert site in pathlib.Path(f).resolve().parents, (f, site)
    want_sizes = [256 * TOKEN_BYTES] * 3 + [100 * TOKEN_BYTES]
    assert put["sizes"] == want_sizes
    # The pool holds LMCache's keys, at the chunks' exact lengths (no header).
    stored = pool.keys(f"{model}@")
    assert sorted(stored) == sorted(put["keys"])
    assert [stored[k] for k in put["keys"]] == want_sizes
    got = run_driver("get", config_file(tmp_path / "get.yaml", pool, cls[other]), plan, workdir, route)
    assert got["chunks"] == 4
    assert got["counts"] == {"all": 4, "gap_after_2": 2, "miss_first": 0, "async_all": 4, "async_gap": 2}


def test_mooncake_config_path(pool, workdir, tmp_path):
    """With MOONCAKE_CONFIG_PATH set, the store settings come from that
    upstream Mooncake JSON file (none in the plugin's keys)."""
    mc = tmp_path / "mooncake.json"
    mc.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": pool.metadata,
                              "master_server_address": pool.master, "global_segment_size": 0, "protocol": "tcp"}))
    plan = plan_file(tmp_path, "tiny-llama-plugin-file", 23)
    cfg = config_file(tmp_path / "file.yaml", pool, scope_keys=False)
    env = {"MOONCAKE_CONFIG_PATH": str(mc)}
    put = run_driver("put", cfg, plan, workdir, "file", env=env)
    assert sorted(pool.keys("tiny-llama-plugin-file@")) == sorted(put["keys"])
    run_driver("get", cfg, plan, workdir, "file", env=env)


def test_dead_master_lookups_miss_fast(workdir, tmp_path):
    """A pool of its own; the master is killed while LMCache runs: every
    lookup misses, and only the first one waits at all."""
    p = mcrig.Pool(workdir / "deadpool", nodes=(("lmcdead", "64MiB"),), master_args=["--default_kv_lease_ttl=1000"])
    try:
        plan = plan_file(tmp_path, "tiny-llama-plugin-dead", 24)
        cfg = config_file(tmp_path / "dead.yaml", p)
        run_driver("put", cfg, plan, workdir, "dead")
        out = run_driver("dead", cfg, plan, workdir, "dead", stdin_after=lambda: p.procs[0].stop())
    finally:
        p.stop()
    # Generous bounds (a loaded CI machine): lookup_timeout_ms is 2000, and
    # waiting it out on each of the 40 lookups would take 80 s.
    assert out["first_s"] < 10, out
    assert out["max_rest_s"] < 1, out
    assert out["total_s"] < 20, out


def test_plugin_resolves_to_ours_and_bad_configs_name_the_key(pool, workdir, tmp_path):
    plan = plan_file(tmp_path, "tiny-llama-plugin-resolve", 25)
    out = run_driver("resolve", config_file(tmp_path / "resolve.yaml", pool), plan, workdir, "resolve")
    assert out["ours"] == ["MooncakeGoConnectorAdapter"]
    assert out["builtins"] > 10, out  # every built-in adapter was loaded first
    assert out["picked"] == {
        "plugin://mooncake_go": "MooncakeGoConnectorAdapter",
        "plugin://mooncake_go.b": "MooncakeGoConnectorAdapter",
        "plugin://mooncakestore": "MooncakestoreConnectorAdapter",
        "plugin://redis": "RedisConnectorAdapter",
        "plugin://fs": "FsConnectorAdapter",
        "mooncakestore://127.0.0.1:50051": "MooncakestoreConnectorAdapter",
    }, out["picked"]
    e = out["errors"]
    assert "remote_storage_plugin.mooncake_go.master_server_address is missing" in e["missing_master"], e
    assert "unknown key remote_storage_plugin.mooncake_go.global_segmnet_size" in e["misspelled"], e
    assert "remote_storage_plugin.mooncake_go.replica_num = 0" in e["bad_value"], e
    assert "MOONCAKE_CONFIG_PATH=/nonexistent/mooncake.json" in e["bad_file"], e
    assert "remote_storage_plugin.mooncake_go.kv_shape" in e["no_geometry"], e
    assert "MooncakeGoConnectorAdapter" in e["no_geometry"], e
    chunk = 2 * 4 * 256 * 128 * 2
    assert out["geometry"] == {"full_chunk_size_bytes": chunk, "single_token_size": chunk // 256,
                               "meta_shapes": [[2, 4, 256, 128]]}, out["geometry"]
