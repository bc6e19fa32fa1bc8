"""LMCache 0.5.6's own storage stack, on CPU, with our remote-storage
plugin mooncake_go.lmcache (remote_storage_plugins: ["mooncake_go"]).

    python plugin_driver.py put CONFIG.yaml PLAN.json     # store the chunks of PLAN
    python plugin_driver.py get CONFIG.yaml PLAN.json     # read them back, check bytes and lookups
    python plugin_driver.py dead CONFIG.yaml PLAN.json    # lookups before/after the master dies (stdin: go)
    python plugin_driver.py resolve CONFIG.yaml PLAN.json # adapter choice and config errors, no pool

CONFIG.yaml is an ordinary LMCache config file (LMCACHE_CONFIG_FILE)
naming the plugin in remote_storage_plugins. PLAN.json: {"seed", "model",
"tokens", "plugin" (the remote_storage_plugins entry, default
mooncake_go), "class" (the connector class expected)}. The chunks are cut
from one vLLM-shaped KV tensor of the prompt, [num_layers, 2, tokens,
num_kv_heads, head_size] (what LMCacheMetadata.kv_shape describes),
into LMCache's KV_2LTD chunks [2, num_layers, <=256, heads*head_size];
its values are a function of the seed only, so a fresh `get` process
knows what it must read. The last line printed is a JSON summary; exit
0 when every check passed, 1 with the reason otherwise.
"""

import asyncio
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
from lmcache.v1.storage_backend.connector import ConnectorManager
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
from lmcache.v1.storage_backend.storage_manager import StorageManager

LAYERS, KV_HEADS, HEAD_DIM, CHUNK = 4, 2, 64, 256
DTYPE = torch.bfloat16
DEADLINE_S = 60

_managers = []


def fail(msg):
    print(json.dumps({"ok": False, "error": msg}), flush=True)
    for sm in _managers:
        try:
            sm.close()
        except Exception:  # noqa: BLE001
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def metadata(model):
    return LMCacheMetadata(
        model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=DTYPE, kv_shape=(LAYERS, 2, CHUNK, KV_HEADS, HEAD_DIM), chunk_size=CHUNK,
    )


def kv_tensor(seed, tokens):
    """The prompt's KV as a vLLM-shaped tensor [layers, 2, tokens, heads, head_dim]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn((LAYERS, 2, tokens, KV_HEADS, HEAD_DIM), generator=g).to(DTYPE)


def chunks(seed, tokens):
    """LMCache's KV_2LTD chunks of the prompt, as uint8 tensors."""
    kv = kv_tensor(seed, tokens)
    out = []
    for start in range(0, tokens, CHUNK):
        part = kv[:, :, start:start + CHUNK]  # [L, 2, T, H, D]
        out.append(part.permute(1, 0, 2, 3, 4).reshape(2, LAYERS, part.shape[2], KV_HEADS * HEAD_DIM).contiguous())
    return out


def chunk_key(model, seed, i, ns="chunk"):
    h = int.from_bytes(hashlib.sha256(f"{ns}/{seed}/{i}".encode()).digest()[:8], "little")
    return CacheEngineKey(model, 1, 0, h, DTYPE)


def open_manager(config_path, plan):
    config = LMCacheEngineConfig.from_file(config_path)
    sm = StorageManager(config, metadata(plan["model"]), EventManager())
    _managers.append(sm)
    name = "RemoteBackend-" + plan.get("plugin", "mooncake_go")
    backend = sm.storage_backends.get(name)
    if backend is None or backend.connection is None:
        fail(f"LMCache made no connected {name} (backends {list(sm.storage_backends)}); see its log above")
    inner = backend.connection.getWrappedConnector()
    want = plan.get("class", "MooncakeGoConnector")
    check(type(inner).__name__ == want and type(inner).__module__.startswith("mooncake_go.lmcache"),
          f"{name}'s connector is {type(inner).__module__}.{type(inner).__name__}, want mooncake_go.lmcache's {want}")
    return sm, backend, name, inner


def on_loop(sm, coro, timeout=60):
    return asyncio.run_coroutine_threadsafe(coro, sm.loop).result(timeout)


def put(config_path, plan):
    model, seed = plan["model"], plan["seed"]
    sm, backend, name, inner = open_manager(config_path, plan)
    keys, objs, digests, sizes = [], [], [], []
    for i, c in enumerate(chunks(seed, plan["tokens"])):
        obj = sm.allocate(c.shape, DTYPE, MemoryFormat.KV_2LTD)
        check(obj is not None, f"LocalCPUBackend could not allocate chunk {i}")
        obj.raw_data.view(torch.uint8).flatten()[: obj.get_size()].copy_(c.view(torch.uint8).flatten())
        keys.append(chunk_key(model, seed, i))
        objs.append(obj)
        digests.append(hashlib.sha256(c.view(torch.uint8).numpy().tobytes()).hexdigest())
        sizes.append(obj.get_size())
    # One reference of our own, as an engine still using the objects holds:
    # StorageManager.batched_put consumes the caller's, LMCache's remote
    # path and the connector must drop exactly what they took.
    for o in objs:
        o.ref_count_up()
    refs = [o.get_ref_count() for o in objs]
    t0 = time.monotonic()
    sm.batched_put(keys, objs)  # the remote put runs on LMCache's loop
    deadline = time.monotonic() + DEADLINE_S
    while any(backend.exists_in_put_tasks(k) or not backend.contains(k) for k in keys):
        check(time.monotonic() < deadline, f"chunks not in the pool {DEADLINE_S} s after batched_put "
              f"(failed puts counted by LMCache: {backend.put_failed_count})")
        time.sleep(0.05)
    put_s = time.monotonic() - t0
    check(backend.put_failed_count == 0, f"LMCache counted {backend.put_failed_count} failed remote puts")
    after = [o.get_ref_count() for o in objs]
    check(after == [r - 1 for r in refs], f"ref counts before/after the remote put: {refs} / {after} "
          f"(want one less: the caller's, consumed by StorageManager.batched_put)")
    for o in objs:
        o.ref_count_down()
    listed = on_loop(sm, inner.list())
    check(set(k.to_string() for k in keys) <= set(listed), f"list() lacks stored keys: {listed}")
    import mooncake_go

    module_file, library = sys.modules[type(inner).__module__].__file__, mooncake_go.loaded()
    sm.close()
    return {"ok": True, "op": "put", "backend": name, "chunks": len(keys), "put_s": round(put_s, 3),
            "module_file": module_file, "library": library,
            "keys": [k.to_string() for k in keys], "sha256": digests, "sizes": sizes}


def get(config_path, plan):
    model, seed = plan["model"], plan["seed"]
    sm, backend, name, inner = open_manager(config_path, plan)
    want = chunks(seed, plan["tokens"])
    keys = [chunk_key(model, seed, i) for i in range(len(want))]
    missing = chunk_key(model, seed, 0, ns="absent")
    check(not backend.contains(missing), "contains() says yes for a key nobody stored")
    check(all(backend.contains(k) for k in keys), "contains() says no for a stored key")
    # Prefix lookups: the leading run of hits, through LMCache's storage
    # manager (sync) and its async lookup path.
    gap = keys[:2] + [missing] + keys[2:]
    counts = {
        "all": sm.batched_contains(keys, search_range=[name])[0],
        "gap_after_2": sm.batched_contains(gap, search_range=[name])[0],
        "miss_first": sm.batched_contains([missing] + keys, search_range=[name])[0],
        "async_all": on_loop(sm, backend.batched_async_contains("l1", keys)),
        "async_gap": on_loop(sm, backend.batched_async_contains("l2", gap)),
    }
    wantc = {"all": len(keys), "gap_after_2": 2, "miss_first": 0, "async_all": len(keys), "async_gap": 2}
    check(counts == wantc, f"prefix lookups {counts}, want {wantc}")

    t0 = time.monotonic()
    got = sm.batched_get(keys, location=name)
    get_s = time.monotonic() - t0
    for i, (obj, w) in enumerate(zip(got, want)):
        check(obj is not None, f"chunk {i}: batched_get returned None")
        check(tuple(obj.get_shape()) == tuple(w.shape), f"chunk {i}: shape {tuple(obj.get_shape())}, want {tuple(w.shape)}")
        data = obj.raw_data.view(torch.uint8).flatten()[: obj.get_size()]
        wb = w.view(torch.uint8).flatten()
        check(data.numel() == wb.numel() and torch.equal(data, wb), f"chunk {i}: bytes differ ({data.numel()} vs {wb.numel()})")
        obj.ref_count_down()
    none = sm.batched_get([missing], location=name)
    check(none == [None], f"batched_get of an absent key gave {none}")

    # The non-blocking path stops at the first miss and hands over
    # objects with exactly allocate()'s one reference.
    objs = on_loop(sm, backend.batched_get_non_blocking("l3", gap))
    check(len(objs) == 2, f"batched_get_non_blocking over a gap after 2 returned {len(objs)} objects")
    for i, obj in enumerate(objs):
        check(obj.get_ref_count() == 1, f"non-blocking object {i} has ref count {obj.get_ref_count()}")
        check(torch.equal(obj.raw_data.view(torch.uint8).flatten()[: obj.get_size()], want[i].view(torch.uint8).flatten()),
              f"non-blocking chunk {i}: bytes differ")
        obj.ref_count_down()
    check(inner.remove_sync(keys[-1]) and not backend.contains(keys[-1]), "remove_sync left the last chunk")
    check(on_loop(sm, inner.ping()) == 0, "ping() is not 0")
    sm.close()
    return {"ok": True, "op": "get", "backend": name, "chunks": len(keys), "get_s": round(get_s, 3), "counts": counts}


def dead(config_path, plan):
    """Lookups while the master runs, then (after a line on stdin) while it
    is dead: every lookup misses, fast."""
    model, seed = plan["model"], plan["seed"]
    sm, backend, name, inner = open_manager(config_path, plan)
    keys = [chunk_key(model, seed, i) for i in range(len(chunks(seed, plan["tokens"])))]
    check(sm.batched_contains(keys, search_range=[name])[0] == len(keys), "lookups before the master died miss")
    print("READY", flush=True)
    sys.stdin.readline()
    times, hits = [], 0
    for _ in range(20):
        t0 = time.monotonic()
        hits += sm.batched_contains(keys, search_range=[name])[0]
        hits += int(backend.contains(keys[0]))
        times.append(time.monotonic() - t0)
    check(hits == 0, f"{hits} hits reported with the master dead")
    t0 = time.monotonic()
    got = sm.batched_get(keys[:1], location=name)
    get_s = time.monotonic() - t0
    check(got == [None], f"batched_get with the master dead gave {got}")
    sm.close()
    return {"ok": True, "op": "dead", "first_s": round(times[0], 3), "max_rest_s": round(max(times[1:]), 4),
            "total_s": round(sum(times), 3), "get_s": round(get_s, 3)}


def resolve(config_path, plan):
    """Which adapter LMCache's ConnectorManager picks for each plugin URL
    (ours is listed after every built-in), and the errors of bad configs,
    without a pool."""
    config = LMCacheEngineConfig.from_file(config_path)
    loop = asyncio.new_event_loop()
    mgr = ConnectorManager("plugin://mooncake_go", loop, None, config, metadata(plan["model"]), plugin_name="mooncake_go")
    picked = {}
    for url in ("plugin://mooncake_go", "plugin://mooncake_go.b", "plugin://mooncakestore", "plugin://redis", "plugin://fs",
                "mooncakestore://127.0.0.1:50051"):
        a = next((a for a in mgr.adapters if a.can_parse(url)), None)
        picked[url] = type(a).__name__ if a else None
    ours = [type(a).__name__ for a in mgr.adapters if type(a).__module__.startswith("mooncake_go")]
    builtins = len(mgr.adapters) - len(ours)

    # Bad configs: the error names the key (or the file).
    from mooncake_go.lmcache import MooncakeGoConnector
    from lmcache.v1.storage_backend.connector import SafeLocalCPUBackend

    errors = {}
    base = dict(config.extra_config)
    for case, edit, env in (
        ("missing_master", {"remote_storage_plugin.mooncake_go.master_server_address": None}, None),
        ("misspelled", {"remote_storage_plugin.mooncake_go.global_segmnet_size": 0}, None),
        ("bad_value", {"remote_storage_plugin.mooncake_go.replica_num": 0}, None),
        ("bad_file", {}, "/nonexistent/mooncake.json"),
    ):
        extra = {k: v for k, v in {**base, **edit}.items() if v is not None}
        config.extra_config = extra
        if env:
            os.environ["MOONCAKE_CONFIG_PATH"] = env
        try:
            MooncakeGoConnector(loop=loop, local_cpu_backend=SafeLocalCPUBackend(config), config=config,
                                metadata=metadata(plan["model"]), plugin_name="mooncake_go")
            errors[case] = None
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            errors[case] = f"{type(e).__name__}: {e}"
        finally:
            os.environ.pop("MOONCAKE_CONFIG_PATH", None)
    config.extra_config = base

    # class_name route without metadata: a LocalCPUBackend with none gets
    # one clear error, or its geometry from the plugin's keys.
    sm = StorageManager(config, metadata(plan["model"]), EventManager())
    _managers.append(sm)
    alloc = sm.storage_backends["LocalCPUBackend"].memory_allocator
    bare = LocalCPUBackend(config, metadata=None, memory_allocator=alloc)
    try:
        MooncakeGoConnector(loop=sm.loop, local_cpu_backend=bare, config=config, plugin_name="mooncake_go")
        errors["no_geometry"] = None
    except Exception as e:  # noqa: BLE001
        errors["no_geometry"] = f"{type(e).__name__}: {e}"
    config.extra_config = {**base, "remote_storage_plugin.mooncake_go.kv_shape": [LAYERS, 2, CHUNK, KV_HEADS, HEAD_DIM],
                           "remote_storage_plugin.mooncake_go.kv_dtype": "bfloat16"}
    c = MooncakeGoConnector(loop=sm.loop, local_cpu_backend=bare, config=config, plugin_name="mooncake_go")
    geometry = {"full_chunk_size_bytes": c.full_chunk_size_bytes, "single_token_size": c.single_token_size,
                "meta_shapes": [list(s) for s in c.meta_shapes]}
    on_loop(sm, c.close())
    config.extra_config = base
    sm.close()
    return {"ok": True, "op": "resolve", "picked": picked, "ours": ours, "builtins": builtins, "errors": errors,
            "geometry": geometry}


def main(argv):
    ops = {"put": put, "get": get, "dead": dead, "resolve": resolve}
    if len(argv) != 4 or argv[1] not in ops:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[3]) as f:
        plan = json.load(f)
    try:
        out = ops[argv[1]](argv[2], plan)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        fail(f"{argv[1]} raised: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # LMCache's loop threads are not daemons


if __name__ == "__main__":
    sys.exit(main(sys.argv))
