"""mooncake.engine.TransferEngine in one process: upstream's return
conventions on bad inputs, the managed-buffer allocator, the module's
surface, and what is not built."""

import logging
import re

import pytest

from conftest import REPO, free_port


def test_module_surface():
    import mooncake.engine as m

    for name in ("TransferEngine", "TransferNotify", "TransferOpcode", "Read", "Write", "InnerTransferEngine",
                 "RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor", "SharedSegment",
                 "create_rpc_client", "create_rpc_server"):
        assert hasattr(m, name), name
    assert int(m.TransferOpcode.Read) == 0 and int(m.TransferOpcode.Write) == 1
    assert m.Read is m.TransferOpcode.Read and m.TransferEngine.TransferOpcode is m.TransferOpcode
    assert not any([m.SUPPORT_CUDA, m.SUPPORT_EFA, m.SUPPORT_HIP, m.SUPPORT_MNNVL, m.SUPPORT_MUSA, m.SUPPORT_INTRA_NVLINK])
    n = m.TransferNotify("a", "b")
    assert (n.name, n.msg) == ("a", "b") and n == m.TransferNotify("a", "b")
    for cls in (m.RpcInterface, m.SharedSegment, m.InnerTransferEngine):
        with pytest.raises(NotImplementedError, match="^unsupported: "):
            cls()
    with pytest.raises(NotImplementedError, match="^unsupported: "):
        m.create_rpc_server()


def test_header_values():
    """The constants engine.py hard-codes are the headers'."""
    import mooncake.engine as m

    text = (REPO / "abi/include/mooncake/transfer_engine.h").read_text() + (REPO / "abi/include/mooncake/common.h").read_text()
    defs = {k: int(v) for k, v in re.findall(r"#define (MC_\w+) \(?(-?\d+)\)?", text)}
    assert defs["MC_TE_STATUS_WAITING"] == m._STATUS_WAITING
    assert defs["MC_TE_STATUS_COMPLETED"] == m._STATUS_COMPLETED
    assert defs["MC_TE_STATUS_FAILED"] == m._STATUS_FAILED
    assert defs["MC_TE_LOCAL_SEGMENT"] == m._LOCAL_SEGMENT
    assert defs["MC_TE_OPCODE_READ"] == m.Read and defs["MC_TE_OPCODE_WRITE"] == m.Write
    assert defs["MC_ERR_INVALID_ARGUMENT"] == m._ERR_INVALID_ARGUMENT
    assert defs["MC_TE_ABI_VERSION_MINOR"] >= m.TE_ABI_MINOR


def test_before_initialize(lib):
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    with pytest.raises(RuntimeError, match="not initialized"):
        e.get_rpc_port()
    with pytest.raises(RuntimeError, match="not initialized"):
        e.transfer_sync_write("x", 1, 1, 1)


def test_initialize_errors(lib, http_meta, caplog):
    from mooncake.engine import TransferEngine

    caplog.set_level(logging.WARNING, logger="mooncake.engine")
    assert TransferEngine().initialize("127.0.0.1:1", "http://127.0.0.1:1/metadata", "tcp", "") == -1
    assert "-200" in caplog.text, "the metadata failure is logged with its code"
    assert TransferEngine().initialize("127.0.0.1:1", "gopher://x", "tcp", "") == -1
    assert TransferEngine().initialize("127.0.0.1:1", "redis://127.0.0.1:6379", "tcp", "") == -1
    assert TransferEngine().initialize("127.0.0.1:1", http_meta, "xgmi", "") == -1
    with pytest.raises(TypeError):
        TransferEngine().initialize(1, http_meta, "tcp", "")
    caplog.clear()
    e = TransferEngine()
    assert e.initialize(f"127.0.0.1:{free_port()}", http_meta, "rdma", "mlx5_0") == 0, "rdma falls back to tcp, as upstream without devices"
    assert "uses tcp" in caplog.text
    assert e.initialize("127.0.0.1:2", http_meta, "tcp", "") == -1, "a second initialize is refused"
    assert e.get_rpc_port() > 0


def test_initialize_ext(lib, http_meta, etcd_meta):
    from mooncake.engine import TransferEngine

    host_port = http_meta[len("http://"):]
    e = TransferEngine()
    assert e.initialize_ext(f"127.0.0.1:{free_port()}", host_port, "tcp", "", "http") == 0
    e2 = TransferEngine()
    assert e2.initialize_ext(f"127.0.0.1:{free_port()}", etcd_meta[len("etcd://"):], "tcp", "", "etcd") == 0
    e3 = TransferEngine()
    assert e3.initialize(f"127.0.0.1:{free_port()}", etcd_meta[len("etcd://"):], "tcp", "") == 0, "a bare host:port is etcd, as upstream"
    e4 = TransferEngine()
    assert e4.initialize_ext("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "", "etcd") == 0


def test_bad_transfers(engine, caplog):
    e = engine
    me = e._s.name
    a = e.allocate_managed_buffer(1 << 20)
    assert a != 0
    assert e.transfer_sync_write("no-such-peer", a, a, 16) == -1
    assert e.transfer_sync_read("no-such-peer", a, a, 16) == -1
    assert e.batch_transfer_async_write("no-such-peer", [0], [0], [16]) == 0
    assert e.transfer_submit_write("no-such-peer", 0, 0, 16) == 0
    assert e.batch_transfer_sync_write(me, [a], [a + 4096, a], [16]) == -1, "lists of different sizes"
    assert e.batch_transfer_async_read(me, [a, a], [a], [16, 16]) == 0
    assert e.transfer_sync_write(me, a, 4096, 16) == -1, "remote range outside every buffer"
    assert e.transfer_sync_write(me, 4096, a, 16) == -1, "local range outside every buffer"
    assert e.transfer_sync_write(me, a, a + 4096, 0) == -1, "zero length"
    assert e.transfer_sync_write(me, a, a + (1 << 30) - 8, 16) == -1, "range running past the buffer"
    assert e.get_batch_transfer_status([12345]) == -1, "not a batch of this engine"
    assert e.transfer_check_status(12345) == -1
    b = e.batch_transfer_async_write(me, [a], [4096], [16])
    assert b != 0 and e.get_batch_transfer_status([b]) == -1, "submitted, then FAILED"
    b = e.transfer_submit_write(me, a, 4096, 16)
    states = [e.transfer_check_status(b)]
    while states[-1] == 0:
        states.append(e.transfer_check_status(b))
    assert states[-1] == -1
    # Empty batches complete at once, as upstream.
    assert e.batch_transfer_sync_write(me, [], [], []) == 0
    b = e.batch_transfer_async_write(me, [], [], [])
    assert b != 0 and e.get_batch_transfer_status([b]) == 0
    for bad in (-1, 1.5, "x", None):
        with pytest.raises(TypeError):
            e.transfer_sync_write(me, bad, a, 16)
    with pytest.raises(TypeError):
        e.batch_transfer_sync_write(me, a, [a], [16])
    with pytest.raises(TypeError):
        e.get_batch_transfer_status(7)
    # A local sync copy works (own segment name).
    e.write_bytes_to_buffer(a, b"x" * 16, 16)
    assert e.transfer_sync_write(me, a, a + 8192, 16) == 0
    assert e.read_bytes_from_buffer(a + 8192, 16) == b"x" * 16


def test_memory_calls(engine):
    import ctypes

    e = engine
    buf = ctypes.create_string_buffer(1 << 16)
    addr = ctypes.addressof(buf)
    assert e.register_memory(0, 4096) == -1, "address 0 (upstream registers it)"
    assert e.register_memory(addr, 0) == -1
    assert e.register_memory(addr, 1 << 16, "cpu:0") == 0
    assert e.register_memory(addr + 8, 8) == -7, "overlap: ERR_ADDRESS_OVERLAPPED"
    assert e.get_first_buffer_address(e._s.name) == addr
    assert e.unregister_memory(addr + 8) == -3, "not the start of a buffer: ERR_ADDRESS_NOT_REGISTERED"
    assert e.unregister_memory(addr) == 0
    assert e.get_first_buffer_address(e._s.name) == 0
    bufs = [ctypes.create_string_buffer(4096) for _ in range(3)]
    addrs = [ctypes.addressof(b) for b in bufs]
    assert e.batch_register_memory(addrs, [4096, 4096]) == -1, "lists of different sizes"
    assert e.batch_register_memory(addrs + [addrs[0] + 8], [4096] * 4) == -7
    assert e.get_first_buffer_address(e._s.name) == 0, "a failed batch registration is rolled back"
    assert e.batch_register_memory(addrs, [4096] * 3) == 0
    assert e.batch_unregister_memory(addrs + [addr]) == -3, "the first failure's code"
    assert e.batch_unregister_memory(addrs) == -3, "already unregistered by the call before"
    with pytest.raises(TypeError):
        e.register_memory(addr, -1)


def test_bytes_helpers(engine):
    e = engine
    a = e.allocate_managed_buffer(4096)
    assert e.write_bytes_to_buffer(a, b"hello world", 5) == 0
    assert e.read_bytes_from_buffer(a, 5) == b"hello"
    assert e.write_bytes_to_buffer(a, bytearray(b"HE"), 2) == 0
    assert e.write_bytes_to_buffer(a + 2, memoryview(b"--LL--")[2:4], 2) == 0
    assert e.write_bytes_to_buffer(a + 4, "ö", 2) == 0, "str is written as UTF-8"
    assert e.read_bytes_from_buffer(a, 6) == "HELLö".encode()
    assert e.read_bytes_from_buffer(a, 0) == b""
    with pytest.raises(ValueError, match="more than the 5 bytes"):
        e.write_bytes_to_buffer(a, b"hello", 6)
    with pytest.raises(ValueError, match="dest_address is 0"):
        e.write_bytes_to_buffer(0, b"x", 1)
    with pytest.raises(ValueError, match="source_address is 0"):
        e.read_bytes_from_buffer(0, 1)
    with pytest.raises(TypeError):
        e.write_bytes_to_buffer(a, 12, 1)


def test_managed_buffers(engine):
    import mooncake.engine as m

    e = engine
    me = e._s.name
    assert e.get_first_buffer_address(me) == 0
    small = [e.allocate_managed_buffer(n) for n in (0, 1, 8192, 8193, 100_000)]
    assert all(small) and len(set(small)) == 5
    arena = e.get_first_buffer_address(me)
    assert arena != 0 and all(arena <= p < arena + m._ARENA for p in small)
    # Block sizes are the classes: a 8193-byte block does not overlap its neighbours.
    spans = sorted((p, max(m._MIN_CLASS, 1 << (max(n, 1) - 1).bit_length())) for p, n in zip(small, (0, 1, 8192, 8193, 100_000)))
    for (p, n), (q, _) in zip(spans, spans[1:]):
        assert p + n <= q
    assert e.free_managed_buffer(small[3], 8193) == 0
    assert e.allocate_managed_buffer(16384) == small[3], "a freed block is reused by its class"
    assert e.free_managed_buffer(small[3], 16384) == 0
    assert e.free_managed_buffer(small[3], 16384) == -1, "double free"
    assert e.free_managed_buffer(12345, 10) == -1
    big = e.allocate_managed_buffer(300 << 20)
    assert big != 0 and not (arena <= big < arena + m._ARENA), "over 256 MiB: a mapping of its own"
    e.write_bytes_to_buffer(big + (300 << 20) - 3, b"end", 3)
    assert e.transfer_sync_read(me, small[0], big + (300 << 20) - 3, 3) == 0
    assert e.read_bytes_from_buffer(small[0], 3) == b"end"
    assert e.free_managed_buffer(big, 300 << 20) == 0
    assert e.transfer_sync_read(me, small[0], big, 3) == -1, "freed: unregistered"


def test_unsupported_methods(engine):
    for call in (engine.get_local_topology, engine.get_engine, engine.get_engine_ptr):
        with pytest.raises(NotImplementedError, match="^unsupported: "):
            call()
    assert engine.warmup_efa_segment("x") == 0
    assert engine.send_probe("no-such-peer") == -1002


def test_engine_released(lib, http_meta):
    """Dropping the last reference destroys the engine: its descriptor and
    handshake address leave the metadata server."""
    import gc

    from conftest import http_get
    from mooncake.engine import TransferEngine

    name = f"127.0.0.1:{free_port()}"
    e = TransferEngine()
    assert e.initialize(name, http_meta, "tcp", "") == 0
    e.allocate_managed_buffer(4096)
    assert http_get(f"{http_meta}?key=mooncake/ram/{name}")[0] == 200
    del e
    gc.collect()
    assert http_get(f"{http_meta}?key=mooncake/ram/{name}")[0] == 404
    assert http_get(f"{http_meta}?key=mooncake/mc_handshake/{name}")[0] == 404
