"""Store and retrieve throughput of LMCache 0.5.6 remote backends, same
run, same process tree, same machine (make bench-lmcache; not in make
test):

  mooncake_go   our plugin (remote_storage_plugins: ["mooncake_go"]) on
                a mooncake master + node
  redis         LMCache's built-in redis:// connector on a local
                redis-server (127.0.0.1, no persistence)
  mooncakestore LMCache's built-in mooncakestore:// connector (its
                zero-copy path, save_chunk_meta false) on our drop-in
                mooncake.store, same master + node

Chunks: 256 tokens of a 32-layer model (8 KV heads of 128, bf16) = 32 MiB
each, put with StorageManager.batched_put (timed until every chunk is
readable: one prefix lookup per 2 ms poll) and read back with StorageManager.batched_get limited
to the remote backend, in rounds of CHUNKS chunks with fresh keys; the
medians of ROUNDS rounds are printed, with ratios to redis.

    python bench.py [--chunks 8] [--rounds 3] [--json out.json]
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

LAYERS, KV_HEADS, HEAD_DIM, CHUNK = 32, 8, 128, 256
CHUNK_BYTES = 2 * LAYERS * CHUNK * KV_HEADS * HEAD_DIM * 2

WORKER = r'''
import hashlib, json, sys, time
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager
import os, traceback
def _die(*a):
    traceback.print_exception(*a)
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(1)  # LMCache's loop threads would keep a failed worker alive
sys.excepthook = _die
L, H, D, C = %(L)d, %(H)d, %(D)d, %(C)d
cfg_path, backend_name, chunks, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
md = LMCacheMetadata(model_name="bench", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                     kv_dtype=torch.bfloat16, kv_shape=(L, 2, C, H, D), chunk_size=C)
sm = StorageManager(LMCacheEngineConfig.from_file(cfg_path), md, EventManager())
backend = sm.storage_backends.get(backend_name)
assert backend is not None and backend.connection is not None, list(sm.storage_backends)
shape = torch.Size([2, L, C, H * D])
src = torch.randint(0, 255, (shape.numel() * 2,), dtype=torch.uint8)
out = []
for r in range(rounds):
    keys, objs = [], []
    for i in range(chunks):
        o = sm.allocate(shape, torch.bfloat16, MemoryFormat.KV_2LTD)
        assert o is not None, "LocalCPUBackend full"
        o.raw_data.view(torch.uint8).flatten()[: o.get_size()].copy_(src[: o.get_size()])
        o.raw_data.view(torch.uint8)[:8] = torch.tensor(list((r * 1000 + i).to_bytes(8, "little")), dtype=torch.uint8)
        h = int.from_bytes(hashlib.sha256(f"{os.getpid()}/{r}/{i}".encode()).digest()[:8], "little")
        keys.append(CacheEngineKey("bench", 1, 0, h, torch.bfloat16))
        objs.append(o)
    t0 = time.perf_counter()
    sm.batched_put(keys, objs)
    # Done when every chunk is readable (LMCache's batched puts leave no
    # put task to wait on); one prefix lookup per poll.
    while backend.batched_contains(keys) < len(keys):
        assert time.perf_counter() - t0 < 600, "puts not done after 600 s"
        time.sleep(0.002)
    put_s = time.perf_counter() - t0
    assert backend.put_failed_count == 0, backend.put_failed_count
    t0 = time.perf_counter()
    got = sm.batched_get(keys, location=backend_name)
    get_s = time.perf_counter() - t0
    assert all(g is not None for g in got), [g is None for g in got]
    for i, g in enumerate(got):
        assert int.from_bytes(bytes(g.raw_data.view(torch.uint8)[:8].tolist()), "little") == r * 1000 + i
        g.ref_count_down()
    out.append({"put_s": put_s, "get_s": get_s})
print("RESULT " + json.dumps(out), flush=True)
os._exit(0)  # no sm.close(): the redis connector's close can hang, and the pool goes away anyway
''' % {"L": LAYERS, "H": KV_HEADS, "D": HEAD_DIM, "C": CHUNK}


def common(cpu_gb):
    return ["chunk_size: 256", "local_cpu: false", f"max_local_cpu_size: {cpu_gb}", "remote_serde: naive",
            "blocking_timeout_secs: 120"]


def config_ours(pool, cpu_gb):
    s = "remote_storage_plugin.mooncake_go."
    return common(cpu_gb) + ['remote_storage_plugins: ["mooncake_go"]', "extra_config:",
                             f"  {s}module_path: mooncake_go.lmcache", f"  {s}class_name: MooncakeGoConnectorAdapter",
                             f'  {s}master_server_address: "{pool.master}"', f'  {s}metadata_server: "{pool.metadata}"',
                             f'  {s}local_hostname: "127.0.0.1"', f"  {s}global_segment_size: 0"]


def config_redis(port, cpu_gb):
    return common(cpu_gb) + [f'remote_url: "redis://127.0.0.1:{port}"']


def config_mooncakestore(pool, cpu_gb):
    return common(cpu_gb) + [f'remote_url: "mooncakestore://{pool.master}/"', "extra_config:",
                             "  save_chunk_meta: false", "  transfer_timeout: 120",
                             f'  mooncake_master_server_addr: "{pool.master}"',
                             f'  mooncake_metadata_server: "{pool.metadata}"', '  mooncake_local_hostname: "127.0.0.1"',
                             "  mooncake_protocol: tcp", '  mooncake_global_segment_size: "0"',
                             '  mooncake_local_buffer_size: "16777216"']


def run_worker(name, cfg_lines, backend, args, workdir):
    cfg = workdir / f"{name}.yaml"
    cfg.write_text("\n".join(cfg_lines) + "\n")
    script = workdir / "worker.py"
    script.write_text(WORKER)
    env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1", "LMCACHE_LOG_LEVEL": "WARNING"}, compat=True)
    log = workdir / f"{name}.log"
    p = mcrig.Proc([sys.executable, str(script), str(cfg), backend, str(args.chunks), str(args.rounds)], log, env=env,
                   name=f"bench {name}")
    m = p.wait_line(r"^RESULT (.*)$", 1800)
    p.wait(120)
    return json.loads(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    redis_server = shutil.which("redis-server")
    if not redis_server:
        sys.exit("bench-lmcache: redis-server not found (apt-get install -y redis-server)")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-lmcache-"))
    cpu_gb = round(args.chunks * CHUNK_BYTES * 1.5 / 2**30 + 0.25, 2)
    seg = f"{args.chunks * CHUNK_BYTES * args.rounds * 2 // 2**20 + 256}MiB"
    pool = mcrig.Pool(workdir / "pool", nodes=(("benchnode", seg),), master_args=["--default_kv_lease_ttl=1000"])
    port = mcrig.free_port()
    rdir = workdir / "redis"
    rdir.mkdir()
    redis = mcrig.Proc([redis_server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                        "--dir", str(rdir)], workdir / "redis.log", name="redis-server")
    version = subprocess.run([redis_server, "--version"], capture_output=True, text=True).stdout.strip()
    try:
        redis.wait_line(r"Ready to accept connections", 60)
        results = {
            "mooncake_go": run_worker("mooncake_go", config_ours(pool, cpu_gb), "RemoteBackend-mooncake_go", args, workdir),
            "redis": run_worker("redis", config_redis(port, cpu_gb), "RemoteBackend", args, workdir),
            "mooncakestore": run_worker("mooncakestore", config_mooncakestore(pool, cpu_gb), "RemoteBackend", args, workdir),
        }
    finally:
        redis.stop()
        pool.stop()
    gb = args.chunks * CHUNK_BYTES / 1e9
    table = {}
    for name, rounds in results.items():
        table[name] = {op: gb / statistics.median(r[f"{op}_s"] for r in rounds) for op in ("put", "get")}
    print(f"LMCache 0.5.6 remote backends, {args.chunks} chunks of 256 tokens x 32 layers x 8 KV heads x 128 (bf16) = "
          f"{CHUNK_BYTES / 2**20:.0f} MiB each, median of {args.rounds} rounds; {version}; {os.cpu_count()} CPUs")
    print(f"{'backend':<15}{'store GB/s':>12}{'retrieve GB/s':>15}{'store vs redis':>16}{'retrieve vs redis':>19}")
    for name, t in table.items():
        print(f"{name:<15}{t['put']:>12.3f}{t['get']:>15.3f}{t['put'] / table['redis']['put']:>15.2f}x"
              f"{t['get'] / table['redis']['get']:>18.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"results": results, "gbps": table}, indent=1))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
