#!/usr/bin/env python3
"""Upstream Mooncake transfer engine, TCP loopback, two processes.

The reference side of `make bench-transfer` (scripts/bench-transfer.sh): it
runs the upstream wheel's engine (`pip install -r requirements-bench.txt`,
`from mooncake.engine import TransferEngine`) the way `mooncake bench
transfer` runs ours: a target process allocates and registers
block_size*batch_size bytes, an initiator process registers the same amount
and loops batch_transfer_sync_write (or _read) of batch_size blocks of
block_size bytes for --duration seconds after a 500 ms warm-up, then prints
one JSON line:

  {"gbps": ..., "batches": ..., "block_size": ..., "batch_size": ...,
   "operation": ..., "batch_p50_ms": ..., "batch_p99_ms": ..., ...}

GB/s counts 1e9 bytes, as ours does. Metadata: P2PHANDSHAKE (the target's
segment name is "127.0.0.1:<rpc_port>", passed to the initiator over a pipe
with the buffer address). Before timing, the data path is checked once in
both directions: the initiator writes a per-block pattern and the target
compares every block; the target fills a second pattern and the initiator
reads it back and compares.

Nothing hangs: the target is a child process (multiprocessing, spawn) that
dies with its parent (PR_SET_PDEATHSIG and pipe EOF), every pipe wait is
bounded, sync transfers are bounded by MC_TRANSFER_TIMEOUT, and a
faulthandler watchdog hard-exits the initiator after --timeout seconds even
if it is stuck inside the C++ engine. Exit status: 0 ok, 1 failure.
"""

import argparse
import ctypes
import faulthandler
import hashlib
import json
import multiprocessing as mp
import os
import signal
import sys
import time

HOST = "127.0.0.1"

# Quiet, bounded engine defaults; the caller's environment wins.
for k, v in {
    "MC_LOG_LEVEL": "WARNING",  # glog noise to stderr otherwise
    "GLOG_minloglevel": "2",    # the wheel's glog: errors only
    "MC_TRANSFER_TIMEOUT": "10",  # seconds; bound on each *_sync call
    "MC_HANDSHAKE_CONNECT_TIMEOUT": "5",
}.items():
    os.environ.setdefault(k, v)


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


def pattern(seed, i, n):
    """n bytes unique to (seed, block i): a 64-byte digest repeated."""
    chunk = hashlib.blake2b(b"%s:%d" % (seed, i), digest_size=64).digest()
    return (chunk * (n // 64 + 1))[:n]


def die_with_parent():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def new_engine():
    from mooncake.engine import TransferEngine
    eng = TransferEngine()
    rc = eng.initialize(HOST, "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise RuntimeError("TransferEngine.initialize(%r, P2PHANDSHAKE, tcp) = %d" % (HOST, rc))
    return eng


def alloc(eng, n):
    # With tcp the wheel's managed buffer is plain malloc memory, registered.
    addr = eng.allocate_managed_buffer(n)
    if not addr:
        raise RuntimeError("allocate_managed_buffer(%d) failed" % n)
    return addr


def target_main(conn, block, batch):
    """Child: own and expose a registered buffer; answer verification requests."""
    die_with_parent()
    try:
        eng = new_engine()
        addr = alloc(eng, block * batch)
        ctypes.memset(addr, 0, block * batch)
        conn.send(("ready", "%s:%d" % (HOST, eng.get_rpc_port()), addr))
    except Exception as e:  # report, then exit
        conn.send(("error", repr(e), 0))
        return
    while True:
        if not conn.poll(1.0):
            if os.getppid() == 1:
                return
            continue
        try:
            msg = conn.recv()
        except EOFError:
            return
        cmd = msg[0]
        if cmd == "check":  # compare every block with the initiator's pattern
            seed = msg[1]
            bad = [i for i in range(batch)
                   if ctypes.string_at(addr + i * block, block) != pattern(seed, i, block)]
            conn.send(("checked", bad))
        elif cmd == "fill":  # fill every block with a pattern for a read check
            seed = msg[1]
            for i in range(batch):
                ctypes.memmove(addr + i * block, pattern(seed, i, block), block)
            conn.send(("filled",))
        elif cmd == "exit":
            conn.send(("bye",))
            return


def recv(conn, timeout, what):
    if not conn.poll(timeout):
        raise RuntimeError("no %s from target within %.0f s" % (what, timeout))
    return conn.recv()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--operation", choices=("write", "read"), default="write")
    ap.add_argument("--block-size", default="1MiB", help="bytes per block (e.g. 65536, 64KiB, 1MiB)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before")
    ap.add_argument("--timeout", type=float, default=0,
                    help="hard limit in seconds for the whole run (default duration+warmup+60)")
    a = ap.parse_args()
    block, batch = parse_size(a.block_size), a.batch_size
    if block <= 0 or batch <= 0 or a.duration <= 0:
        ap.error("block size, batch size and duration must be positive")
    limit = a.timeout or (a.duration + a.warmup + 60)
    # Hard watchdog: works even while blocked in the C++ engine; the child
    # follows via PR_SET_PDEATHSIG.
    faulthandler.dump_traceback_later(limit, exit=True)

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target_main, args=(child, block, batch), daemon=True)
    proc.start()
    child.close()
    try:
        st, segment, raddr = recv(parent, 30, "segment")
        if st != "ready":
            raise RuntimeError("target failed: %s" % segment)

        eng = new_engine()
        total = block * batch
        laddr = alloc(eng, total)
        offs = [i * block for i in range(batch)]
        lbufs = [laddr + o for o in offs]
        rbufs = [raddr + o for o in offs]
        lens = [block] * batch

        # 1. write check: initiator pattern -> target compares every block
        seed = b"w%d" % os.getpid()
        for i in range(batch):
            ctypes.memmove(lbufs[i], pattern(seed, i, block), block)
        rc = eng.batch_transfer_sync_write(segment, lbufs, rbufs, lens)
        if rc != 0:
            raise RuntimeError("verification batch_transfer_sync_write = %d" % rc)
        parent.send(("check", seed))
        _, bad = recv(parent, 60, "write check")
        if bad:
            raise RuntimeError("write check: %d of %d blocks differ at the target (first %d)" % (len(bad), batch, bad[0]))
        # 2. read check: target pattern -> initiator compares every block
        seed = b"r%d" % os.getpid()
        parent.send(("fill", seed))
        recv(parent, 60, "fill")
        ctypes.memset(laddr, 0, total)
        rc = eng.batch_transfer_sync_read(segment, lbufs, rbufs, lens)
        if rc != 0:
            raise RuntimeError("verification batch_transfer_sync_read = %d" % rc)
        bad = [i for i in range(batch) if ctypes.string_at(lbufs[i], block) != pattern(seed, i, block)]
        if bad:
            raise RuntimeError("read check: %d of %d blocks differ at the initiator (first %d)" % (len(bad), batch, bad[0]))

        op = eng.batch_transfer_sync_write if a.operation == "write" else eng.batch_transfer_sync_read
        start = time.perf_counter()
        measure_from = start + a.warmup
        stop = measure_from + a.duration
        batches, lat = 0, []
        t0 = None
        while True:
            b0 = time.perf_counter()
            if b0 >= stop:
                break
            rc = op(segment, lbufs, rbufs, lens)
            b1 = time.perf_counter()
            if rc != 0:
                raise RuntimeError("batch_transfer_sync_%s = %d" % (a.operation, rc))
            if b0 >= measure_from:
                if t0 is None:
                    t0 = b0
                batches += 1
                lat.append(b1 - b0)
                t_end = b1
        if not batches:
            raise RuntimeError("no batch completed in the measured window")
        elapsed = t_end - t0
        lat.sort()
        pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
        out = {
            "engine": "upstream",
            "protocol": "tcp",
            "operation": a.operation,
            "block_size": block,
            "batch_size": batch,
            "gbps": batches * total / elapsed / 1e9,
            "batches": batches,
            "bytes": batches * total,
            "elapsed_s": elapsed,
            "batch_p50_ms": pct(0.50),
            "batch_p99_ms": pct(0.99),
            "verified": True,
        }
        try:
            parent.send(("exit",))
            recv(parent, 5, "exit")
        except Exception:
            pass
        print(json.dumps(out), flush=True)
        return 0
    except Exception as e:
        print("bench_upstream_te: %s" % e, file=sys.stderr, flush=True)
        return 1
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    # The wheel's engine threads can make interpreter teardown slow or
    # noisy; the result is printed, so leave at once.
    os._exit(rc)
