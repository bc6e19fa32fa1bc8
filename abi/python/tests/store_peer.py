"""One side of the two-process store test (test_store.py).

Run as a separate process so that each side has its own copy of
libmooncake.so (and Go runtime), loaded through mooncake_go's loader
($MOONCAKE_GO_LIB). Messages to the parent are JSON lines on stdout; the
parent's commands are lines on stdin.

    store_peer.py writer META MASTER PREFIX BLOCKS BLK
        sets up a Store (raising API) that also contributes 32 MiB, fills a
        registered buffer with BLOCKS blocks of BLK bytes, batch_put_from's
        them as PREFIX-<i>, checks batch_is_exist and prints
        {"codes": [...], "exist": [...], "sha256": [...], "hostname": ...}.
    store_peer.py reader META MASTER PREFIX BLOCKS BLK
        sets up a MooncakeDistributedStore (upstream int conventions, pure
        client), batch_is_exist + batch_get_into's PREFIX-<i> into a
        registered buffer and prints {"exist": [...], "results": [...],
        "sha256": [...]}.
    Both then serve, on stdin:
        "put PREFIX N BLK"  write N blocks of their own as PREFIX-<i>, print
                            {"codes": [...], "sha256": [...]}
        "get PREFIX N BLK"  read them, print {"results": [...], "sha256": [...]}
        "exit"              unregister, close, print {"bye": true}
"""

import ctypes
import hashlib
import json
import mmap
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # abi/python
import mooncake_go  # noqa: E402

MIB = 1 << 20


def say(**msg):
    print(json.dumps(msg), flush=True)


class Buffer:
    """An anonymous mapping registered with the store (the caller owns it)."""

    def __init__(self, store, size):
        self.size = size
        self.mm = mmap.mmap(-1, size)
        self.view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self.view)
        self.store = store
        rc = store.register_buffer(self.addr, size)
        if rc not in (None, 0):
            raise SystemExit(f"register_buffer = {rc}")

    def block(self, i, blk):
        return self.mm[i * blk : (i + 1) * blk]

    def close(self):
        self.store.unregister_buffer(self.addr)
        del self.view
        self.mm.close()


def pattern(prefix, i, blk):
    """Deterministic bytes of block i of prefix."""
    return random.Random(f"{prefix}/{i}").randbytes(blk)


def digest(b):
    return hashlib.sha256(b).hexdigest()


def put_blocks(store, buf, prefix, n, blk):
    keys = [f"{prefix}-{i}" for i in range(n)]
    for i in range(n):
        buf.mm[i * blk : (i + 1) * blk] = pattern(prefix, i, blk)
    codes = store.batch_put_from(keys, [buf.addr + i * blk for i in range(n)], [blk] * n)
    return keys, codes, [digest(buf.block(i, blk)) for i in range(n)]


def get_blocks(store, buf, prefix, n, blk):
    keys = [f"{prefix}-{i}" for i in range(n)]
    buf.mm[: n * blk] = bytes(n * blk)
    exist = store.batch_is_exist(keys)
    results = store.batch_get_into(keys, [buf.addr + i * blk for i in range(n)], [blk] * n)
    return exist, results, [digest(buf.block(i, blk)) for i in range(n)]


def serve(store, buf):
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "put":
            _, codes, sums = put_blocks(store, buf, cmd[1], int(cmd[2]), int(cmd[3]))
            say(codes=codes, sha256=sums)
        elif cmd[0] == "get":
            exist, results, sums = get_blocks(store, buf, cmd[1], int(cmd[2]), int(cmd[3]))
            say(exist=exist, results=results, sha256=sums)
        elif cmd == ["exit"]:
            break
    buf.close()
    store.close()
    say(bye=True)


def main(role, meta, master, prefix, blocks, blk):
    if role == "writer":
        store = mooncake_go.Store()
        store.setup("127.0.0.1", meta, 32 * MIB, 16 * MIB, "tcp", "", master)
        buf = Buffer(store, blocks * blk)
        keys, codes, sums = put_blocks(store, buf, prefix, blocks, blk)
        say(codes=codes, exist=store.batch_is_exist(keys), sha256=sums, hostname=store.get_hostname())
    elif role == "reader":
        store = mooncake_go.MooncakeDistributedStore()
        rc = store.setup("127.0.0.1", meta, 0, 16 * MIB, "tcp", "", master)
        if rc != 0:
            raise SystemExit(f"setup = {rc}")
        buf = Buffer(store, blocks * blk)
        exist, results, sums = get_blocks(store, buf, prefix, blocks, blk)
        say(exist=exist, results=results, sha256=sums, lib=mooncake_go.loaded())
    else:
        sys.exit(f"unknown role {role!r}")
    serve(store, buf)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]))
