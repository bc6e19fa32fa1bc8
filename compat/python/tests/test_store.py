"""mooncake.store (compat/python/mooncake/store.py) against our pool: the
behaviour upstream's MooncakeDistributedStore shows (its pybind source,
its mooncake-wheel tests and its 0.3.13.post1 wheel, probed on tcp), with
upstream's return codes. The master runs with a 500 ms lease (conftest).
"""

import ctypes
import logging
import mmap
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import MIB, child_env, eventually, remove_after_lease, unique

from mooncake import store as ms
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

pytestmark = pytest.mark.usefixtures("loopback_clients")


def buffer(n):
    """A page-aligned anonymous mapping of n bytes and its address."""
    m = mmap.mmap(-1, n)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def dict_config(master, gs, ls, **extra):
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": master.url, "global_segment_size": gs,
           "local_buffer_size": ls, "protocol": "tcp", "rdma_devices": "", "master_server_addr": master.rpc}
    cfg.update(extra)
    return cfg


# -- without a pool ---------------------------------------------------------------


def test_import_loads_nothing_and_not_torch():
    code = textwrap.dedent(
        """
        import sys, mooncake, mooncake.store, mooncake_go
        print("torch" in sys.modules, mooncake_go.loaded(), "mooncake.engine" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None", "False"]


def test_replicate_config_defaults_and_types():
    c = ReplicateConfig()
    assert (c.replica_num, c.with_hard_pin, c.soft_pin_action, c.soft_pin_ttl_ms) == (1, False, SoftPinAction.PRESERVE, None)
    assert (c.preferred_segment, c.preferred_segments, c.prefer_alloc_in_same_node) == ("", [], False)
    c.soft_pin_ttl_ms = 250
    assert c.soft_pin_ttl_ms == 250
    c.soft_pin_ttl_ms = (1 << 64) - 1
    c.soft_pin_ttl_ms = None
    assert c.soft_pin_ttl_ms is None
    for bad in (-5, 1 << 64, 2.5, "7"):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        c.replica_num = -2
    with pytest.raises(TypeError):
        c.soft_pin_action = 1  # an int is not a SoftPinAction
    c.replica_num, c.soft_pin_action, c.preferred_segment = 4, SoftPinAction.DISABLE, "seg-a:1"
    c.preferred_segments = ("x:1", "y:2")
    assert c.preferred_segments == ["x:1", "y:2"]
    text = str(c)
    assert "replica_num: 4" in text and "DISABLE" in text and "[x:1, y:2]" in text
    assert [a.name for a in SoftPinAction] == ["PRESERVE", "ENABLE", "DISABLE"]
    assert int(SoftPinAction.ENABLE) == 1 and str(SoftPinAction.ENABLE) == "SoftPinAction.ENABLE"
    c.with_soft_pin = True  # upstream 0.3.x spelling
    assert c.soft_pin_action == SoftPinAction.ENABLE


@pytest.mark.parametrize(
    "text,want",
    [("16MB", 16 << 20), ("16 MB", 16 << 20), ("1.5 KB", 1536), ("2g", 2 << 30), ("4096", 4096), (123, 123),
     ("1 TB", 1 << 40), ("64MiB", 64 << 20), ("50%", None), ("-1", None), ("", None), ("12 parsecs", None)],
)
def test_parse_size(text, want):
    assert ms.parse_size(text) == want


def test_calls_without_setup_return_codes():
    s = MooncakeDistributedStore()
    assert s.put("k", b"v") == -600
    assert s.get("k") == b""
    assert s.get_buffer("k") is None
    assert s.is_exist("k") == -600
    assert s.batch_put_from(["k"], [4096], [1]) == [-600]
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    assert s.close() == 0


def test_unsupported_methods_say_so():
    s = MooncakeDistributedStore()
    for name in ("setup_dummy", "mount_segment", "batch_put_session_start", "create_copy_task", "put_tensor_with_tp",
                 "get_tensor_into_cuda", "batch_replica_clear"):
        with pytest.raises(NotImplementedError, match=rf"^unsupported: {name}"):
            getattr(s, name)(1, 2, 3)
    with pytest.raises(NotImplementedError, match="^unsupported: EngramStore"):
        ms.EngramStore()
    with pytest.raises(NotImplementedError, match=r"^unsupported: setup\(engine=\.\.\.\)"):
        s.setup("127.0.0.1", "http://127.0.0.1:1/metadata", 0, MIB, "tcp", "", "127.0.0.1:1", engine=object())


def test_host_mem_allocator_and_numa():
    a = ms.MooncakeHostMemAllocator()
    p = a.alloc(1 << 20)
    assert p % mmap.PAGESIZE == 0
    ctypes.memset(p, 0x5A, 1 << 20)  # writable
    assert ctypes.string_at(p + (1 << 20) - 3, 3) == b"ZZZ"
    assert a.free(p) == 0
    assert a.free(p) == -1
    with pytest.raises(RuntimeError):
        a.alloc(0)
    assert ms.bind_to_numa_node(0) is None
    assert ms.bind_to_numa_node(4095) is None  # no such node: warned, skipped


# -- setup ----------------------------------------------------------------------


def test_setup_forms(master):
    s = MooncakeDistributedStore()
    try:
        assert s.setup(dict_config(master, "16MB", "16 MB")) == 0
        key = unique("dict")
        assert s.put(key, b"dict form") == 0
        assert s.get(key) == b"dict form"
        host, port = s.get_hostname().split(":")
        assert host == "127.0.0.1" and 12300 <= int(port) <= 14300  # upstream's range
        assert s.health_check() == 0
    finally:
        assert s.close() == 0
    assert s.health_check() == 1
    for bad in (dict_config(master, "50%", "16MB"), dict_config(master, "512", "16MB"),
                {"local_hostname": "127.0.0.1"}, dict_config(master, "16MB", "2TB")):
        t = MooncakeDistributedStore()
        assert t.setup(bad) == -600, bad
    t = MooncakeDistributedStore()
    assert t.setup(dict_config(master, "16MB", "16MB", master_server_addr="127.0.0.1:1")) < 0
    assert t.setup("127.0.0.1", master.url, MIB, MIB, "rdma", "", master.rpc) == -1012  # NOT_SUPPORTED
    with pytest.raises(TypeError):
        t.setup("127.0.0.1", master.url, MIB)  # the positional form needs all seven
    with pytest.raises(NotImplementedError, match="unsupported"):
        t.setup(dict_config(master, "16MB", "16MB", enable_ssd_offload=True))


def test_explicit_port_and_hostname(make_store):
    from conftest import free_port

    port = free_port()
    s = make_store(host=f"127.0.0.1:{port}")
    assert s.get_hostname() == f"127.0.0.1:{port}"


# -- puts, gets, leases -------------------------------------------------------------


def test_put_get_exist_and_leases(store):
    key = unique("basic")
    assert store.put(key, b"first value") == 0
    assert store.put(key, b"second") == 0  # an existing key keeps its value
    assert store.get(key) == b"first value"
    assert store.get_size(key) == len(b"first value")
    assert store.is_exist(key) == 1
    assert store.remove(key) == -706  # the reads leased it
    assert remove_after_lease(store, key) == 0
    assert store.is_exist(key) == 0
    assert store.get(key) == b""
    assert store.get_size(key) == -704
    assert store.remove(key) == -704
    k2 = unique("forced")
    assert store.put(k2, bytearray(b"x" * 100)) == 0
    assert store.get(k2) == b"x" * 100
    assert store.remove(k2, force=True) == 0
    assert store.put(unique("empty"), b"") == -600
    assert store.batch_is_exist([]) == []
    raw = b"bin\x00key\xff" + unique("b").encode()  # keys are bytes: NUL and non-UTF-8 too
    assert store.put(raw, b"binary key") == 0
    assert store.get(raw) == b"binary key"
    assert store.batch_is_exist([raw, raw[:-1]]) == [1, 0]
    assert store.batch_remove([raw], force=True) == [0]


def test_zero_local_buffer_refuses_copying_puts(make_store):
    s = make_store(global_segment_size=16 * MIB, local_buffer_size=0)
    key = unique("nolb")
    assert s.put(key, b"value") != 0
    assert s.is_exist(key) == 0
    assert s.get(key) == b""


def test_value_larger_than_local_buffer(make_store):
    s = make_store(global_segment_size=32 * MIB, local_buffer_size=MIB)
    assert s.put(unique("big"), b"\1" * (2 * MIB)) == -600


def test_close_drops_objects_on_own_segment(master, make_store):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", master.url, 32 * MIB, 8 * MIB, "tcp", "", master.rpc) == 0
    key = unique("teardown")
    assert s.put(key, b"gone with the segment") == 0
    observer = make_store(global_segment_size=0, local_buffer_size=MIB)
    assert observer.is_exist(key) == 1
    assert s.close() == 0
    eventually(lambda: observer.is_exist(key) == 0, what="object of a closed client gone")
    assert s.setup("127.0.0.1", master.url, 32 * MIB, 8 * MIB, "tcp", "", master.rpc) == 0
    try:
        assert s.get(key) == b""
        assert s.put(key, b"again") == 0
        assert s.get(key) == b"again"
    finally:
        s.close()


def test_put_parts_batch_and_buffers(store):
    k = unique("parts")
    assert store.put_parts(k, b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert store.get(k) == b"abcdef"
    assert store.put_parts(unique("noparts")) == 0  # nothing stored
    with pytest.raises(RuntimeError):
        store.put_parts(unique("2d"), memoryview(b"abcd").cast("B", (2, 2)))
    keys = [unique("pb") for _ in range(3)]
    vals = [b"one", b"two" * 1000, bytes(range(256))]
    assert store.put_batch(keys, vals) == 0
    assert store.put_batch(keys[:2], vals[:1]) == -600
    assert store.put_batch([unique("e1"), unique("e2")], [b"x", b""]) == -600
    assert store.put_batch([], []) == 0
    assert store.get_batch(keys + [unique("missing")]) == vals + [b""]
    assert store.get_batch([]) == [b""]  # upstream's answer to an empty list
    bufs = store.batch_get_buffer([keys[1], unique("missing")])
    assert bufs[1] is None
    b = bufs[0]
    assert b.size() == len(b) == 3000 and bytes(b) == vals[1]
    assert ctypes.string_at(b.ptr(), 3) == b"two"
    assert store.get_buffer(unique("missing")) is None
    assert bytes(store.get_buffer(keys[0])) == b"one"
    assert store.batch_get_buffer([]) == []


def test_zero_copy_registered_and_not(store):
    m, base = buffer(1 << 20)
    data = b"zero copy! " * 2000
    ctypes.memmove(base, data, len(data))
    assert store.register_buffer(base, 1 << 20) == 0
    assert store.register_buffer(base, 1 << 20) == -600  # twice
    assert store.register_buffer(base + 4096, 4096) == -600  # overlapping
    assert store.register_buffer(base, 0) == -600
    key = unique("zc")
    assert store.put_from(key, base, len(data)) == 0
    assert store.get(key) == data
    assert store.get_into(key, base + 512 * 1024, 512 * 1024) == len(data)
    assert ctypes.string_at(base + 512 * 1024, len(data)) == data
    assert store.get_into(key, base + 512 * 1024, len(data) - 1) == -600  # too small
    assert store.get_into(unique("missing"), base, 100) == -704
    assert store.get_into(unique("missing"), base, 0) == -704
    assert store.put_from(unique("size0"), base, 0) == 0  # no-op, as upstream
    assert store.batch_put_from([unique("size0b")], [base], [0]) == [-600]

    # Memory never registered: staged through the local buffer.
    plain = (ctypes.c_ubyte * 8192)()
    pa = ctypes.addressof(plain)
    ctypes.memmove(pa, b"unregistered bytes", 18)
    k2 = unique("unreg")
    assert store.put_from(k2, pa, 18) == 0
    assert store.get(k2) == b"unregistered bytes"
    ctypes.memset(pa, 0, 8192)
    assert store.get_into(key, pa, 8192) == -600  # 22000 bytes do not fit
    assert store.get_into(k2, pa, 8192) == 18
    assert bytes(plain[:18]) == b"unregistered bytes"
    assert store.batch_get_into([k2, key], [pa, base], [8192, 1 << 20]) == [18, len(data)]

    assert store.unregister_buffer(base + 8) == -600
    assert store.unregister_buffer(base) == 0
    assert store.unregister_buffer(base) == -600
    del m


def test_batch_zero_copy(store):
    m, base = buffer(4 << 20)
    assert store.register_buffer(base, 4 << 20) == 0
    keys = [unique("bz") for _ in range(4)]
    vals = [bytes([i + 1]) * (1000 * (i + 1)) for i in range(4)]
    ptrs = [base + i * MIB for i in range(4)]
    for p, v in zip(ptrs, vals):
        ctypes.memmove(p, v, len(v))
    assert store.batch_put_from(keys, ptrs, [len(v) for v in vals]) == [0] * 4
    assert store.batch_put_from([], [], []) == []
    assert all(c < 0 for c in store.batch_put_from(keys[:2], ptrs, [1, 2, 3, 4]))
    ctypes.memset(base, 0, 4 << 20)
    got = store.batch_get_into(keys + [unique("missing")], ptrs + [base + 4 * MIB - 100], [MIB] * 4 + [100])
    assert got == [len(v) for v in vals] + [-704]
    for p, v in zip(ptrs, vals):
        assert ctypes.string_at(p, len(v)) == v
    mismatched = store.batch_get_into(keys[:3], ptrs, [MIB] * 4)
    assert len(mismatched) == 3 and all(r < 0 for r in mismatched)
    assert store.batch_get_into([], [], []) == []

    # Multi-buffer (scatter/gather) forms.
    mk = [unique("mb"), unique("mb")]
    assert store.batch_put_from_multi_buffers(mk, [[base, base + 10], [base + MIB]], [[3, 4], [5]]) == [0, 0]
    assert store.get(mk[0]) == ctypes.string_at(base, 3) + ctypes.string_at(base + 10, 4)
    d = base + 3 * MIB
    assert store.batch_get_into_multi_buffers(mk + [unique("missing")], [[d, d + 100], [d + 200], [d + 300]],
                                              [[2, 5], [5], [5]]) == [7, 5, -704]
    assert ctypes.string_at(d, 2) + ctypes.string_at(d + 100, 5) == store.get(mk[0])
    assert store.batch_get_into_multi_buffers([mk[0]], [[d]], [[6]]) == [-600]  # 7 bytes into 6
    assert store.batch_put_from_multi_buffers(mk, [[base]], [[1]]) == [-600, -600]
    assert store.batch_put_from_multi_buffers([], [], []) == []
    plain = ctypes.create_string_buffer(b"gathered from plain memory")
    pa = ctypes.addressof(plain)
    k3 = unique("mbplain")
    assert store.batch_put_from_multi_buffers([k3], [[pa, pa + 9]], [[9, 17]]) == [0]
    assert store.get(k3) == b"gathered from plain memory"
    out = ctypes.create_string_buffer(64)
    oa = ctypes.addressof(out)
    assert store.batch_get_into_multi_buffers([k3], [[oa, oa + 32]], [[10, 20]]) == [26]
    assert out.raw[:10] + out.raw[32:48] == b"gathered from plain memory"
    store.unregister_buffer(base)
    del m


def test_get_into_ranges(store):
    k1, k2 = unique("r1"), unique("r2")
    d1, d2 = bytes(range(48, 88)), bytes(range(160, 200))
    assert store.put(k1, d1) == 0 and store.put(k2, d2) == 0
    m, base = buffer(8192)
    b0, b1 = base, base + 4096
    assert store.register_buffer(b0, 64) == 0
    assert store.register_buffer(b1, 64) == 0
    res = store.get_into_ranges([b0, b1], [[k1, k2], [k2]], [[[0, 30], [10]], [[5]]], [[[2, 20], [0]], [[39]]],
                                [[[6, 4], [8]], [[1]]])
    assert res == [[[6, 4], [8]], [[1]]]
    assert ctypes.string_at(b0, 6) == d1[2:8]
    assert ctypes.string_at(b0 + 30, 4) == d1[20:24]
    assert ctypes.string_at(b0 + 10, 8) == d2[:8]
    assert ctypes.string_at(b1 + 5, 1) == d2[39:40]
    # Per key mismatched lists: that key's ranges fail, shaped by dst offsets.
    res = store.get_into_ranges([b0], [[k1, k2]], [[[0, 1], []]], [[[0], []]], [[[1, 1], []]])
    assert res[0][0] == [-600, -600] and res[0][1] == []
    assert store.get_into_ranges([b0], [[k1]], [[[0]]], [[[len(d1) - 2]]], [[[4]]]) == [[[-600]]]  # past the value
    assert store.get_into_ranges([b0], [[k1]], [[[62]]], [[[0]]], [[[4]]]) == [[[-600]]]  # past the buffer
    assert store.get_into_ranges([b0], [[unique("missing"), k1]], [[[0], [8]]], [[[0], [0]]], [[[4], [4]]]) == [[[-704], [4]]]
    assert store.get_into_ranges([b0], [[k1]], [[[0]]], [[[0]]], [[[0]]]) == [[[0]]]
    assert store.get_into_ranges([], [], [], [], []) == []
    assert store.get_into_ranges([b0, b1], [[k1]], [[[0]]], [[[0]]], [[[1]]]) == [[[-600]], [[-600]]]  # top-level mismatch
    plain = ctypes.create_string_buffer(64)
    assert store.get_into_ranges([ctypes.addressof(plain)], [[k1]], [[[0]]], [[[0]]], [[[4]]]) == [[[-600]]]  # not registered
    del m


def test_removal_semantics(store, make_store):
    other = make_store(global_segment_size=0, local_buffer_size=MIB)
    prefix = unique("rx")
    keys = [f"{prefix}-{i}" for i in range(5)]
    for k in keys:
        assert store.put(k, b"v") == 0
    assert other.get(keys[0]) == b"v"  # leases keys[0]
    assert store.remove_by_regex(f"^{prefix}-[0-2]$") == 2  # keys[0] is leased
    assert store.remove_by_regex(f"^{prefix}-nothing") == 0
    assert store.remove_by_regex("([") == -600
    assert store.batch_remove([keys[0], keys[3], unique("missing")]) == [-706, 0, -704]
    assert store.batch_remove([]) == []
    assert store.batch_remove([keys[0]], force=True) == [0]
    # remove_all: every complete object of the pool, leased ones only with force.
    lone = unique("all")
    assert store.put(lone, b"leased") == 0 and store.get(lone) == b"leased"
    removed = store.remove_all()
    assert removed >= 1  # keys[4] at least
    assert store.is_exist(keys[4]) == 0
    eventually(lambda: store.remove_all(force=False) == 0 or store.is_exist(lone) == 0, what="leased objects left alone")
    store.get(lone)
    assert store.remove_all(force=True) >= 1
    assert store.is_exist(lone) == 0


def test_replicate_config_on_puts(master, make_store):
    a = make_store(global_segment_size=16 * MIB)
    b = make_store(global_segment_size=16 * MIB)
    writer = make_store(global_segment_size=0)
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    k = unique("two")
    assert writer.put(k, b"twice", cfg) == 0
    reps = writer.get_replica_desc(k)
    assert len(reps) == 2
    assert {r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in reps} == {a.get_hostname(), b.get_hostname()}
    assert all(r.status == ms.ReplicaStatus.COMPLETE and r.is_memory_replica() for r in reps)
    assert all(r.get_memory_descriptor().buffer_descriptor.size == 5 for r in reps)
    pref = ReplicateConfig()
    pref.preferred_segment = b.get_hostname()
    k2 = unique("pref")
    assert writer.put(k2, b"on b", pref) == 0
    assert [r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in writer.get_replica_desc(k2)] == [b.get_hostname()]
    pref.preferred_segment = ""
    pref.preferred_segments = [a.get_hostname()]
    k3 = unique("prefs")
    assert writer.batch_put_from([k3], [ctypes.addressof(ctypes.create_string_buffer(b"on a", 4))], [4], pref) == [0]
    assert [r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in writer.get_replica_desc(k3)] == [a.get_hostname()]
    assert writer.get_replica_desc(unique("missing")) == []
    descs = writer.batch_get_replica_desc([k, unique("missing")])
    assert list(descs) == [k] and len(descs[k]) == 2

    hard = ReplicateConfig()
    hard.with_hard_pin = True
    k4 = unique("hard")
    assert writer.put(k4, b"pinned", hard) == 0
    # Upstream removes a hard-pinned object without force once its lease
    # ended; mooncake-go's master asks for force (README: differences).
    assert writer.remove(k4) == -706
    assert writer.remove(k4, force=True) == 0

    # Settings upstream's put refuses.
    zero = ReplicateConfig()
    zero.replica_num = 0
    ttl = ReplicateConfig()
    ttl.soft_pin_ttl_ms = 1000  # PRESERVE with a TTL
    near = ReplicateConfig()
    near.prefer_alloc_in_same_node = True
    for bad in (zero, ttl, near):
        assert writer.put(unique("bad"), b"x", bad) == -600
    soft = ReplicateConfig()
    soft.soft_pin_action = SoftPinAction.ENABLE
    soft.soft_pin_ttl_ms = 1000
    assert writer.put(unique("soft"), b"x", soft) == 0
    with pytest.raises(TypeError):
        writer.put(unique("x"), b"x", {"replica_num": 1})


def test_upsert(store, make_store):
    reader = make_store(global_segment_size=0, local_buffer_size=MIB)
    k = unique("up")
    assert store.upsert(k, b"first") == 0
    assert reader.get(k) == b"first"  # leased by the reader now
    assert store.upsert(k, b"second, longer") == 0  # replaces it anyway
    assert reader.get(k) == b"second, longer"
    keep = ReplicateConfig()
    keep.soft_pin_ttl_ms = 100
    assert store.upsert(k, b"x", keep) == -600
    dis = ReplicateConfig()
    dis.soft_pin_action = SoftPinAction.DISABLE
    assert store.upsert(k, b"third", dis) == 0
    assert store.get(k) == b"third"
    assert store.upsert(k, b"") == -600
    keys = [unique("ub"), unique("ub")]
    assert store.upsert_batch(keys, [b"a", b"b"]) == 0
    assert store.upsert_batch(keys, [b"c", b"d"]) == 0
    assert store.get_batch(keys) == [b"c", b"d"]
    assert store.upsert_parts(keys[0], b"p", b"q") == 0
    assert store.get(keys[0]) == b"pq"
    src = ctypes.create_string_buffer(b"from ptr", 8)
    assert store.upsert_from(keys[1], ctypes.addressof(src), 8) == 0
    assert store.batch_upsert_from(keys, [ctypes.addressof(src)] * 2, [4, 8]) == [0, 0]
    assert store.get_batch(keys) == [b"from", b"from ptr"]


def test_health_check_when_master_goes(lib, mooncake_bin):
    from conftest import stop, store_master_proc

    proc, m = store_master_proc(mooncake_bin)
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", m.url, 0, MIB, "tcp", "", m.rpc) == 0
        assert s.health_check() == 0
        stop(proc)
        assert s.health_check() == 2
    finally:
        s.close()
        stop(proc)
    assert s.health_check() == 1


def test_concurrent_put_get(make_store):
    store = make_store(global_segment_size=160 * MIB, local_buffer_size=16 * MIB)  # holds all 80 MiB
    n_threads, per_thread, size = 4, 20, MIB
    errors = []
    barrier = threading.Barrier(n_threads)

    def worker(t):
        try:
            data = bytes([t + 1]) * size
            keys = [unique(f"cc{t}") for _ in range(per_thread)]
            barrier.wait()
            for k in keys:
                assert store.put(k, data) == 0, k
            for k in keys:
                assert store.get(k) == data, k
            for k in keys:
                assert remove_after_lease(store, k) == 0
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_init_all_uses_upstream_defaults():
    # init_all is setup("localhost:12345", etcd at 127.0.0.1:2379, its
    # size, a 1 GiB local buffer, ..., master 127.0.0.1:50051); with no etcd
    # there it fails, with a code.
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 2379)) == 0:
            pytest.skip("something listens on 127.0.0.1:2379")
    s = MooncakeDistributedStore()
    try:
        assert s.init_all("tcp", "", 16 * MIB) < 0
        with pytest.raises(TypeError):
            s.init_all("tcp", "")  # all three arguments, as upstream
    finally:
        s.close()


def test_key_lists_are_type_checked(store):
    """A str where a list of keys belongs, or a key that is neither str nor
    bytes, raises TypeError as upstream's bindings do, instead of being
    taken character by character or dropped."""
    assert store.put("tk", b"v") == 0
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        store.get_batch(["tk", 1])
    with pytest.raises(TypeError, match="single str"):
        store.batch_is_exist("abc")
    with pytest.raises(TypeError, match="single bytes"):
        store.batch_remove(b"tk")
    assert store.batch_is_exist(["tk", b"tk", "nope"]) == [1, 1, 0]


def test_failures_are_logged_at_error(make_store, caplog):
    """A failed call says why at ERROR (upstream's client logs it); a
    missing key is an answer, logged at DEBUG only."""
    s = make_store(global_segment_size=32 * MIB, local_buffer_size=MIB)
    with caplog.at_level(logging.DEBUG, logger="mooncake.store"):
        assert s.put(unique("big"), b"x" * (2 * MIB)) == -600
        assert s.get_size("missing-key") == -704
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("local buffer" in r.getMessage() for r in errors), [r.getMessage() for r in caplog.records]
    assert not any("missing-key" in r.getMessage() for r in errors)
