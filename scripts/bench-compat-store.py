#!/usr/bin/env python3
"""make bench-compat-store: our `mooncake.store` vs upstream's, same machine, same run.

Measures upstream Mooncake's Python store API, `MooncakeDistributedStore`,
through two implementations, alternating them (ABAB...) so that load from
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

For each value size (--sizes, default 1MiB,4MiB) the client runs, with
--objects distinct keys per phase and each phase timed as a whole:

  put             put(key, bytes)          copying (the value is a Python bytes)
  get             get(key) -> bytes        copying
  put_from        put_from(key, ptr, n)    zero copy from a registered buffer
  get_into        get_into(key, ptr, n)    zero copy into a registered buffer
  batch_put_from  batch_put_from(keys[B], ptrs, sizes)   B = --batch
  batch_get_into  batch_get_into(keys[B], ptrs, sizes)

Each value get() returns is measured, then dropped before the next call,
as a consumer does (keeping all of them instead makes every get fault in
fresh pages, which on this VM costs more than the transfer on both sides).
(remove_all(force=True) between the put/get pairs, untimed; one untimed
put_from pass over the pool's first bytes before the first phase, so page
faults of fresh memory hit neither side's timed phases; every get is
checked for its length and a sample of values byte for byte, untimed).
GB/s counts 1e9 bytes: objects x size / seconds.

Usage: scripts/bench-compat-store.py [--reps 5] [--objects 128] [--json]
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
    """Runs every phase for every size in this process and prints one JSON
    line {"results": {op: {size: seconds}}, ...}."""
    from mooncake.store import MooncakeDistributedStore

    st = MooncakeDistributedStore()
    rc = st.setup(HOST, cfg["metadata"], cfg["segment_size"], cfg["local_buffer_size"], "tcp", "", cfg["master"])
    if rc != 0:
        raise SystemExit(f"setup(...) = {rc}")
    sizes, n, batch = cfg["sizes"], cfg["objects"], cfg["batch"]
    span = n * max(sizes)
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
    out = {op: {} for op in OPS}

    def check(rcs, what, want):
        bad = [r for r in rcs if r != want]
        if bad:
            raise SystemExit(f"{what}: {len(bad)} of {len(rcs)} calls returned {bad[0]} (want {want})")

    def clear():
        st.remove_all(True)

    # untimed: write the segment's first bytes once (page faults, caches)
    size = max(sizes)
    check([st.put_from(f"warm/{i}", src_a + i * size, size) for i in range(n)], "warm-up put_from", 0)
    clear()
    run = cfg["run"]
    for size in sizes:
        keys = [f"{run}/{size}/{i}" for i in range(n)]
        values = [ctypes.string_at(src_a + i * size, size) for i in range(n)]
        ptrs = [src_a + i * size for i in range(n)]
        dptrs = [dst_a + i * size for i in range(n)]
        sz = [size] * n

        t = time.perf_counter()
        rcs = [st.put(k, v) for k, v in zip(keys, values)]
        out["put"][size] = time.perf_counter() - t
        check(rcs, "put", 0)
        sample, kept, lens = {0, n // 2, n - 1}, {}, []
        t = time.perf_counter()
        for i, k in enumerate(keys):
            g = st.get(k)  # used, then dropped, as a consumer does
            lens.append(len(g))
            if i in sample:
                kept[i] = g
        out["get"][size] = time.perf_counter() - t
        del g
        check(lens, "get (length)", size)
        for i, g in kept.items():
            if g != values[i]:
                raise SystemExit(f"get {keys[i]}: value differs from what was put")
        del kept
        clear()

        t = time.perf_counter()
        rcs = [st.put_from(k, p, size) for k, p in zip(keys, ptrs)]
        out["put_from"][size] = time.perf_counter() - t
        check(rcs, "put_from", 0)
        ctypes.memset(dst_a, 0, n * size)
        t = time.perf_counter()
        rcs = [st.get_into(k, p, size) for k, p in zip(keys, dptrs)]
        out["get_into"][size] = time.perf_counter() - t
        check(rcs, "get_into", size)
        if ctypes.string_at(dst_a, n * size) != ctypes.string_at(src_a, n * size):
            raise SystemExit("get_into: values differ from what was put_from")
        clear()

        t = time.perf_counter()
        rcs = []
        for i in range(0, n, batch):
            rcs += st.batch_put_from(keys[i:i + batch], ptrs[i:i + batch], sz[i:i + batch])
        out["batch_put_from"][size] = time.perf_counter() - t
        check(rcs, "batch_put_from", 0)
        ctypes.memset(dst_a, 0, n * size)
        t = time.perf_counter()
        rcs = []
        for i in range(0, n, batch):
            rcs += st.batch_get_into(keys[i:i + batch], dptrs[i:i + batch], sz[i:i + batch])
        out["batch_get_into"][size] = time.perf_counter() - t
        check(rcs, "batch_get_into", size)
        if ctypes.string_at(dst_a, n * size) != ctypes.string_at(src_a, n * size):
            raise SystemExit("batch_get_into: values differ from what was put")
        clear()
        del values
    print(json.dumps({"results": {op: {str(s): v for s, v in d.items()} for op, d in out.items()}}), flush=True)
    sys.stdout.flush()
    # leave without either library's teardown (not measured, and upstream's can be slow)
    os._exit(0)


# -- driver ------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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
                                  stdin=subprocess.DEVNULL, start_new_session=True)
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
    ap.add_argument("--reps", type=int, default=5, help="repetitions, alternating ours/upstream (medians are printed)")
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
    ap.add_argument("--timeout", type=float, default=600, help="seconds per client run")
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
          f"{a.objects} objects per phase, batches of {a.batch}; {a.reps} reps alternating {'/'.join(impls)}")
    for name in impls:
        print(f"  {name}: {sides[name]['label']}")
    secs = {(impl, op, s): [] for impl in impls for op in OPS for s in sizes}
    tmp = tempfile.mkdtemp(prefix="bench-compat-store-")
    try:
        for rep in range(a.reps):
            order = impls if rep % 2 == 0 else impls[::-1]
            for impl in order:
                side = sides[impl]
                m = Master(side["master"], tmp, impl)
                try:
                    cfg = {"metadata": f"http://{HOST}:{m.meta}/metadata", "master": f"{HOST}:{m.rpc}",
                           "segment_size": a.segment_size, "local_buffer_size": a.local_buffer_size,
                           "sizes": sizes, "objects": a.objects, "batch": a.batch, "run": f"r{rep}"}
                    errlog = os.path.join(tmp, f"{impl}-client.log")
                    with open(errlog, "wb") as ef:
                        try:
                            r = subprocess.run([side["python"], __file__, "--worker", json.dumps(cfg)], stdout=subprocess.PIPE,
                                               stderr=ef, env=side["env"], timeout=a.timeout, cwd=tmp)
                        except subprocess.TimeoutExpired:
                            r = None
                    line = r.stdout.decode().strip().splitlines()[-1] if r is not None and r.stdout.strip() else ""
                    if r is None or r.returncode != 0 or not line.startswith("{"):
                        with open(errlog, "rb") as f:
                            tail = f.read()[-3000:].decode(errors="replace")
                        why = "timed out" if r is None else f"exit {r.returncode}"
                        print(f"bench-compat-store: {impl} client {why}:\n{tail}\nmaster log tail:\n{m.tail()}", file=sys.stderr)
                        return 1
                    res = json.loads(line)["results"]
                finally:
                    m.stop()
                for op in OPS:
                    for s in sizes:
                        secs[(impl, op, s)].append(res[op][str(s)])
                print(f"  rep {rep + 1}/{a.reps} {impl:<8} " + "  ".join(
                    f"{op} {human(s)} {a.objects * s / res[op][str(s)] / 1e9:.2f}" for s in sizes for op in OPS) + " GB/s",
                    flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in secs.items()}
    print(f"\nmedians of {a.reps} reps; GB/s = {a.objects} objects x size / s (1e9 bytes)")
    hdr = f"{'op':<15} {'size':<5}"
    for impl in impls:
        hdr += f" {impl + ' GB/s':>14} {impl + ' ops/s':>14}"
    if len(impls) == 2:
        hdr += f" {'ours/upstream':>14}  per rep (ours/upstream)"
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
