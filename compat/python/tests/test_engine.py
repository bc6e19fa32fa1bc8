"""mooncake.engine.TransferEngine against a second process: bytes moved
both ways in every metadata mode (HTTP, etcd, P2PHANDSHAKE), sync and
async batches with their status calls, notifications and probes."""

import hashlib
import json
import os
import queue
import random
import subprocess
import sys
import threading

import pytest

from conftest import child_env, free_port

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_peer.py")
SIZE = 4 << 20


class Peer:
    """engine_peer.py in a child process, spoken to in JSON lines."""

    def __init__(self, meta, name):
        self.proc = subprocess.Popen([sys.executable, PEER, meta, name, str(SIZE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
        self.lines = queue.Queue()
        self.err = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append), daemon=True).start()
        self.hello = self.read()

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line)
        put(None)

    def read(self, timeout=60):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"peer silent for {timeout} s; stderr: {''.join(map(str, self.err))}")
        if line is None:
            self.proc.wait(5)
            raise AssertionError(f"peer exited ({self.proc.returncode}); stderr: {''.join(map(str, self.err))}")
        return json.loads(line)

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            assert self.ask("exit") == {"freed": 0}
            assert self.proc.wait(30) == 0


@pytest.fixture
def peer(metadata, lib):
    p = Peer(metadata, f"127.0.0.1:{free_port()}")
    yield p
    try:
        p.close()
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


@pytest.fixture
def initiator(metadata, lib):
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    assert e.initialize(f"127.0.0.1:{free_port()}", metadata, "tcp", "") == 0
    name = f"127.0.0.1:{e.get_rpc_port()}" if metadata == "P2PHANDSHAKE" else None
    return e, name


def sha(b):
    return hashlib.sha256(b).hexdigest()


def test_bytes_both_ways(metadata, peer, initiator):
    from mooncake.engine import TransferNotify, TransferOpcode

    e, _ = initiator
    target, dst = peer.hello["name"], peer.hello["addr"]
    if metadata == "P2PHANDSHAKE":
        assert target == f"127.0.0.1:{peer.hello['rpc_port']}"
    assert peer.hello["first"] == dst, "the target's first buffer is its managed buffer"
    assert e.get_first_buffer_address(target) == dst
    assert e.send_probe(target) == 0

    src = e.allocate_managed_buffer(SIZE)
    assert src != 0
    data = random.Random(1).randbytes(SIZE)
    assert e.write_bytes_to_buffer(src, data, SIZE) == 0

    # One sync write of the whole buffer; the target hashes what landed.
    assert e.transfer_sync_write(target, src, dst, SIZE) == 0
    assert peer.ask(f"sha256 0 {SIZE}") == {"sha256": sha(data)}

    # The target rewrites its buffer; a sync read brings it back.
    want = peer.ask("fill 7")["sha256"]
    assert e.transfer_sync_read(target, src, dst, SIZE) == 0
    assert sha(e.read_bytes_from_buffer(src, SIZE)) == want

    # A sync batch of 64 writes of 4 KiB at scattered offsets.
    offs = random.Random(2).sample(range(0, SIZE // 4096), 64)
    chunks = [random.Random(100 + i).randbytes(4096) for i in range(64)]
    for o, c in zip(offs, chunks):
        e.write_bytes_to_buffer(src + o * 4096, c, 4096)
    srcs = [src + o * 4096 for o in offs]
    dsts = [dst + o * 4096 for o in offs]
    assert e.batch_transfer_sync_write(target, srcs, dsts, [4096] * 64) == 0
    for o, c in zip(offs[:4], chunks[:4]):
        assert peer.ask(f"sha256 {o * 4096} 4096") == {"sha256": sha(c)}

    # Async batches: write, then wait with get_batch_transfer_status; clear,
    # read back asynchronously, compare.
    b1 = e.batch_transfer_async_write(target, srcs[:32], dsts[:32], [4096] * 32)
    b2 = e.batch_transfer_async_write(target, srcs[32:], dsts[32:], [4096] * 32)
    assert b1 != 0 and b2 != 0 and b1 != b2
    assert e.get_batch_transfer_status([b1, b2]) == 0
    assert e.get_batch_transfer_status([b1]) == -1, "a batch is freed once its status was collected"
    for s in srcs:
        e.write_bytes_to_buffer(s, bytes(4096), 4096)
    b3 = e.batch_transfer_async_read(target, srcs, dsts, [4096] * 64)
    assert b3 != 0 and e.get_batch_transfer_status([b3]) == 0
    assert [e.read_bytes_from_buffer(s, 4096) for s in srcs] == chunks

    # transfer_submit_write + transfer_check_status polling.
    b4 = e.transfer_submit_write(target, src, dst + SIZE - 4096, 4096)
    assert b4 != 0
    states = []
    while not states or states[-1] == 0:
        states.append(e.transfer_check_status(b4))
    assert states[-1] == 1 and set(states) <= {0, 1}
    assert e.transfer_check_status(b4) == -1, "checked once completed: the batch is gone"
    assert peer.ask(f"sha256 {SIZE - 4096} 4096") == {"sha256": sha(e.read_bytes_from_buffer(src, 4096))}

    # The generic forms, with a notification after the transfer.
    assert e.transfer_sync(target, src, dst, 128, TransferOpcode.Write, TransferNotify("initiator", "done-1")) == 0
    assert e.batch_transfer_sync(target, [src], [dst], [128], TransferOpcode.Read, TransferNotify("initiator", "done-2")) == 0
    b5 = e.batch_transfer_async(target, [src], [dst], [128], TransferOpcode.Write)
    assert b5 != 0 and e.get_batch_transfer_status([b5]) == 0
    assert peer.ask("notifies") == {"notifies": [["initiator", "done-1"], ["initiator", "done-2"]]}
    assert peer.ask("notifies") == {"notifies": []}
    assert e.get_notifies() == []

    assert e.free_managed_buffer(src, SIZE) == 0


def test_peer_gone(metadata, peer, initiator):
    e, _ = initiator
    target = peer.hello["name"]
    src = e.allocate_managed_buffer(8192)
    assert e.transfer_sync_write(target, src, peer.hello["addr"], 8192) == 0
    peer.close()
    assert e.send_probe(target) != 0
    assert e.transfer_sync_write(target, src, peer.hello["addr"], 8192) == -1
    b = e.batch_transfer_async_write(target, [src], [peer.hello["addr"]], [8192])
    assert b == 0 or e.get_batch_transfer_status([b]) == -1
    assert e.get_first_buffer_address(target) == 0
