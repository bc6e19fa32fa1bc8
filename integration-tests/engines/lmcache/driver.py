"""LMCache 0.5.6's own storage stack, on CPU, with its built-in
`mooncakestore://` remote backend on our pool.

    python driver.py put CONFIG.yaml PLAN.json   # store the chunks of PLAN
    python driver.py get CONFIG.yaml PLAN.json   # read them back, check bytes

CONFIG.yaml is an ordinary LMCache config file (what LMCACHE_CONFIG_FILE
names), loaded with LMCacheEngineConfig.from_file; its remote_url is
mooncakestore://... and its extra_config carries the mooncake_* setup keys.
PLAN.json: {"seed": int, "model": str, "chunks": [num_tokens, ...]}: one
KV chunk per entry (256 = a full chunk; fewer = the last, partial chunk of
a prompt). The bytes of chunk i are a function of (seed, i) only, so the
`get` process, a fresh one, knows what it must read.

LMCache's StorageManager builds the backends from the config as it does
inside vLLM (LocalCPUBackend + RemoteBackend, which creates the connector
through LMCache's adapter registry); chunks go in with
StorageManager.batched_put and come back with StorageManager.batched_get
limited to the RemoteBackend, so they can only come from the pool. The
last line printed is a JSON summary (put: the pool keys and the sha256 of
each chunk's KV bytes); exit 0 when every check passed, 1 with the
reason otherwise.
"""

import hashlib
import json
import os
import sys
import time
import traceback

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager

# A small model's KV geometry: 4 layers, K and V, 2 KV heads of 64, bf16:
# a full 256-token chunk is 2*4*256*128*2 = 512 KiB.
LAYERS, KV_HEADS, HEAD_DIM, CHUNK = 4, 2, 64, 256
DTYPE = torch.bfloat16
REMOTE = "RemoteBackend"
DEADLINE_S = 60


_managers = []  # open StorageManagers, closed by fail()


def fail(msg):
    """Prints the failure summary and exits 1. The managers are closed
    first (best effort), then the process leaves with os._exit: a
    StorageManager's event-loop thread is not a daemon and would keep a
    plain exit waiting."""
    print(json.dumps({"ok": False, "error": msg}), flush=True)
    for sm in _managers:
        try:
            sm.close()
        except Exception:  # noqa: BLE001 - already failing; the summary is out
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def metadata(model):
    return LMCacheMetadata(
        model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=DTYPE, kv_shape=(LAYERS, 2, CHUNK, KV_HEADS, HEAD_DIM), chunk_size=CHUNK,
    )


def chunk_shape(num_tokens):
    # LMCache's KV_2LTD layout: [K/V, layers, tokens, heads*head_dim].
    return torch.Size([2, LAYERS, num_tokens, KV_HEADS * HEAD_DIM])


def chunk_bytes(seed, i, num_tokens):
    """The deterministic content of chunk i: bf16 values from a seeded
    generator (as uint8 bytes)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + i)
    return torch.randn(chunk_shape(num_tokens), generator=g).to(DTYPE).view(torch.uint8).flatten()


def chunk_key(model, seed, i, ns="chunk"):
    """Chunk i's key; ns="absent" gives keys no put ever writes."""
    h = int.from_bytes(hashlib.sha256(f"{ns}/{seed}/{i}".encode()).digest()[:8], "little")
    return CacheEngineKey(model, 1, 0, h, DTYPE)


def open_manager(config_path, model):
    config = LMCacheEngineConfig.from_file(config_path)
    if not str(config.remote_url or "").startswith("mooncakestore://"):
        fail(f"{config_path}: remote_url {config.remote_url!r} is not a mooncakestore:// URL")
    sm = StorageManager(config, metadata(model), EventManager())
    _managers.append(sm)
    backend = sm.storage_backends.get(REMOTE)
    if backend is None or backend.connection is None:
        fail(f"LMCache made no connected {REMOTE} (backends {list(sm.storage_backends)}); see its log above")
    inner = getattr(backend.connection, "_connector", backend.connection)  # under InstrumentedRemoteConnector
    return sm, backend, type(inner).__name__


def put(config_path, plan):
    model, seed, sizes = plan["model"], plan["seed"], plan["chunks"]
    sm, backend, conn = open_manager(config_path, model)
    keys, objs, digests = [], [], []
    for i, n in enumerate(sizes):
        obj = sm.allocate(chunk_shape(n), DTYPE, MemoryFormat.KV_2LTD)
        if obj is None:
            fail(f"LocalCPUBackend could not allocate chunk {i} ({n} tokens)")
        data = chunk_bytes(seed, i, n)
        obj.raw_data.view(torch.uint8).flatten().copy_(data)
        keys.append(chunk_key(model, seed, i))
        objs.append(obj)
        digests.append(hashlib.sha256(data.numpy().tobytes()).hexdigest())
    t0 = time.monotonic()
    sm.batched_put(keys, objs)  # non-blocking: the remote put runs on LMCache's loop
    deadline = time.monotonic() + DEADLINE_S
    while True:
        pending = [k for k in keys if backend.exists_in_put_tasks(k) or not backend.contains(k)]
        if not pending:
            break
        if time.monotonic() > deadline:
            fail(f"{len(pending)} of {len(keys)} chunks not in the pool {DEADLINE_S} s after batched_put "
                 f"(put failures counted by LMCache: {backend.put_failed_count})")
        time.sleep(0.05)
    put_s = time.monotonic() - t0
    if backend.put_failed_count:
        fail(f"LMCache counted {backend.put_failed_count} failed remote puts")
    sm.close()
    return {"ok": True, "op": "put", "connector": conn, "chunks": len(keys), "put_s": round(put_s, 3),
            "keys": [k.to_string() for k in keys], "sha256": digests}


def get(config_path, plan):
    model, seed, sizes = plan["model"], plan["seed"], plan["chunks"]
    sm, backend, conn = open_manager(config_path, model)
    keys = [chunk_key(model, seed, i) for i in range(len(sizes))]
    missing = chunk_key(model, seed, 0, ns="absent")
    if backend.contains(missing):
        fail(f"contains() says yes for a key nobody stored: {missing.to_string()}")
    absent = [k.to_string() for k in keys if not backend.contains(k)]
    if absent:
        fail(f"contains() says no for stored keys: {absent}")
    t0 = time.monotonic()
    got = sm.batched_get(keys, location=REMOTE)
    get_s = time.monotonic() - t0
    checked = 0
    for i, (n, obj) in enumerate(zip(sizes, got)):
        if obj is None:
            fail(f"chunk {i} ({keys[i].to_string()}): batched_get returned None")
        if tuple(obj.get_shape()) != tuple(chunk_shape(n)):
            fail(f"chunk {i}: shape {tuple(obj.get_shape())}, want {tuple(chunk_shape(n))}")
        data = obj.raw_data.view(torch.uint8).flatten()[: obj.get_size()]
        want = chunk_bytes(seed, i, n)
        if data.numel() != want.numel() or not torch.equal(data, want):
            fail(f"chunk {i} ({n} tokens): bytes differ from what was stored "
                 f"({data.numel()} vs {want.numel()} bytes)")
        checked += 1
        obj.ref_count_down()
    none = sm.batched_get([missing], location=REMOTE)
    if none and none[0] is not None:
        fail("batched_get of a key nobody stored returned an object")
    sm.close()
    return {"ok": True, "op": "get", "connector": conn, "chunks": checked, "get_s": round(get_s, 3)}


def main(argv):
    if len(argv) != 4 or argv[1] not in ("put", "get"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[3]) as f:
        plan = json.load(f)
    try:
        out = (put if argv[1] == "put" else get)(argv[2], plan)
    except Exception:  # noqa: BLE001 - any LMCache error is a failed check, reported with its trace
        traceback.print_exc()
        fail(f"{argv[1]} raised: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
