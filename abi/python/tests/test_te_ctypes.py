"""libmooncake.so's transfer-engine C ABI (mooncake/transfer_engine.h) driven
from Python through ctypes only, as an inference engine's shim would.

test_two_processes_256mib: two processes, each with its own copy of the
library (and Go runtime), and the metadata server of `mooncake master`. The
target registers 256 MiB and reports its address; the initiator fills 256 MiB
with a pattern and WRITEs it to the target in 1 MiB requests, 64 per batch,
polling every status; the target then checks every byte (SHA-256 of its
buffer against the initiator's).
"""

import ctypes
import sys
import threading

import pytest

import mc_te

C = mc_te.C
MIB = 1 << 20
PEER = str(mc_te.pathlib.Path(__file__).with_name("te_peer.py"))


def test_two_processes_256mib(lib_path, master, peers):
    size = 256 * MIB
    target = peers([sys.executable, PEER, "target", lib_path, master, "py-target", str(size)])
    addr = target.read(timeout=60)["addr"]
    initiator = peers(
        [sys.executable, PEER, "initiator", lib_path, master, "py-initiator", "py-target", str(addr), str(size), str(MIB), "64"]
    )
    res = initiator.read(timeout=120)
    assert initiator.close() == 0, "".join(initiator.err)
    assert res["failed"] == [], res["failed"][:5]
    assert res["moved"] == size
    target.send("verify " + res["sha256"])
    check = target.read(timeout=60)
    assert check["ok"], f"target holds sha256 {check['sha256']}, initiator wrote {res['sha256']}"
    target.send("exit")
    assert target.read(timeout=30) == {"bye": True}
    assert target.close() == 0, "".join(target.err)
    print(f"256 MiB in {res['seconds']:.2f} s ({size / res['seconds'] / 1e9:.2f} GB/s)")


@pytest.fixture(scope="module")
def lib(lib_path):
    # Loads the library (and a Go runtime) into the pytest process; the
    # two-process test above spawns fresh interpreters, so this is safe.
    return mc_te.load(lib_path)


def expect(lib, rc, want):
    """rc is the code named want and mc_last_error says why (or is empty on MC_OK)."""
    msg = mc_te.last_error(lib)
    assert rc == C[want], f"got {rc}, want {want} ({C[want]}); mc_last_error: {msg!r}"
    if want == "MC_OK":
        assert msg == ""
    else:
        assert msg, f"{want} with an empty mc_last_error"
    return msg


def test_versions(lib):
    assert lib.mc_abi_version() == C["MC_ABI_VERSION_MAJOR"] << 16 | C["MC_ABI_VERSION_MINOR"]
    assert lib.mc_te_abi_version() == C["MC_TE_ABI_VERSION_MAJOR"] << 16 | C["MC_TE_ABI_VERSION_MINOR"]


def test_bad_inputs(lib, master):
    eng = mc_te.Engine(lib, master, "py-bad")
    handle = eng.h.value
    try:
        h = ctypes.c_void_p()
        msg = expect(lib, lib.mc_te_create(None, b"x", None, 0, 0, ctypes.byref(h)), "MC_ERR_INVALID_ARGUMENT")
        assert "metadata_conn_string is NULL" in msg
        expect(lib, lib.mc_te_create(master.encode(), None, None, 0, 0, ctypes.byref(h)), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_create(master.encode(), b"x", None, 0, 0, None), "MC_ERR_INVALID_ARGUMENT")
        msg = expect(lib, lib.mc_te_create(b"redis://127.0.0.1:6379", b"x", None, 0, 0, ctypes.byref(h)), "MC_ERR_UNSUPPORTED")
        assert "redis" in msg
        expect(lib, lib.mc_te_destroy(None), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_install_transport(eng.h, b"tcp"), "MC_OK")
        expect(lib, lib.mc_te_install_transport(eng.h, b"rdma"), "MC_ERR_UNSUPPORTED")
        buf = ctypes.create_string_buffer(1 << 16)
        addr = ctypes.addressof(buf)
        expect(lib, lib.mc_te_register_local_memory(None, addr, 4096, None, 1), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_register_local_memory(eng.h, None, 4096, None, 1), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_register_local_memory(eng.h, addr, 0, None, 1), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_register_local_memory(eng.h, addr, 1 << 16, b"cpu:0", 1), "MC_OK")
        expect(lib, lib.mc_te_register_local_memory(eng.h, addr + 8, 8, None, 0), "MC_ERR_ADDRESS_OVERLAPPED")
        expect(lib, lib.mc_te_open_segment(eng.h, b"nobody", ctypes.byref(ctypes.c_int32())), "MC_ERR_NOT_FOUND")
        expect(lib, lib.mc_te_open_segment(eng.h, b"py-bad", None), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_allocate_batch(eng.h, 4, None), "MC_ERR_INVALID_ARGUMENT")
        batch = eng.allocate_batch(1)
        expect(lib, lib.mc_te_submit(eng.h, batch, None, 1), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_get_status(eng.h, batch, 0, None), "MC_ERR_INVALID_ARGUMENT")
        expect(lib, lib.mc_te_get_status(eng.h, batch + 1000, 0, ctypes.byref(mc_te.Status())), "MC_ERR_INVALID_HANDLE")
        # A write past the end of registered memory (own segment) FAILS.
        eng.submit(batch, [mc_te.Request(C["MC_TE_OPCODE_WRITE"], addr, C["MC_TE_LOCAL_SEGMENT"], addr + (1 << 16) - 8, 64)])
        while True:
            st, _, reason = eng.status(batch, 0)
            if st != C["MC_TE_STATUS_WAITING"]:
                break
        assert st == C["MC_TE_STATUS_FAILED"] and "not registered" in reason, (st, reason)
        expect(lib, lib.mc_te_free_batch(eng.h, batch), "MC_OK")
        expect(lib, lib.mc_te_free_batch(eng.h, batch), "MC_ERR_INVALID_HANDLE")
        expect(lib, lib.mc_te_unregister_local_memory(eng.h, addr), "MC_OK")
        expect(lib, lib.mc_te_unregister_local_memory(eng.h, addr), "MC_ERR_ADDRESS_NOT_REGISTERED")
    finally:
        eng.destroy()
    expect(lib, lib.mc_te_destroy(handle), "MC_ERR_INVALID_HANDLE")  # destroyed already


def test_last_error_is_per_thread(lib):
    expect(lib, lib.mc_te_destroy(None), "MC_ERR_INVALID_ARGUMENT")
    mine = mc_te.last_error(lib)
    seen = {}

    def other():
        seen["before"] = mc_te.last_error(lib)
        lib.mc_te_install_transport(None, b"tcp")
        seen["after"] = mc_te.last_error(lib)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["before"] == "", "a new thread inherited another thread's error"
    assert "mc_te_install_transport" in seen["after"]
    assert mc_te.last_error(lib) == mine, "another thread's call changed this thread's error"
