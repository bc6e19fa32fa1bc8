"""LMCache 0.5.6's built-in Mooncake remote backend on our pool: its
`mooncakestore://` connector (lmcache/v1/storage_backend/connector/
mooncakestore_connector.py, unchanged, from the installed wheel) stores KV
chunks in one process and a fresh process reads them back, through
LMCache's own StorageManager, LocalCPUBackend and RemoteBackend (driver.py),
with the cached LMCache environment's python
(integration-tests/engines/venv.sh lmcache) and our `mooncake` package
(from the built wheel, unpacked by `make wheel-site`) in place of upstream's.

Both of the connector's data paths run:
- save_chunk_meta true (LMCache's default): put_parts(key, header, kv)
  and batch_get_buffer;
- save_chunk_meta false: batch_put_from(keys, ptrs, sizes, ReplicateConfig)
  and batch_get_into (zero-copy on LMCache's registered CPU pool), with a
  partial last chunk that LMCache reshapes from the byte count.

The LMCache process contributes no memory (global segment 0), so every
chunk lands on the pool's `mooncake node` and outlives the writer; the
test then reads each object straight from the pool with our client and
checks its bytes (the 28-byte LMCache header + KV, or the bare KV) against
the digests the writer printed.

Run by `make test-lmcache-mooncake` (part of `make test`).
"""

import hashlib
import json
import os
import pathlib
import struct
import sys
from importlib import metadata

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

LMCACHE_VERSION = "0.5.6"
CONNECTOR_FILE = "lmcache/v1/storage_backend/connector/mooncakestore_connector.py"
RUN_TIMEOUT = float(os.environ.get("MC_ENGINE_CMD_TIMEOUT", 180))
CHUNK_BYTES = 2 * 4 * 256 * 128 * 2  # driver.py's geometry: a full chunk, bf16
TOKEN_BYTES = CHUNK_BYTES // 256
HEADER_BYTES = 28  # LMCache's RemoteMetadata for one KV group: 7 int32
# Three full chunks and a 100-token tail, as one prompt of 868 tokens.
CHUNKS = [256, 256, 256, 100]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = os.environ.get("MC_ENGINE_LOGS")
    if d:
        p = pathlib.Path(d) / "lmcache"
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("lmcache")


@pytest.fixture(scope="module")
def pool(workdir):
    """Master (upstream gflags spellings) + one 256 MiB node, for the module."""
    p = mcrig.Pool(workdir / "pool", nodes=(("lmcnode", "256MiB"),),
                   master_args=["--enable_http_metadata_server=true", "--default_kv_lease_ttl=1000"])
    yield p
    p.stop()


@pytest.fixture(scope="module")
def reader(pool):
    """Our own store client in this process (mooncake_go, no memory
    contributed), to look at what LMCache put in the pool."""
    for d in mcrig.PYTHON_DIRS:
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    os.environ.setdefault("MOONCAKE_GO_LIB", mcrig.lib_path())
    from mooncake_go.store import Store

    st = Store()
    st.setup("127.0.0.1", pool.metadata, 0, 16 << 20, "tcp", "", pool.master)
    yield st
    st.close()


def test_environment():
    """LMCache 0.5.6 with its connector file as the wheel shipped it, and
    no upstream mooncake package for `import mooncake.store` to find."""
    assert metadata.version("lmcache") == LMCACHE_VERSION
    mcrig.unchanged_file("lmcache", CONNECTOR_FILE)
    mcrig.no_upstream_mooncake()


def lmcache_config(path, pool, save_chunk_meta):
    """An LMCache config file as an operator writes one for Mooncake: the
    URL selects the connector, extra_config holds the setup keys (the
    mooncake_ prefix is stripped; upstream's dict setup names the master
    master_server_addr)."""
    path.write_text(
        "chunk_size: 256\n"
        "local_cpu: false\n"
        "max_local_cpu_size: 0.25\n"
        f"remote_url: \"mooncakestore://{pool.master}/\"\n"
        "remote_serde: naive\n"
        "extra_config:\n"
        f"  save_chunk_meta: {str(save_chunk_meta).lower()}\n"
        "  transfer_timeout: 20\n"
        f"  mooncake_master_server_addr: \"{pool.master}\"\n"
        f"  mooncake_metadata_server: \"{pool.metadata}\"\n"
        "  mooncake_local_hostname: \"127.0.0.1\"\n"
        "  mooncake_protocol: tcp\n"
        "  mooncake_global_segment_size: \"0\"\n"
        "  mooncake_local_buffer_size: \"16777216\"\n"
    )
    return path


def run_driver(op, config, plan, workdir, tag):
    log = workdir / f"driver-{tag}-{op}.log"
    env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1", "PYTHONHASHSEED": "0"}, compat=True)
    proc = mcrig.Proc([sys.executable, str(HERE / "driver.py"), op, str(config), str(plan)], log, env=env,
                      name=f"lmcache driver {op}")
    rc = proc.wait(RUN_TIMEOUT)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    assert rc == 0 and summary.get("ok"), f"driver {op} exited {rc}: {summary.get('error')}\n--- {log} ---\n{proc.tail(60)}"
    return summary


@pytest.mark.parametrize("save_chunk_meta", [True, False], ids=["put_parts+batch_get_buffer", "zero-copy"])
def test_chunks_round_trip_through_pool(pool, reader, workdir, tmp_path, save_chunk_meta):
    tag = "meta" if save_chunk_meta else "raw"
    model = f"tiny-llama-{tag}"
    config = lmcache_config(tmp_path / "lmcache.yaml", pool, save_chunk_meta)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"seed": 11 if save_chunk_meta else 12, "model": model, "chunks": CHUNKS}))

    put = run_driver("put", config, plan, workdir, tag)
    assert put["connector"] == "MooncakestoreConnector", put
    assert put["chunks"] == len(CHUNKS)

    # The pool holds exactly LMCache's keys (model@world@worker@hash@dtype),
    # on the node, at LMCache's object sizes.
    want_sizes = [n * TOKEN_BYTES + (HEADER_BYTES if save_chunk_meta else 0) for n in CHUNKS]
    stored = pool.keys(f"{model}@")
    assert sorted(stored) == sorted(put["keys"]), (sorted(stored), put["keys"])
    assert [stored[k] for k in put["keys"]] == want_sizes
    for i, key in enumerate(put["keys"]):
        obj = reader.get(key)
        kv = obj[HEADER_BYTES:] if save_chunk_meta else obj
        assert hashlib.sha256(kv).hexdigest() == put["sha256"][i], f"chunk {i} ({key}): pool bytes differ from LMCache's"
        if save_chunk_meta:
            # LMCache's header: length, format, dtype, then the 4-d shape.
            words = struct.unpack_from("<7i", obj)
            assert words[0] == len(kv) and list(words[3:]) == [2, 4, CHUNKS[i], 128], (key, words)

    got = run_driver("get", config, plan, workdir, tag)
    assert got["chunks"] == len(CHUNKS), got
