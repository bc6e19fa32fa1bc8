#!/usr/bin/env python3
"""make bench-compat-store: our `mooncake.store` vs upstream's, same machine, same run.

Measures upstream Mooncake's Python store API, `MooncakeDistributedStore`,
through two implementations, interleaved phase by phase so that load from
other processes hits both alike, and prints the medians and ratios:

* ours: `mooncake.store` of this tree (compat/python + abi/python on
  build/libmooncake.so, through ctypes) against `bin/mooncake master`;
* upstream: the `mooncake-transfer-engine-non-cuda` wheel from PyPI
  (the newest version pip can install for this Python, or
  --upstream-version), installed into a scratch venv under
  ~/.cache/mooncake-go/upstream-store/<version>/ (reused when present),
  against that wheel's own `mooncake_master`. Nothing of it enters the
  repository.

Both sides run the same setup, as upstream's typical single-host one:
one master on 127.0.0.1 (embedded HTTP metadata server, eviction ratio
0.05, high watermark 0.90, free ports), one client process that
contributes the only global segment (setup(127.0.0.1, http metadata,
--segment-size, --local-buffer-size, "tcp", "", master)), MC_FORCE_TCP=true,
so every byte crosses a loopback tcp connection on both sides.

Each side has its master and one client process, alive for the whole
run. In each of --reps rounds, for each value size (--sizes, default
1MiB,4MiB) and each pair below, the driver has one side run the pair, then
the other (which side goes first alternates: ABBA...): a put phase on
--objects fresh keys, then the get phase reading them, each timed as a
whole; the medians over the rounds are compared:

  put             put(key, bytes)          copying (the value is a Python bytes)
  get             get(key) -> bytes        copying
  put_from        put_from(key, ptr, n)    zero copy from a registered buffer
  get_into        get_into(key, ptr, n)    zero copy into a registered buffer
  batch_put_from  batch_put_from(keys[B], ptrs, sizes)   B = --batch
  batch_get_into  batch_get_into(keys[B], ptrs, sizes)

Each value get() returns is measured, then dropped before the next call,
as a consumer does (keeping all of them instead makes every get fault in
fresh pages, which on this VM costs more than the transfer on both sides).
(remove_all(force=True) after each pair, untimed; every pair runs once
at every size, untimed, before the first round, so page faults of fresh
memory and connection set-up hit neither side's timed phases; every get
is checked for its length, and values byte for byte (get: a sample),
untimed).
GB/s counts 1e9 bytes: objects x size / seconds.

Usage: scripts/bench-compat-store.py [--reps 7] [--objects 128] [--json]
Exit status: 0 ok, 1 a run failed, 2 upstream's wheel could not be
installed or imported (the reason on stderr).
"""

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"
REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "mooncake-transfer-engine-non-cuda"
CACHE = pathlib.Path(os.environ.get("MC_BENCH_CACHE", pathlib.Path.home() / ".cache" / "mooncake-go" / "upstream-store"))
OPS = ("put", "get", "put_from", "get_into", "batch_put_from", "batch_get_into")
IMPLS = ("ours", "upstream")


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]i?B?)?\s*", str(s), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 4MiB)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[(m.group(2) or "")[:1].upper()]
    return int(m.group(1)) * mult


def human(n):
    for unit, b in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % b == 0:
            return f"{n // b}{unit}"
    return str(n)


# -- worker: one client process, one implementation ---------------------------


def worker(cfg):
    """One client for the whole run. Reads commands, one JSON line each, on
    stdin: {"pair": "copy"|"zero"|"batch", "size": n, "tag": str} runs that
    pair's put phase then its get phase on --objects fresh keys, checks
    them, removes everything and answers {"put": s, "get": s} (seconds);
    {"exit": true} ends. The first line it prints is {"ready": true}."""
    from mooncake.store import MooncakeDistributedStore

    st = MooncakeDistributedStore()
    rc = st.setup(HOST, cfg["metadata"], cfg["segment_size"], cfg["local_buffer_size"], "tcp", "", cfg["master"])
    if rc != 0:
        raise SystemExit(f"setup(...) = {rc}")
    n, batch = cfg["objects"], cfg["batch"]
    span = n * max(cfg["sizes"])
    src = (ctypes.c_char * span)()
    dst = (ctypes.c_char * span)()
    src_a, dst_a = ctypes.addressof(src), ctypes.addressof(dst)
    # distinct, non-zero content per object (each 4 KiB page differs)
    seed = os.urandom(1 << 20)
    for off in range(0, span, len(seed)):
        ctypes.memmove(src_a + off, seed, min(len(seed), span - off))
    for a in (src_a, dst_a):
        if st.register_buffer(a, span) != 0:
            raise SystemExit("register_buffer failed")
    values = {}  # size -> the n values as bytes (put's input), made once, untimed

    def check(rcs, what, want):
        bad = [r for r in rcs if r != want]
        if bad:
            raise SystemExit(f"{what}: {len(bad)} of {len(rcs)} calls returned {bad[0]} (want {want})")

    def same(what, size):
        if ctypes.string_at(dst_a, n * size) != ctypes.string_at(src_a, n * size):
            raise SystemExit(f"{what}: values differ from what was put")
        ctypes.memset(dst_a, 0, n * size)

    def pair(kind, size, tag):
        keys = [f"{tag}/{i}" for i in range(n)]
        ptrs = [src_a + i * size for i in range(n)]
        dptrs = [dst_a + i * size for i in range(n)]
        if kind == "copy":
            if size not in values:
                values[size] = [ctypes.string_at(p, size) for p in ptrs]
            vals = values[size]
            t = time.perf_counter()
            rcs = [st.put(k, v) for k, v in zip(keys, vals)]
            tp = time.perf_counter() - t
            check(rcs, "put", 0)
            sample, kept, lens = {0, n // 2, n - 1}, {}, []
            t = time.perf_counter()
            for i, k in enumerate(keys):
                g = st.get(k)  # used, then dropped, as a consumer does
                lens.append(len(g))
                if i in sample:
                    kept[i] = g
            tg = time.perf_counter() - t
            del g
            check(lens, "get (length)", size)
            for i, g in kept.items():
                if g != vals[i]:
                    raise SystemExit(f"get {keys[i]}: value differs from what was put")
        elif kind == "zero":
            t = time.perf_counter()
            rcs = [st.put_from(k, p, size) for k, p in zip(keys, ptrs)]
            tp = time.perf_counter() - t
            check(rcs, "put_from", 0)
            t = time.perf_counter()
            rcs = [st.get_into(k, p, size) for k, p in zip(keys, dptrs)]
            tg = time.perf_counter() - t
            check(rcs, "get_into", size)
            same("get_into", size)
        else:
            sz = [size] * n
            t = time.perf_counter()
            rcs = []
            for i in range(0, n, batch):
                rcs += st.batch_put_from(keys[i:i + batch], ptrs[i:i + batch], sz[i:i + batch])
            tp = time.perf_counter() - t
            check(rcs, "batch_put_from", 0)
            t = time.perf_counter()
            rcs = []
            for i in range(0, n, batch):
                rcs += st.batch_get_into(keys[i:i + batch], dptrs[i:i + batch], sz[i:i + batch])
            tg = time.perf_counter() - t
            check(rcs, "batch_get_into", size)
            same("batch_get_into", size)
        st.remove_all(True)
        return {"put": tp, "get": tg}

    # untimed: every pair once at every size (page faults of fresh memory,
    # connections, caches, allocator pools)
    for size in cfg["sizes"]:
        for kind in ("copy", "zero", "batch"):
            pair(kind, size, f"warm/{kind}/{size}")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("exit"):
            break
        print(json.dumps(pair(cmd["pair"], cmd["size"], cmd["tag"])), flush=True)
    sys.stdout.flush()
    # leave without either library's teardown (not measured, and upstream's can be slow)
    os._exit(0)


# -- driver ------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when the driver dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def wait_port(port, deadline):
    while time.time() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return True
        time.sleep(0.05)
    return False


def newest_version(python):
    """The newest version of PACKAGE pip can install for `python`, or None."""
    try:
        r = subprocess.run([python, "-m", "pip", "index", "versions", PACKAGE, "--disable-pip-version-check"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(rf"^{re.escape(PACKAGE)} \(([^)]+)\)", r.stdout, re.M)
    return m.group(1) if m else None


def upstream_venv(version, python):
    """~/.cache/mooncake-go/upstream-store/<version>/ with PACKAGE==version
    installed (built once, under a lock; reused when its stamp exists)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / version
    stamp = venv / ".installed"
    with open(CACHE / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            shutil.rmtree(venv, ignore_errors=True)
            print(f"installing {PACKAGE}=={version} into {venv}", file=sys.stderr, flush=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
            r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                                f"{PACKAGE}=={version}"], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"pip install {PACKAGE}=={version}: {r.stderr.strip()[-2000:]}")
            stamp.write_text(f"{PACKAGE}=={version}\n")
    return venv


class Master:
    """One master process on free 127.0.0.1 ports; stopped on exit."""

    def __init__(self, argv_of, tmp, name):
        self.rpc, self.meta, self.metrics = free_port(), free_port(), free_port()
        self.log_path = os.path.join(tmp, f"{name}-master.log")
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(argv_of(self.rpc, self.meta, self.metrics), stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        dl = time.time() + 30
        if not (wait_port(self.rpc, dl) and wait_port(self.meta, dl)):
            self.stop()
            raise RuntimeError(f"{name} master did not listen on {self.rpc}/{self.meta} within 30 s: {self.tail()}")

    def tail(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1MiB,4MiB", help="value sizes, comma-separated")
    ap.add_argument("--objects", type=int, default=128, help="distinct keys per timed phase (both sides)")
    ap.add_argument("--batch", type=int, default=16, help="keys per batch_put_from / batch_get_into call")
    ap.add_argument("--reps", type=int, default=7, help="rounds; in each, every (pair, size) runs on both sides, alternating which goes first")
    ap.add_argument("--segment-size", type=parse_size, default=parse_size("1GiB"), help="the client's global_segment_size")
    ap.add_argument("--local-buffer-size", type=parse_size, default=parse_size("256MiB"))
    ap.add_argument("--upstream-version", default=os.environ.get("UPSTREAM_VERSION", ""),
                    help=f"{PACKAGE} version (default: the newest pip can install)")
    ap.add_argument("--python", default=os.environ.get("UPSTREAM_PYTHON", "python3.11"),
                    help="interpreter for upstream's venv (its wheels are cp311)")
    ap.add_argument("--ours-python", default=str(REPO / ".venv" / "bin" / "python"))
    ap.add_argument("--mooncake-bin", default=str(REPO / "bin" / "mooncake"))
    ap.add_argument("--lib", default=str(REPO / "build" / "libmooncake.so"))
    ap.add_argument("--only", choices=IMPLS, help="run one side only (no ratios)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds the driver waits for a client's answer")
    ap.add_argument("--json", action="store_true", help="print the medians as one JSON object at the end")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(json.loads(a.worker))
    sizes = [parse_size(s) for s in a.sizes.split(",") if s.strip()]
    if not sizes or a.objects <= 0 or a.batch <= 0 or a.reps <= 0:
        ap.error("sizes, --objects, --batch and --reps must be positive")
    if a.objects * max(sizes) > a.segment_size * 0.85:
        ap.error(f"--objects x largest size ({human(a.objects * max(sizes))}) must stay under 85% of --segment-size")
    impls = [a.only] if a.only else list(IMPLS)

    env = dict(os.environ, MC_FORCE_TCP="true", MC_LOG_LEVEL="WARNING", GLOG_minloglevel="2",
               MC_STORE_CLIENT_METRIC="0", MC_TCP_BIND_ADDRESS=HOST)
    sides = {}
    if "upstream" in impls:
        version = a.upstream_version or newest_version(a.python)
        if not version:  # offline: the newest venv already built
            have = [p.parent.name for p in CACHE.glob("*/.installed")]
            if not have:
                print(f"bench-compat-store: cannot find {PACKAGE}'s versions (pip index versions failed) and none is cached in {CACHE}",
                      file=sys.stderr)
                return 2
            version = max(have, key=lambda v: [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"[.]", v)])
        try:
            venv = upstream_venv(version, a.python)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            print(f"bench-compat-store: {e}", file=sys.stderr)
            return 2
        upy = str(venv / "bin" / "python")
        r = subprocess.run([upy, "-c", "from mooncake.store import MooncakeDistributedStore"], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print(f"bench-compat-store: upstream's {PACKAGE} {version} does not import: {r.stderr.strip()[-800:]}\n"
                  "  (it needs the Debian packages libibverbs1 libnuma1 libcurl4)", file=sys.stderr)
            return 2
        umaster = str(venv / "bin" / "mooncake_master")
        sides["upstream"] = dict(
            label=f"upstream {PACKAGE} {version}", python=upy, env=env,
            master=lambda rpc, meta, metrics: [
                umaster, f"--rpc_address={HOST}", f"--rpc_port={rpc}", "--enable_http_metadata_server=true",
                f"--http_metadata_server_host={HOST}", f"--http_metadata_server_port={meta}", f"--metrics_port={metrics}",
                "--eviction_ratio=0.05", "--eviction_high_watermark_ratio=0.90", "--enable_metric_reporting=false",
                "--logtostderr=true"])
    if "ours" in impls:
        for f in (a.mooncake_bin, a.lib, a.ours_python):
            if not os.path.exists(f):
                print(f"bench-compat-store: {f} missing (make lib build venv)", file=sys.stderr)
                return 1
        oenv = dict(env, PYTHONPATH=f"{REPO / 'compat' / 'python'}:{REPO / 'abi' / 'python'}", MOONCAKE_GO_LIB=a.lib)
        sides["ours"] = dict(
            label="ours (mooncake.store on libmooncake.so)", python=a.ours_python, env=oenv,
            master=lambda rpc, meta, metrics: [
                a.mooncake_bin, "master", "--rpc_address", HOST, "--rpc_port", str(rpc), "--enable_http_metadata_server=true",
                "--http_metadata_server_host", HOST, "--http_metadata_server_port", str(meta), "--metrics_host", HOST,
                "--metrics_port", str(metrics), "--eviction_ratio", "0.05", "--eviction_high_watermark_ratio", "0.90"])

    print(f"{os.cpu_count()} CPUs, load average {' '.join('%.2f' % x for x in os.getloadavg())}; MC_FORCE_TCP=true, "
          f"one client (global segment {human(a.segment_size)}, local buffer {human(a.local_buffer_size)}) + master on {HOST}; "
          f"{a.objects} objects per phase, batches of {a.batch}; {a.reps} rounds, {'/'.join(impls)} interleaved per phase pair")
    for name in impls:
        print(f"  {name}: {sides[name]['label']}")
    secs = {(impl, op, s): [] for impl in impls for op in OPS for s in sizes}
    pairs = (("copy", "put", "get"), ("zero", "put_from", "get_into"), ("batch", "batch_put_from", "batch_get_into"))
    tmp = tempfile.mkdtemp(prefix="bench-compat-store-")
    masters, workers = {}, {}

    def fail(impl, why):
        w = workers.get(impl)
        tail = ""
        if w is not None:
            with open(w["log"], "rb") as f:
                tail = f.read()[-3000:].decode(errors="replace")
        m = masters.get(impl)
        print(f"bench-compat-store: {impl} client {why}:\n{tail}\nmaster log tail:\n{m.tail() if m else ''}", file=sys.stderr)
        return 1

    def answer(impl, what):
        """The worker's next JSON line, within --timeout."""
        w = workers[impl]
        r, _, _ = select.select([w["p"].stdout], [], [], a.timeout)
        line = w["p"].stdout.readline() if r else b""
        if not line.strip().startswith(b"{"):
            raise RuntimeError(f"no answer to {what} within {a.timeout:.0f} s (exit {w['p'].poll()})")
        return json.loads(line)

    try:
        for impl in impls:  # one master and one client each, alive for the whole run
            side = sides[impl]
            m = masters[impl] = Master(side["master"], tmp, impl)
            cfg = {"metadata": f"http://{HOST}:{m.meta}/metadata", "master": f"{HOST}:{m.rpc}",
                   "segment_size": a.segment_size, "local_buffer_size": a.local_buffer_size,
                   "sizes": sizes, "objects": a.objects, "batch": a.batch}
            log = os.path.join(tmp, f"{impl}-client.log")
            with open(log, "wb") as ef:
                p = subprocess.Popen([side["python"], __file__, "--worker", json.dumps(cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=ef, env=side["env"], cwd=tmp, preexec_fn=die_with_parent)
            workers[impl] = {"p": p, "log": log}
            try:
                answer(impl, "setup")
            except RuntimeError as e:
                return fail(impl, str(e))
        k = 0
        for rep in range(a.reps):
            for s in sizes:
                for kind, put_op, get_op in pairs:
                    order = impls if k % 2 == 0 else impls[::-1]  # ABBA...
                    k += 1
                    for impl in order:
                        w = workers[impl]
                        w["p"].stdin.write((json.dumps({"pair": kind, "size": s, "tag": f"r{rep}/{kind}/{s}"}) + "\n").encode())
                        w["p"].stdin.flush()
                        try:
                            res = answer(impl, f"{kind} {human(s)}")
                        except RuntimeError as e:
                            return fail(impl, str(e))
                        secs[(impl, put_op, s)].append(res["put"])
                        secs[(impl, get_op, s)].append(res["get"])
            print(f"  rep {rep + 1}/{a.reps}: " + "  ".join(
                f"{op} {human(s)} " + "/".join(f"{a.objects * s / secs[(impl, op, s)][-1] / 1e9:.2f}" for impl in impls)
                for s in sizes for op in OPS) + f" GB/s ({'/'.join(impls)})", flush=True)
    finally:
        for w in workers.values():
            with contextlib.suppress(OSError, ValueError):
                w["p"].stdin.write(b'{"exit": true}\n')
                w["p"].stdin.close()
            try:
                w["p"].wait(10)
            except subprocess.TimeoutExpired:
                w["p"].kill()
                w["p"].wait(10)
        for m in masters.values():
            m.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in secs.items()}
    print(f"\nmedians of {a.reps} rounds; GB/s = {a.objects} objects x size / s (1e9 bytes)")
    hdr = f"{'op':<15} {'size':<5}"
    for impl in impls:
        hdr += f" {impl + ' GB/s':>14} {impl + ' ops/s':>14}"
    if len(impls) == 2:
        hdr += f" {'ours/upstream':>14}  per round (ours/upstream)"
    print(hdr)
    rows = []
    for s in sizes:
        for op in OPS:
            line = f"{op:<15} {human(s):<5}"
            row = {"op": op, "size": s}
            for impl in impls:
                t = med[(impl, op, s)]
                row[impl] = {"gbps": a.objects * s / t / 1e9, "ops_per_s": a.objects / t,
                             "gbps_per_rep": [a.objects * s / x / 1e9 for x in secs[(impl, op, s)]]}
                line += f" {row[impl]['gbps']:14.2f} {row[impl]['ops_per_s']:14.1f}"
            if len(impls) == 2:
                row["ratio"] = med[("upstream", op, s)] / med[("ours", op, s)]
                per = [u / o for o, u in zip(secs[("ours", op, s)], secs[("upstream", op, s)])]
                line += f" {row['ratio']:13.2f}x  [{' '.join('%.2f' % x for x in per)}]"
            print(line)
            rows.append(row)
    if a.json:
        print(json.dumps({"objects": a.objects, "batch": a.batch, "reps": a.reps, "segment_size": a.segment_size,
                          "local_buffer_size": a.local_buffer_size, "impls": {k: sides[k]["label"] for k in impls},
                          "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
