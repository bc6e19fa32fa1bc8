#!/usr/bin/env python3
"""Upstream Mooncake Store (master + clients), TCP on 127.0.0.1, N processes.

The reference side of `make bench-store` (scripts/bench-store.sh): it runs
the upstream wheel's store (`pip install -r requirements-bench.txt`, its
`mooncake_master` executable and `from mooncake.store import
MooncakeDistributedStore`) the way `mooncake bench store` runs ours:

- one `mooncake_master` on 127.0.0.1 (free rpc, metadata and metrics ports;
  --enable_http_metadata_server=true; eviction ratio 0.05 and high watermark
  0.90, upstream's and our defaults);
- --clients client PROCESSES, each `setup(local_hostname="127.0.0.1",
  metadata_server="http://127.0.0.1:<p>/metadata", global_segment_size=
  --segment-size, local_buffer_size=--local-buffer-size, protocol="tcp",
  rdma_devices="", master_server_addr="127.0.0.1:<rpc>")`, so the pool is
  clients x segment-size (default 4 x 256 MiB = 1 GiB, the size of ours:
  2 nodes x 512 MiB);
- each client registers one buffer (register_buffer) and puts values of
  --value-size bytes with zero-copy put_from under distinct keys: first an
  unmeasured warm-up of at least --warmup seconds that goes on until the
  pool was written once (steady state: puts evict, as ours), then the
  measured put phase of --duration seconds; then every client checks its
  newest keys still in the pool (get_into, verified), the parent merges
  them, and all clients read them round robin with get_into for --duration
  seconds, checking each value's header (writer, sequence).

Phases start together (a barrier). It prints one JSON line:

  {"put": {"ops_per_s", "gbps", "p50_ms", "p99_ms", "ops", "errors",
   "elapsed_s"}, "get": {...}, "value_size", "clients", ...}

GB/s counts 1e9 bytes (ops/s x value size / 1e9), as ours does. A put that
the master refuses (e.g. no space before eviction caught up) counts in
"errors", not in ops.

Nothing hangs: clients are children (multiprocessing, spawn) that die with
the parent (PR_SET_PDEATHSIG), the master too; every wait is bounded, and a
faulthandler watchdog hard-exits each process after --timeout seconds even
if it is stuck inside the C++ client. Exit status: 0 ok, 1 failure, 2 the
wheel has no store (the reason on stderr, starting "skipped:").
"""

import argparse
import ctypes
import faulthandler
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

HOST = "127.0.0.1"

for k, v in {
    "MC_LOG_LEVEL": "WARNING",
    "GLOG_minloglevel": "2",
    "MC_TRANSFER_TIMEOUT": "10",
    "MC_HANDSHAKE_CONNECT_TIMEOUT": "5",
    "MC_RPC_TIMEOUT_MS": "10000",
    "MC_RPC_CONNECT_TIMEOUT_MS": "5000",
    "MC_STORE_CLIENT_SETUP_RETRIES": "3",
    "MC_STORE_CLIENT_METRIC": "0",
}.items():
    os.environ.setdefault(k, v)

HDR = struct.Struct("<QQ")  # writer id, sequence number
MAX_GET_KEYS = 4096         # per worker, as ours (storebench.maxGetKeys)


def parse_size(s):
    s = str(s).strip()
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
             "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3,
             "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "b": 1}
    low = s.lower()
    for u in sorted(units, key=len, reverse=True):
        if low.endswith(u) and low[: -len(u)].strip():
            return int(float(low[: -len(u)]) * units[u])
    return int(s)


def die_with_parent():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def find_master():
    """The wheel's mooncake_master: next to this python, else in the package."""
    cands = [os.path.join(os.path.dirname(sys.executable), "mooncake_master")]
    try:
        import importlib.util
        spec = importlib.util.find_spec("mooncake")
        if spec and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                cands.append(os.path.join(d, "mooncake_master"))
    except Exception:
        pass
    w = shutil.which("mooncake_master")
    if w:
        cands.append(w)
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def wait_port(port, deadline):
    while time.time() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def pct(lat, p):
    return lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else 0.0


def client_main(wid, cfg, conn, barrier):
    """Child: one store client, one worker."""
    die_with_parent()
    # the C++ client logs warnings (e.g. each put refused for space) to
    # fd 2 whatever GLOG_minloglevel says: keep them in a file
    fd = os.open(cfg["log"] % wid, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.dump_traceback_later(cfg["timeout"], exit=True)
    bt = cfg["barrier_timeout"]
    try:
        from mooncake.store import MooncakeDistributedStore
        vs = cfg["value_size"]
        st = MooncakeDistributedStore()
        rc = st.setup(HOST, cfg["metadata"], cfg["segment_size"], cfg["local_buffer_size"],
                      "tcp", "", cfg["master"])
        if rc != 0:
            raise RuntimeError("setup(...) = %d" % rc)
        buf = (ctypes.c_char * (2 * vs))()
        src = ctypes.addressof(buf)
        dst = src + vs
        # a body that is not all zeros; the header is rewritten per put
        body = (os.urandom(64) * (vs // 64 + 1))[:vs]
        ctypes.memmove(src, body, vs)
        rc = st.register_buffer(src, 2 * vs)
        if rc != 0:
            raise RuntimeError("register_buffer(%d bytes) = %d" % (2 * vs, rc))
        prefix = "%s/%d/" % (cfg["run"], wid)
        seq = [0]
        errors = [0]
        last_err = [0]

        def put_one():
            s = seq[0]
            ctypes.memmove(src, HDR.pack(wid, s), HDR.size)
            r = st.put_from(prefix + str(s), src, vs)
            if r != 0:
                errors[0] += 1
                last_err[0] = r
                return False
            seq[0] = s + 1
            return True

        conn.send(("ready",))
        barrier.wait(bt)
        # warm-up: at least --warmup, and until this worker wrote its share
        # of the pool (steady state: later puts evict)
        t = time.perf_counter()
        need = cfg["fill_bytes"]
        while time.perf_counter() - t < cfg["warmup"] or seq[0] * vs < need:
            put_one()
            if time.perf_counter() - t > cfg["fill_limit"]:
                break
        warm_puts, warm_errors = seq[0], errors[0]
        errors[0] = 0
        barrier.wait(bt)
        # measured put phase
        lat = []
        t0 = time.perf_counter()
        stop = t0 + cfg["duration"]
        while True:
            b0 = time.perf_counter()
            if b0 >= stop:
                break
            if put_one():
                lat.append(time.perf_counter() - b0)
        put = {"ops": len(lat), "elapsed_s": time.perf_counter() - t0,
               "errors": errors[0], "last_error": last_err[0], "lat": lat}
        barrier.wait(bt)
        # newest keys still in the pool (reading them back verifies them
        # and leases them, so they stay while the get phase reads them)
        want = min(max(cfg["segment_size"] // vs, 1), MAX_GET_KEYS)
        mine = []
        for s in range(seq[0] - 1, max(seq[0] - 1 - want, -1), -1):
            k = prefix + str(s)
            r = st.get_into(k, dst, vs)
            if r != vs:
                continue
            w, q = HDR.unpack(ctypes.string_at(dst, HDR.size))
            if (w, q) != (wid, s):
                raise RuntimeError("%s holds writer %d seq %d" % (k, w, q))
            mine.append((k, wid, s))
        conn.send(("put", put, mine, warm_puts, warm_errors))
        gets = conn.recv()  # merged list from the parent (bounded by barrier)
        barrier.wait(bt)
        lat = []
        gerr = 0
        i = (wid * len(gets)) // max(cfg["clients"], 1)
        t0 = time.perf_counter()
        stop = t0 + cfg["duration"]
        while True:
            b0 = time.perf_counter()
            if b0 >= stop:
                break
            k, w, s = gets[i % len(gets)]
            i += 1
            r = st.get_into(k, dst, vs)
            b1 = time.perf_counter()
            if r != vs:
                gerr += 1
                continue
            if HDR.unpack(ctypes.string_at(dst, HDR.size)) != (w, s):
                raise RuntimeError("get %s: header differs from what was written" % k)
            lat.append(b1 - b0)
        get = {"ops": len(lat), "elapsed_s": time.perf_counter() - t0, "errors": gerr, "lat": lat}
        conn.send(("get", get))
        # the parent has what it needs; leave without a slow C++ teardown
        try:
            conn.recv() if conn.poll(10) else None
        except EOFError:
            pass
    except Exception as e:
        try:
            conn.send(("error", "client %d: %r" % (wid, e)))
        except Exception:
            pass
        try:
            barrier.abort()
        except Exception:
            pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def recv(conn, timeout, what):
    if not conn.poll(timeout):
        raise RuntimeError("no %s from a client within %.0f s" % (what, timeout))
    m = conn.recv()
    if m[0] == "error":
        raise RuntimeError(m[1])
    return m


def summarize(parts, vs):
    lat = sorted(x for p in parts for x in p["lat"])
    ops = sum(p["ops"] for p in parts)
    el = max(p["elapsed_s"] for p in parts)
    return {"ops_per_s": ops / el, "gbps": ops * vs / el / 1e9,
            "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99), "ops": ops,
            "errors": sum(p["errors"] for p in parts), "elapsed_s": el}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--value-size", default="1MiB")
    ap.add_argument("--clients", type=int, default=4, help="client processes, one worker each")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per phase")
    ap.add_argument("--warmup", type=float, default=0.5, help="least unmeasured seconds of puts (then until the pool was written once)")
    ap.add_argument("--segment-size", default="256MiB", help="global_segment_size of each client (pool = clients x this)")
    ap.add_argument("--local-buffer-size", default="64MiB")
    ap.add_argument("--timeout", type=float, default=0,
                    help="hard limit in seconds for the whole run (default 2*duration+warmup+120)")
    a = ap.parse_args()
    vs, seg = parse_size(a.value_size), parse_size(a.segment_size)
    if vs <= HDR.size or a.clients <= 0 or a.duration <= 0 or seg < vs:
        ap.error("value size > 16 bytes, clients and duration > 0, segment size >= value size")
    limit = a.timeout or (2 * a.duration + a.warmup + 120)
    faulthandler.dump_traceback_later(limit, exit=True)

    master = find_master()
    try:
        import mooncake.store  # noqa: F401
        ok = hasattr(mooncake.store, "MooncakeDistributedStore")
    except Exception as e:
        ok, why = False, "from mooncake.store import MooncakeDistributedStore: %r" % e
    else:
        why = "mooncake.store has no MooncakeDistributedStore"
    if not master or not ok:
        print("skipped: %s" % ("no mooncake_master executable in the wheel" if not master else why),
              file=sys.stderr, flush=True)
        return 2

    tmp = tempfile.mkdtemp(prefix="bench-upstream-store-")
    rpc, meta, metrics = free_port(), free_port(), free_port()
    log = open(os.path.join(tmp, "master.log"), "wb")
    margs = [master, "--rpc_address=" + HOST, "--rpc_port=%d" % rpc,
             "--enable_http_metadata_server=true", "--http_metadata_server_host=" + HOST,
             "--http_metadata_server_port=%d" % meta, "--metrics_port=%d" % metrics,
             "--eviction_ratio=0.05", "--eviction_high_watermark_ratio=0.90",
             "--enable_metric_reporting=false", "--logtostderr=true"]
    mp_ = subprocess.Popen(margs, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           preexec_fn=die_with_parent, start_new_session=True)
    procs, conns = [], []

    def master_tail():
        try:
            log.flush()
            with open(os.path.join(tmp, "master.log"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except Exception:
            return ""
    try:
        dl = time.time() + 20
        if not (wait_port(rpc, dl) and wait_port(meta, dl)):
            raise RuntimeError("mooncake_master did not listen on %d/%d within 20 s (exit %s): %s"
                               % (rpc, meta, mp_.poll(), master_tail()))
        n = a.clients
        cfg = {"value_size": vs, "segment_size": seg, "local_buffer_size": parse_size(a.local_buffer_size),
               "metadata": "http://%s:%d/metadata" % (HOST, meta), "master": "%s:%d" % (HOST, rpc),
               "duration": a.duration, "warmup": a.warmup, "fill_bytes": seg,
               "fill_limit": 60.0, "clients": n, "run": "ubs-" + uuid.uuid4().hex[:8],
               "timeout": limit, "barrier_timeout": 90.0,
               "log": os.path.join(tmp, "client%d.log")}
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(n)
        for wid in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=client_main, args=(wid, cfg, child, barrier), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for c in conns:
            recv(c, 60, "setup")
        puts, gets, warm = [], [], [0, 0]
        for c in conns:
            m = recv(c, cfg["fill_limit"] + 2 * a.duration + 90, "put result")
            puts.append(m[1])
            gets.extend(m[2])
            warm[0] += m[3]
            warm[1] += m[4]
        if not gets:
            raise RuntimeError("none of the newest keys written is left in the pool")
        for c in conns:
            c.send(gets)
        got = [recv(c, a.duration + 90, "get result")[1] for c in conns]
        for c in conns:
            try:
                c.send(("exit",))
            except Exception:
                pass
        put, get = summarize(puts, vs), summarize(got, vs)
        if put["ops"] == 0:
            raise RuntimeError("no put succeeded in the measured window (%d errors, last %d)"
                               % (put["errors"], puts[0]["last_error"]))
        if get["ops"] == 0:
            raise RuntimeError("no get succeeded in the measured window (%d errors)" % get["errors"])
        out = {"store": "upstream", "protocol": "tcp", "value_size": vs, "clients": n,
               "segment_size": seg, "pool_bytes": seg * n, "warmup_puts": warm[0],
               "warmup_put_errors": warm[1], "get_keys": len(gets), "put": put, "get": get}
        print(json.dumps(out), flush=True)
        return 0
    except Exception as e:
        print("bench_upstream_store: %s" % e, file=sys.stderr, flush=True)
        for wid in range(len(procs)):
            try:
                with open(os.path.join(tmp, "client%d.log" % wid), "rb") as f:
                    tail = f.read()[-1500:].decode(errors="replace")
                if tail.strip():
                    print("client %d log tail:\n%s" % (wid, tail), file=sys.stderr, flush=True)
            except OSError:
                pass
        return 1
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        if mp_.poll() is None:
            mp_.terminate()
            try:
                mp_.wait(5)
            except subprocess.TimeoutExpired:
                mp_.kill()
                mp_.wait(5)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)
