"""SGLang 0.5.23's built-in Mooncake HiCache backend on our pool: SGLang's
own test of it, sglang/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py
from the installed wheel, run UNCHANGED (its bytes checked against the
wheel's RECORD) as SGLang's authors run it (`python test_mooncake_store.py`:
its batch test takes a config argument, so it is a script, not a pytest
module), with the cached SGLang environment's python
(integration-tests/engines/venv.sh sglang) and our `mooncake` package
(from the built wheel, unpacked by `make wheel-site`) in place of upstream's.

The file builds SGLang's MooncakeStore five times (one MHA and one MLA
rank layout each at TP 1, 4 and 8, plus a single-key case): each one
calls MooncakeDistributedStore.setup, a warm-up put/is_exist/get,
register_buffer, batch_is_exist, batch_put_from and batch_get_into, and
compares the bytes it reads back (see ../UPSTREAM_CALLS.md).

Two ways to deploy it:
- the recipe SGLang's Mooncake docs give (shared/specs/real-engines-on-cpu.md):
  a master and P2PHANDSHAKE metadata, the SGLang process contributing
  the memory (256 MiB global segment);
- a master plus a `mooncake node` holding all the memory (the SGLang
  process contributes none), with the master's HTTP metadata server: the
  objects SGLang stored must then be on the node, exactly as many as the
  test writes, after the SGLang process has exited.

The bundled test never takes SGLang's multi-buffer calls nor its
extra_config route; driver.py drives SGLang's real MooncakeStore through
both (an MLA host pool in layer_first layout), writer and reader in two
processes.

Run by `make test-sglang-mooncake` (part of `make test`).
"""

import json
import os
import pathlib
import re
import subprocess
import sys
from importlib import metadata

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

SGLANG_VERSION = "0.5.23"
TEST_FILE = "sglang/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py"
RUN_TIMEOUT = float(os.environ.get("MC_ENGINE_CMD_TIMEOUT", 180))

# What the unchanged file stores: one 4096-byte key (1024 float32) in its
# single-key case; 13 pages per batch case at 256 float32 (1024 bytes) per
# object, two objects (k, v) per page for MHA and one for MLA, in four
# cases (MHA, MLA, MHA, MLA); and each MooncakeStore's 4 KiB warm-up key.
BATCH_OBJECTS = 13 * (2 + 1 + 2 + 1)
STORES = 5
# SGLang's MOONCAKE_* defaults are rdma and 4 GB; these are what its docs
# set for a TCP deployment on one host.
BASE_ENV = {
    "MOONCAKE_PROTOCOL": "tcp", "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1", "MOONCAKE_DEVICE": "",
    "MC_TCP_BIND_ADDRESS": "127.0.0.1",  # our servers listen on 127.0.0.1 only
}
# Upstream mooncake_master flags SGLang's docs start it with (gflags
# spellings), on top of the free ports mcrig.Pool picks.
MASTER_ARGS = ["--enable_http_metadata_server=true", "--eviction_high_watermark_ratio=0.95"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = os.environ.get("MC_ENGINE_LOGS")
    if d:
        p = pathlib.Path(d) / "sglang"
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("sglang")


@pytest.fixture(scope="module")
def upstream_test():
    """The path of SGLang's own test file, checked unchanged."""
    assert metadata.version("sglang") == SGLANG_VERSION
    return mcrig.unchanged_file("sglang", TEST_FILE)


def test_environment_has_no_upstream_mooncake():
    """The engine environment must not carry upstream's mooncake package,
    so that `import mooncake.store` can only find ours."""
    mcrig.no_upstream_mooncake()


def run_upstream(path, env, log):
    """Runs SGLang's test file as a script in its own folder; returns its
    output. AssertionError with the log tail unless it exits 0 having
    reported every case passed."""
    proc = mcrig.Proc([sys.executable, path], log, env=env, cwd=os.path.dirname(path), name="test_mooncake_store.py")
    rc = proc.wait(RUN_TIMEOUT)
    out = pathlib.Path(log).read_text(errors="replace")
    assert rc == 0, f"SGLang's test_mooncake_store.py exited {rc}\n--- {log} ---\n{proc.tail(80)}"
    # Its own verdict lines: one single-key case, four batch cases, the end.
    assert len(re.findall(r"Single operation passed", out)) == 1, proc.tail(80)
    assert len(re.findall(r"Batch operation passed", out)) == 4, proc.tail(80)
    assert "All tests passed" in out, proc.tail(80)
    # And it ran on ours: every store was set up through our package.
    assert len(re.findall(r"Mooncake store setup successfully", out)) == STORES, proc.tail(80)
    return out


def which_mooncake(env):
    r = subprocess.run([sys.executable, "-c", "import mooncake.store as s; print(s.__file__)"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return pathlib.Path(r.stdout.strip()).resolve()


def test_sglang_own_test_p2p_handshake(upstream_test, workdir):
    """SGLang docs' single-host recipe: master only, P2PHANDSHAKE
    metadata, the SGLang process's five stores contribute 256 MiB each
    (split per TP rank as SGLang does)."""
    pool = mcrig.Pool(workdir / "pool-p2p", nodes=(), master_args=MASTER_ARGS)
    try:
        env = mcrig.child_env({
            **BASE_ENV, "MOONCAKE_MASTER": pool.master, "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": str(256 << 20),
        }, compat=True)
        assert which_mooncake(env) == (mcrig.COMPAT_PYTHON / "mooncake" / "store.py").resolve()
        try:
            run_upstream(upstream_test, env, workdir / "test_mooncake_store-p2p.log")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{pool.tails()}") from None
    finally:
        pool.stop()


def test_sglang_own_test_on_storage_node(upstream_test, workdir):
    """Master + a 256 MiB `mooncake node`, HTTP metadata, the SGLang
    process contributing no memory: after it exits, the pool holds exactly
    the objects it wrote, on the node, at their sizes."""
    pool = mcrig.Pool(workdir / "pool-node", nodes=(("sglnode", "256MiB"),), master_args=MASTER_ARGS)
    try:
        env = mcrig.child_env({
            **BASE_ENV, "MOONCAKE_MASTER": pool.master, "MOONCAKE_TE_META_DATA_SERVER": pool.metadata,
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "0",
        }, compat=True)
        try:
            run_upstream(upstream_test, env, workdir / "test_mooncake_store-node.log")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{pool.tails()}") from None
        keys = pool.keys()
        batch = {k: v for k, v in keys.items() if k.startswith("test_")}
        warm = {k: v for k, v in keys.items() if k.startswith("sglang_mooncake_store_warmup_key")}
        other = {k: v for k, v in keys.items() if k not in batch and k not in warm}
        assert len(batch) == BATCH_OBJECTS and set(batch.values()) == {1024}, sorted(batch.items())[:10]
        # SGLang's key shapes: <page>_<tp rank>_k / _v (MHA), <page>__k (MLA).
        odd = [k for k in batch if not re.fullmatch(r"test_[0-9a-f-]{36}_(\d+_[kv]|_k)", k)]
        assert not odd, odd[:4]
        assert len(warm) == STORES and set(warm.values()) == {4096}, warm
        assert len(other) == 1 and set(other.values()) == {4096}, other  # the single-key case's uuid key
    finally:
        pool.stop()


def run_driver(op, extra, workdir):
    log = workdir / f"driver-{op}.log"
    env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1"}, compat=True)
    proc = mcrig.Proc([sys.executable, str(HERE / "driver.py"), op, json.dumps(extra)], log, env=env, name=f"sglang driver {op}")
    rc = proc.wait(RUN_TIMEOUT)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    assert rc == 0 and summary.get("ok"), f"driver {op} exited {rc}: {summary.get('error')}\n--- {log} ---\n{proc.tail(60)}"
    return summary


def test_sglang_store_multi_buffer_from_extra_config(workdir):
    """SGLang's MooncakeStore configured from extra_config (prefixed keys)
    on an MLA layer_first host pool: batch_put_from_multi_buffers /
    batch_get_into_multi_buffers, a fresh process reads every page back,
    and the pool holds one object per page, on the node, of all layers."""
    pool = mcrig.Pool(workdir / "pool-multi", nodes=(("sglnode", "64MiB"),), master_args=MASTER_ARGS)
    try:
        extra = {
            "master_server_address": pool.master, "metadata_server": pool.metadata, "protocol": "tcp",
            "global_segment_size": 0, "local_hostname": "127.0.0.1", "extra_backend_tag": "mcgo",
        }
        try:
            put = run_driver("set", extra, workdir)
            assert put["prefix"] == "mcgo_tiny-llama-mla", put
            keys = pool.keys()
            pages = {k: v for k, v in keys.items() if k.startswith("mcgo_tiny-llama-mla_page")}
            # One object per page holding its 3 layers (3 x 512 bytes), MLA
            # key shape <prefix>_<page>__k, plus the store's warm-up key.
            assert sorted(pages) == [f"mcgo_tiny-llama-mla_page{i:03d}__k" for i in range(12)], sorted(keys)
            assert set(pages.values()) == {3 * 512}, pages
            run_driver("get", extra, workdir)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{pool.tails()}") from None
    finally:
        pool.stop()
