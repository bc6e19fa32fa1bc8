"""The target side of the two-process transfer tests (test_engine.py): a
mooncake.engine.TransferEngine in its own process (its own Go runtime).

    engine_peer.py METADATA NAME SIZE

initializes as NAME on METADATA, takes a managed buffer of SIZE bytes, and
prints one JSON line {"name": segment name, "addr": buffer, "rpc_port": p}.
Then it answers commands on stdin, one JSON line each:

    sha256 OFF LEN   {"sha256": hex digest of LEN bytes at addr+OFF}
    fill SEED        fills the buffer with bytes of SEED, {"sha256": ...}
    notifies         {"notifies": [[name, msg], ...]} (drained)
    exit             frees the buffer and exits 0
"""

import hashlib
import json
import random
import sys

from mooncake.engine import TransferEngine


def say(**msg):
    print(json.dumps(msg), flush=True)


def main(meta, name, size):
    e = TransferEngine()
    if e.initialize(name, meta, "tcp", "") != 0:
        sys.exit("initialize failed")
    addr = e.allocate_managed_buffer(size)
    if addr == 0:
        sys.exit("allocate_managed_buffer failed")
    seg = name if meta != "P2PHANDSHAKE" else f"127.0.0.1:{e.get_rpc_port()}"
    say(name=seg, addr=addr, rpc_port=e.get_rpc_port(), first=e.get_first_buffer_address(seg))
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "sha256":
            off, n = int(cmd[1]), int(cmd[2])
            say(sha256=hashlib.sha256(e.read_bytes_from_buffer(addr + off, n)).hexdigest())
        elif cmd[0] == "fill":
            data = random.Random(int(cmd[1])).randbytes(size)
            e.write_bytes_to_buffer(addr, data, size)
            say(sha256=hashlib.sha256(data).hexdigest())
        elif cmd[0] == "notifies":
            say(notifies=[[n.name, n.msg] for n in e.get_notifies()])
        elif cmd[0] == "exit":
            say(freed=e.free_managed_buffer(addr, size))
            return


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
