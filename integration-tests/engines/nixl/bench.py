"""NIXL benchmark (make bench-nixl; not part of make test): our backend
(MOONCAKE_GO) against NIXL's UCX backend on the same two-process agent
setup, same run: WRITEs of BATCH descriptors of SIZE bytes each (64 KiB
and 1 MiB, batch 128 by default) from an initiator's registered DRAM into
a target's, one prepared request reposted ITERS times after a warm-up, in
ROUNDS alternating rounds (ours, UCX, ours, UCX, ...) so machine noise hits
both alike. Prints GB/s per round and the median ratio ours/UCX per size.

    python bench.py [--sizes 65536,1048576] [--batch 128] [--iters 20] [--rounds 3] [--json]

NIXL_PLUGIN_DIR for our rounds comes from MC_NIXL_PLUGIN_DIR (a folder
`mooncake install-plugin nixl` filled); UCX rounds use NIXL's own folder.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def role_target(d, backend, total):
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("target", nixl_agent_config(backends=[]))
    agent.create_backend(backend, {"ip_addr": "127.0.0.1"} if backend == "MOONCAKE_GO" else {})
    buf = np.zeros(total, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, total, 0, "")], "DRAM")
    with open(os.path.join(d, "t.tmp"), "wb") as f:
        f.write(agent.get_agent_metadata())
    with open(os.path.join(d, "t.addr"), "w") as f:
        f.write(str(buf.ctypes.data))
    os.replace(os.path.join(d, "t.tmp"), os.path.join(d, "t.meta"))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        n = agent.get_new_notifs()
        if any(b"BYE" in m for ms in n.values() for m in ms):
            return 0
        time.sleep(0.001)
    return 1


def role_initiator(d, backend, size, batch, iters, scattered):
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("initiator", nixl_agent_config(backends=[]))
    agent.create_backend(backend, {"ip_addr": "127.0.0.1"} if backend == "MOONCAKE_GO" else {})
    total = size * batch
    buf = np.random.default_rng(1).integers(0, 256, total, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, total, 0, "")], "DRAM")
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(d, "t.meta")):
        if time.monotonic() > deadline:
            raise TimeoutError("no target metadata")
        time.sleep(0.01)
    with open(os.path.join(d, "t.meta"), "rb") as f:
        peer = agent.add_remote_agent(f.read())
    with open(os.path.join(d, "t.addr")) as f:
        base = int(f.read())
    ld = agent.get_xfer_descs([(buf.ctypes.data + i * size, size, 0) for i in range(batch)], "DRAM")
    # contiguous: descriptor i lands right after i-1 (consecutive KV blocks);
    # scattered: in reverse order, so no two descriptors continue each other.
    slot = (lambda i: batch - 1 - i) if scattered else (lambda i: i)
    rd = agent.get_xfer_descs([(base + slot(i) * size, size, 0) for i in range(batch)], "DRAM")
    h = agent.initialize_xfer("WRITE", ld, rd, peer)

    def once():
        st = agent.transfer(h)
        while st == "PROC":
            st = agent.check_xfer_state(h)
        if st != "DONE":
            raise RuntimeError(f"transfer state {st}")

    for _ in range(3):
        once()
    t0 = time.perf_counter()
    for _ in range(iters):
        once()
    dt = time.perf_counter() - t0
    agent.release_xfer_handle(h)
    agent.send_notif(peer, b"BYE")
    print("GBPS %.4f" % (total * iters / dt / 1e9), flush=True)
    return 0


def one_round(backend, size, batch, iters, scattered, plugin_dir):
    env = dict(os.environ)
    env.pop("NIXL_PLUGIN_DIR", None)
    if backend == "MOONCAKE_GO":
        env["NIXL_PLUGIN_DIR"] = plugin_dir
    with tempfile.TemporaryDirectory() as d:
        me = [sys.executable, os.path.abspath(__file__)]
        t = subprocess.Popen(me + ["--role", "target", d, backend, str(size * batch)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            out = subprocess.run(me + ["--role", "initiator", d, backend, str(size), str(batch), str(iters), str(int(scattered))], env=env, capture_output=True, text=True, timeout=600)
        finally:
            try:
                t.wait(60)
            except subprocess.TimeoutExpired:
                t.kill()
        for line in out.stdout.splitlines():
            if line.startswith("GBPS "):
                return float(line.split()[1])
        raise RuntimeError(f"{backend} round failed (rc {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        role, d, backend = sys.argv[2], sys.argv[3], sys.argv[4]
        rest = [int(x) for x in sys.argv[5:]]
        rc = role_target(d, backend, *rest) if role == "target" else role_initiator(d, backend, *rest)
        sys.stdout.flush()
        os._exit(rc)  # NIXL 1.5.1's UCX backend crashes in interpreter teardown
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="65536,1048576")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layouts", default="contiguous,scattered", help="remote descriptor order: contiguous (consecutive blocks), scattered (reversed)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    plugin_dir = os.environ.get("MC_NIXL_PLUGIN_DIR")
    if not plugin_dir:
        sys.exit("bench.py: set MC_NIXL_PLUGIN_DIR to a folder `mooncake install-plugin nixl` filled")
    rows = []
    for layout in a.layouts.split(","):
        for size in [int(s) for s in a.sizes.split(",")]:
            got = {"MOONCAKE_GO": [], "UCX": []}
            for r in range(a.rounds):
                for b in ("MOONCAKE_GO", "UCX"):
                    got[b].append(one_round(b, size, a.batch, a.iters, layout == "scattered", plugin_dir))
                    print(f"{layout} size {size:>8} batch {a.batch} round {r + 1} {b:<11} {got[b][-1]:8.3f} GB/s", file=sys.stderr, flush=True)
            ours, ucx = statistics.median(got["MOONCAKE_GO"]), statistics.median(got["UCX"])
            rows.append({"layout": layout, "size": size, "batch": a.batch, "ours_gbps": ours, "ucx_gbps": ucx, "ratio": ours / ucx, "rounds": got})
    if a.json:
        print(json.dumps(rows))
    else:
        print(f"{'layout':<11} {'size':>9} {'batch':>5} {'MOONCAKE_GO GB/s':>17} {'UCX GB/s':>9} {'ours/UCX':>9}")
        for r in rows:
            print(f"{r['layout']:<11} {r['size']:>9} {r['batch']:>5} {r['ours_gbps']:>17.3f} {r['ucx_gbps']:>9.3f} {r['ratio']:>8.2f}x")


if __name__ == "__main__":
    main()
