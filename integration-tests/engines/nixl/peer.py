"""One NIXL agent of the two-process scenario of test_nixl_backend.py and
bench.py, run in the NIXL engine environment:

    python peer.py target|initiator DIR BACKEND

Both agents use NIXL 1.5.1's Python API unchanged (nixl._api.nixl_agent)
with one backend, BACKEND, created by name from NIXL_PLUGIN_DIR: ours
(MOONCAKE_GO) or NIXL's UCX as the control. They meet through files in
DIR: each writes its agent metadata (get_agent_metadata) there and loads
the other's (add_remote_agent).

target: registers one DRAM buffer of 2 x HALF bytes, the write area
(zeros) then the read area (pattern 2), and answers every notification
"W" + (offset, size, seed) from the initiator by checking every byte of
the write area's [offset, offset+size) against pattern(seed) and sending
back "ACK" + b"1"/b"0" + the message it got, byte for byte. "BYE" ends it.

initiator: WRITEs buffers of several sizes with a notification each and
waits for the target's ACK (so the notification came after the data, and
the bytes were right), then READs the target's read area back and checks
it, then one WRITE of 128 descriptors, then the bad cases. Prints one JSON
line of results ("RESULT {...}") and exits 0 when every check held.
"""

import gc
import json
import os
import struct
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

HALF = 8 << 20
SIZES = [1, 4096, 65536, 1 << 20, (4 << 20) - 3]
WAIT = 120.0  # seconds any one wait may take


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def params(backend):
    # Tests listen on 127.0.0.1 only; UCX takes its defaults. MC_NIXL_PARAMS
    # (JSON) adds backend parameters, e.g. {"cma": "off"} for our tcp path.
    if backend != "MOONCAKE_GO":
        return {}
    return {"ip_addr": "127.0.0.1", **json.loads(os.environ.get("MC_NIXL_PARAMS", "{}"))}


def publish(d, name, agent, extra):
    tmp = os.path.join(d, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(agent.get_agent_metadata())
    os.replace(tmp, os.path.join(d, name + ".meta"))
    with open(os.path.join(d, name + ".json.tmp"), "w") as f:
        json.dump(extra, f)
    os.replace(os.path.join(d, name + ".json.tmp"), os.path.join(d, name + ".json"))


def await_peer(d, name):
    deadline = time.monotonic() + WAIT
    path = os.path.join(d, name + ".json")
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} never published its metadata in {d}")
        time.sleep(0.01)
    with open(os.path.join(d, name + ".meta"), "rb") as f:
        meta = f.read()
    with open(path) as f:
        return meta, json.load(f)


def make_agent(name, backend):
    agent = nixl_agent(name, nixl_agent_config(backends=[]))
    agent.create_backend(backend, params(backend))
    return agent


def wait_state(agent, handle):
    deadline = time.monotonic() + WAIT
    while True:
        s = agent.check_xfer_state(handle)
        if s != "PROC":
            return s
        if time.monotonic() > deadline:
            raise TimeoutError("transfer still in progress after %.0f s" % WAIT)


def next_notif(agent, sender):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = agent.get_new_notifs()
        msgs = got.get(sender, [])
        if msgs:
            return msgs
    raise TimeoutError(f"no notification from {sender} in {WAIT:.0f} s")


def target(d, backend):
    agent = make_agent("target", backend)
    buf = np.zeros(2 * HALF, dtype=np.uint8)
    buf[HALF:] = pattern(2, HALF)
    reg = agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    publish(d, "target", agent, {"addr": buf.ctypes.data, "len": buf.nbytes})
    meta, _ = await_peer(d, "initiator")
    peer = agent.add_remote_agent(meta)
    peer = peer.decode() if isinstance(peer, bytes) else peer
    deadline = time.monotonic() + 10 * WAIT
    while time.monotonic() < deadline:
        for msg in next_notif(agent, peer):
            if msg == b"BYE":
                agent.deregister_memory(reg)
                print("target: done")
                return 0
            if msg[:1] == b"W":
                off, size, seed = struct.unpack("<QQQ", msg[2:26])
                ok = np.array_equal(buf[off:off + size], pattern(seed, size))
                agent.send_notif(peer, b"ACK" + (b"1" if ok else b"0") + msg)
    print("target: no BYE in time", file=sys.stderr)
    return 1


def initiator(d, backend):
    agent = make_agent("initiator", backend)
    local = np.zeros(2 * HALF, dtype=np.uint8)
    reg = agent.register_memory([(local.ctypes.data, local.nbytes, 0, "")], "DRAM")
    meta, tgt = await_peer(d, "target")
    peer = agent.add_remote_agent(meta)
    peer = peer.decode() if isinstance(peer, bytes) else peer
    publish(d, "initiator", agent, {})
    base = tgt["addr"]
    res = {"backend": backend, "peer": peer, "writes": [], "reads": [], "errors": []}

    def xfer(op, ldescs, rdescs, msg=b""):
        h = agent.initialize_xfer(op, agent.get_xfer_descs(ldescs, "DRAM"), agent.get_xfer_descs(rdescs, "DRAM"), peer, msg)
        st = agent.transfer(h)
        if st == "PROC":
            st = wait_state(agent, h)
        agent.release_xfer_handle(h)
        return st

    off = 0
    for seed, size in enumerate(SIZES, start=100):
        local[:size] = pattern(seed, size)
        msg = b"W\x00" + struct.pack("<QQQ", off, size, seed) + b"\x00\xff binary"
        st = xfer("WRITE", [(local.ctypes.data, size, 0)], [(base + off, size, 0)], msg)
        acks = next_notif(agent, peer)
        ok = st == "DONE" and acks == [b"ACK1" + msg]
        res["writes"].append({"size": size, "state": st, "ack_ok": ok})
        off += size + 4096

    for size in SIZES:
        local[:size] = 0
        st = xfer("READ", [(local.ctypes.data, size, 0)], [(base + HALF, size, 0)])
        ok = st == "DONE" and np.array_equal(local[:size], pattern(2, HALF)[:size])
        res["reads"].append({"size": size, "state": st, "ok": ok})

    # One request of 128 descriptors of 4 KiB, scattered on both sides.
    n, sz = 128, 4096
    src = pattern(7, n * sz)
    local[: n * sz] = src
    seed_off = 2 * (4 << 20)
    ld = [(local.ctypes.data + i * sz, sz, 0) for i in range(n)]
    rd = [(base + seed_off + (n - 1 - i) * sz, sz, 0) for i in range(n)]
    st = xfer("WRITE", ld, rd, b"batch")
    back = np.zeros(n * sz, dtype=np.uint8)
    rdl = [(back.ctypes.data + i * sz, sz, 0) for i in range(n)]
    breg = agent.register_memory([(back.ctypes.data, back.nbytes, 0, "")], "DRAM")
    st2 = xfer("READ", rdl, rd)
    res["batch"] = {"write": st, "read": st2, "ok": bool(np.array_equal(back, src))}
    agent.deregister_memory(breg)

    # Bad descriptors: outside the target's registration, and a local range
    # never registered. NIXL refuses to create the request (an exception);
    # nothing moves and the agent keeps working.
    for what, ldesc, rdesc in [
        ("remote past the registration", (local.ctypes.data, 4096, 0), (base + 2 * HALF - 100, 4096, 0)),
        ("local not registered", (back.ctypes.data, 4096, 0), (base, 4096, 0)),
    ]:
        try:
            st = xfer("WRITE", [ldesc], [rdesc])
            res["errors"].append({"case": what, "raised": None, "state": st})
        except Exception as e:  # nixl's status exceptions
            res["errors"].append({"case": what, "raised": type(e).__name__})
    local[:16] = pattern(9, 16)
    st = xfer("WRITE", [(local.ctypes.data, 16, 0)], [(base, 16, 0)], b"W\x00" + struct.pack("<QQQ", 0, 16, 9))
    acks = next_notif(agent, peer)
    res["after_errors"] = st == "DONE" and acks[0][:4] == b"ACK1"

    agent.send_notif(peer, b"BYE")
    agent.deregister_memory(reg)
    ok = (
        all(w["ack_ok"] for w in res["writes"])
        and all(r["ok"] for r in res["reads"])
        and res["batch"]["ok"]
        and all(e.get("raised") for e in res["errors"])
        and res["after_errors"]
    )
    print("RESULT " + json.dumps(res))
    return 0 if ok else 1


if __name__ == "__main__":
    role, d, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    rc = target(d, backend) if role == "target" else initiator(d, backend)
    # The agent (and its backend engine) was destroyed when the role's
    # function returned; say so, then skip the interpreter's own teardown:
    # NIXL 1.5.1's UCX backend crashes in it (SIGSEGV after main returns,
    # with every transfer done), which would hide the control's result.
    gc.collect()
    print(f"{role}: teardown done", flush=True)
    sys.stdout.flush()
    os._exit(rc)
