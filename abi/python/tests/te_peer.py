"""One side of the two-process transfer test (test_te_ctypes.py).

Run as a separate process so that each side has its own Go runtime, loaded
through ctypes only. Messages to the parent are JSON lines on stdout.

    te_peer.py target    LIB META NAME SIZE
        registers SIZE bytes (mmap), prints {"addr": A}, then on stdin
        "verify SHA256" prints {"sha256": got, "ok": got == SHA256},
        and on "exit" unregisters, destroys and exits.
    te_peer.py initiator LIB META NAME TARGET ADDR SIZE REQ BATCH
        fills SIZE bytes with a pattern, WRITEs them to TARGET's buffer at
        ADDR in REQ-byte requests, BATCH requests per batch, polls every
        status, and prints {"sha256": ..., "seconds": ..., "failed": [...]}.
"""

import ctypes
import hashlib
import json
import mmap
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mc_te  # noqa: E402

MIB = 1 << 20


def say(**msg):
    print(json.dumps(msg), flush=True)


def buffer(size):
    """An anonymous mapping and its address (the caller owns it)."""
    mm = mmap.mmap(-1, size)
    view = ctypes.c_char.from_buffer(mm)
    return mm, view, ctypes.addressof(view)


def fill(mm, size, seed=20240611):
    """Deterministic pattern: each MiB a different window of 2 MiB of
    seeded random bytes, so a misplaced or repeated block changes the hash."""
    src = random.Random(seed).randbytes(2 * MIB)
    for i in range(0, size, MIB):
        n = min(MIB, size - i)
        off = (i // MIB * 7919) % MIB
        mm[i : i + n] = src[off : off + n]


def target(lib_path, meta, name, size):
    lib = mc_te.load(lib_path)
    eng = mc_te.Engine(lib, meta, name)
    mm, view, addr = buffer(size)
    eng.register(addr, size)
    say(addr=addr)
    for line in sys.stdin:
        cmd = line.split()
        if cmd and cmd[0] == "verify":
            got = hashlib.sha256(mm).hexdigest()
            say(sha256=got, ok=got == cmd[1])
        elif cmd == ["exit"]:
            break
    eng.unregister(addr)
    eng.destroy()
    del view
    mm.close()
    say(bye=True)


def initiator(lib_path, meta, name, target_name, target_addr, size, req, per_batch):
    lib = mc_te.load(lib_path)
    eng = mc_te.Engine(lib, meta, name)
    mm, view, addr = buffer(size)
    fill(mm, size)
    want = hashlib.sha256(mm).hexdigest()
    eng.register(addr, size)
    seg = eng.open_segment(target_name)
    write = mc_te.C["MC_TE_OPCODE_WRITE"]
    completed, failed_status = mc_te.C["MC_TE_STATUS_COMPLETED"], mc_te.C["MC_TE_STATUS_FAILED"]
    failed = []
    moved = 0
    start = time.monotonic()
    offsets = list(range(0, size, req))
    for first in range(0, len(offsets), per_batch):
        chunk = offsets[first : first + per_batch]
        batch = eng.allocate_batch(len(chunk))
        eng.submit(batch, [mc_te.Request(write, addr + off, seg, target_addr + off, min(req, size - off)) for off in chunk])
        for task, off in enumerate(chunk):
            deadline = time.monotonic() + 60
            while True:
                st, n, reason = eng.status(batch, task)
                if st == completed:
                    moved += n
                    break
                if st == failed_status:
                    failed.append(f"offset {off}: {reason}")
                    break
                if time.monotonic() > deadline:
                    failed.append(f"offset {off}: still status {st} after 60 s")
                    break
                time.sleep(0.0001)
        eng.free_batch(batch)
    seconds = time.monotonic() - start
    eng.unregister(addr)
    eng.destroy()
    del view
    mm.close()
    say(sha256=want, seconds=seconds, moved=moved, failed=failed)


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "target":
        target(args[0], args[1], args[2], int(args[3]))
    elif role == "initiator":
        initiator(args[0], args[1], args[2], args[3], int(args[4]), int(args[5]), int(args[6]), int(args[7]))
    else:
        sys.exit(f"unknown role {role!r}")
