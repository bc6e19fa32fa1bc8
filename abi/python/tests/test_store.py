"""libmooncake.so's store C ABI (mooncake/store.h) through the mooncake_go
package (abi/python): its lazy, once-per-process loader, its exceptions and
its Store / MooncakeDistributedStore classes, against a real pool: the
session's `mooncake master` plus a `mooncake node` contributing 64 MiB
(conftest.pool).

test_two_processes_share_kv_blocks: two processes, each loading its own copy
of the library through mooncake_go. A puts 32 KV blocks of 256 KiB with
batch_put_from from a registered buffer (and contributes 32 MiB itself); B
checks them with batch_is_exist, reads them with batch_get_into and
compares every byte (SHA-256 per block); then B writes blocks that A reads
back, so bytes flow both ways, from node1's segment and from A's.
"""

import ctypes
import json
import mmap
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest

import mc_te
from conftest import PYTHON_DIR, child_env

import mooncake_go
from mooncake_go import errors

PEER = str(mc_te.pathlib.Path(__file__).with_name("store_peer.py"))
MIB = 1 << 20
BLOCKS, BLK = 32, 256 << 10


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_two_processes_share_kv_blocks(lib_path, pool, peers):
    prefix = unique("kv")
    a = peers([sys.executable, PEER, "writer", pool.url, pool.rpc, prefix, str(BLOCKS), str(BLK)])
    put = a.read(timeout=60)
    assert put["codes"] == [0] * BLOCKS, put["codes"]
    assert put["exist"] == [1] * BLOCKS, put["exist"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", put["hostname"]), put["hostname"]

    b = peers([sys.executable, PEER, "reader", pool.url, pool.rpc, prefix, str(BLOCKS), str(BLK)])
    got = b.read(timeout=60)
    assert got["lib"] == os.environ["MOONCAKE_GO_LIB"]
    assert got["exist"] == [1] * BLOCKS, got["exist"]
    assert got["results"] == [BLK] * BLOCKS, got["results"]
    assert got["sha256"] == put["sha256"], "B read other bytes than A wrote"

    # The other way: B writes, A reads.
    back = unique("kv-back")
    b.send(f"put {back} 8 {BLK}")
    wrote = b.read(timeout=60)
    assert wrote["codes"] == [0] * 8, wrote["codes"]
    a.send(f"get {back} 8 {BLK}")
    read = a.read(timeout=60)
    assert read["exist"] == [1] * 8 and read["results"] == [BLK] * 8, read
    assert read["sha256"] == wrote["sha256"]

    for p in (a, b):
        p.send("exit")
        assert p.read(timeout=30) == {"bye": True}
        assert p.close() == 0, "".join(p.err)


class Registered:
    """An anonymous mapping registered with a store."""

    def __init__(self, store, size):
        self.mm = mmap.mmap(-1, size)
        self.view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self.view)
        self.size = size
        store.register_buffer(self.addr, size)


@pytest.fixture
def store(lib_path, pool):
    s = mooncake_go.Store()
    s.setup("127.0.0.1", pool.url, 16 * MIB, 4 * MIB, "tcp", "", pool.rpc)
    yield s
    s.close()


def test_store_api(store):
    key = unique("api")
    value = os.urandom(100_000)
    store.put(key, value)
    assert store.get(key) == value
    assert store.get_size(key) == len(value)
    assert store.is_exist(key) is True
    assert store.is_exist(unique("none")) is False
    store.put(key, b"other")  # an existing key keeps its value
    assert store.get(key) == value
    store.put(key + "-ba", bytearray(b"from a bytearray"))
    assert store.get(key + "-ba") == b"from a bytearray"
    store.put(key + "-mv", memoryview(b"xxfrom a memoryview")[2:])
    assert store.get(key + "-mv") == b"from a memoryview"

    with pytest.raises(mooncake_go.NotFoundError) as e:
        store.get(unique("missing"))
    assert e.value.code == errors.STORE_ERR_OBJECT_NOT_FOUND == -704
    assert "mc_store_get_size" in str(e.value)

    buf = Registered(store, 8 * 64 * 1024)
    keys = [f"{key}-z{i}" for i in range(8)]
    ptrs = [buf.addr + i * 65536 for i in range(8)]
    for i in range(8):
        buf.mm[i * 65536 : (i + 1) * 65536] = bytes([i + 1]) * 65536
    assert store.batch_put_from(keys, ptrs, [65536] * 8) == [0] * 8
    buf.mm[:] = bytes(len(buf.mm))
    assert store.batch_is_exist(keys + [""]) == [1] * 8 + [errors.ERR_INVALID_ARGUMENT]
    assert store.batch_get_into(keys, ptrs, [65536] * 8) == [65536] * 8
    assert all(buf.mm[i * 65536 : (i + 1) * 65536] == bytes([i + 1]) * 65536 for i in range(8))
    store.put_from(key + "-single", buf.addr + 10, 1000)
    assert store.get_into(key + "-single", buf.addr + 100_000, 2000) == 1000
    assert buf.mm[100_000:101_000] == buf.mm[10:1010]
    with pytest.raises(mooncake_go.BufferOverflowError):
        store.get_into(keys[0], buf.addr, 100)
    with pytest.raises(mooncake_go.NotRegisteredError) as e:
        store.put_from(key + "-x", ctypes.addressof(ctypes.create_string_buffer(64)), 64)
    assert e.value.code == errors.ERR_ADDRESS_NOT_REGISTERED

    with pytest.raises(mooncake_go.MooncakeError) as e:
        store.remove(keys[0])  # leased by the reads above
    assert e.value.code == errors.STORE_ERR_OBJECT_HAS_LEASE
    store.remove(keys[0], force=True)
    with pytest.raises(mooncake_go.NotFoundError):
        store.remove(keys[0], force=True)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", store.get_hostname())
    store.unregister_buffer(buf.addr)


def test_bad_inputs(store, pool):
    with pytest.raises(mooncake_go.InvalidArgumentError) as e:
        store.put("", b"x")
    assert e.value.code == errors.ERR_INVALID_ARGUMENT and isinstance(e.value, ValueError)
    with pytest.raises(mooncake_go.InvalidArgumentError) as e:
        store.put("k" * 4097, b"x")
    assert e.value.code == errors.STORE_ERR_INVALID_KEY == -400
    store.put("k" * 4096, b"x")
    with pytest.raises(mooncake_go.InvalidArgumentError) as e:
        store.put(b"\xff" * 4097, b"x")
    assert e.value.code == errors.STORE_ERR_INVALID_KEY and "longer than MC_STORE_MAX_KEY_LEN (4096)" in e.value.message
    with pytest.raises(mooncake_go.InvalidArgumentError) as e:
        store.get(b"")
    assert e.value.code == errors.ERR_INVALID_ARGUMENT and "key is empty" in e.value.message
    with pytest.raises(mooncake_go.InvalidArgumentError):
        store.put(42, b"x")
    with pytest.raises(mooncake_go.InvalidArgumentError):
        store.put(unique("empty"), b"")
    with pytest.raises(mooncake_go.InvalidArgumentError):
        store.put_from(unique("null"), 0, 10)
    with pytest.raises(mooncake_go.InvalidArgumentError):
        store.register_buffer(0, 10)
    with pytest.raises(mooncake_go.InvalidArgumentError):
        store.batch_put_from(["a", "b"], [1], [1, 2])
    with pytest.raises(mooncake_go.NotRegisteredError):
        store.unregister_buffer(0x10000)
    assert store.batch_put_from([], [], []) == []

    s = mooncake_go.Store()
    with pytest.raises(mooncake_go.UnsupportedError):
        s.setup("127.0.0.1", pool.url, 0, MIB, "rdma", "mlx5_0", pool.rpc)
    with pytest.raises(mooncake_go.UnsupportedError):
        s.setup("127.0.0.1", "redis://127.0.0.1:6379", 0, MIB, "tcp", "", pool.rpc)
    with pytest.raises(mooncake_go.UnsupportedError):
        s.setup("127.0.0.1", pool.url, 0, MIB, "tcp", "", pool.rpc, enable_ssd_offload=True)
    with pytest.raises(mooncake_go.MooncakeError) as e:
        s.setup("127.0.0.1", pool.url, 0, MIB, "tcp", "", "127.0.0.1:1")
    assert e.value.code == errors.STORE_ERR_RPC_FAIL
    with pytest.raises(mooncake_go.InvalidArgumentError):
        s.setup("127.0.0.1", pool.url)  # the positional form needs all seven
    with pytest.raises(mooncake_go.InvalidHandleError):
        s.put("k", b"v")  # never set up

    s.setup({"local_hostname": "127.0.0.1", "metadata_server": pool.url, "master_server_address": pool.rpc, "global_segment_size": 0})
    s.close()
    s.close()  # a second close does nothing
    with pytest.raises(mooncake_go.InvalidHandleError):
        s.put("k", b"v")


def test_binary_keys(store, pool):
    """Keys are bytes: NUL and bytes that are not UTF-8 round-trip through
    every call; str keys are their UTF-8 bytes."""
    tag = uuid.uuid4().bytes
    keys = [tag + b"\xff\xfe", tag + b"a\x00b", b"\x00" + tag, tag + b"\x80", (tag + b"\xfe" * 4096)[:4096]]
    for i, k in enumerate(keys):
        v = bytes([i]) * (100 + i)
        store.put(k, v)
        assert store.get(k) == v
        assert store.get_size(k) == len(v)
        assert store.is_exist(k) is True
        assert store.get(bytearray(k)) == v
        assert store.get(memoryview(k)) == v
    assert store.is_exist(tag + b"a") is False  # "a\0b" is not "a"
    text = unique("日本")
    store.put(text, b"text key")
    assert store.get(text.encode("utf-8")) == b"text key"

    buf = Registered(store, 1 << 20)
    bkeys = [tag + b"\xff1", tag + b"\x002", tag + b"\xc3\x28"]
    ptrs = [buf.addr + i * 4096 for i in range(3)]
    ctypes.memmove(buf.addr, os.urandom(3 * 4096), 3 * 4096)
    want = ctypes.string_at(buf.addr, 3 * 4096)
    assert store.batch_put_from(bkeys, ptrs, [4096] * 3) == [0] * 3
    assert store.batch_is_exist(bkeys + [tag + b"\xffnone", b""]) == [1, 1, 1, 0, errors.ERR_INVALID_ARGUMENT]
    back = [buf.addr + (64 + i) * 4096 for i in range(3)]
    assert store.batch_get_into(bkeys, back, [4096] * 3) == [4096] * 3
    assert ctypes.string_at(back[0], 3 * 4096) == want
    store.put_from(tag + b"\x00zc", buf.addr, 100)
    assert store.get_into(tag + b"\x00zc", buf.addr + 200 * 4096, 4096) == 100
    store.unregister_buffer(buf.addr)

    for k in keys + bkeys + [tag + b"\x00zc"]:
        store.remove(k, force=True)
        assert store.is_exist(k) is False
    with pytest.raises(mooncake_go.NotFoundError):
        store.remove(keys[0], force=True)

    # The upstream-convention class takes bytes keys too.
    s = mooncake_go.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", pool.url, 0, 4 * MIB, "tcp", "", pool.rpc) == 0
    assert s.put(tag + b"\xff", b"v") == 0
    assert store.get(tag + b"\xff") == b"v"  # another client sees the same key
    assert s.get(tag + b"\xff") == b"v"
    assert s.is_exist(tag + b"\xff") == 1
    assert s.get_size(b"") == errors.ERR_INVALID_ARGUMENT
    assert s.remove(tag + b"\xff", True) == 0
    assert s.get(tag + b"\xff") == b""
    assert s.close() == 0


def test_upstream_conventions(lib_path, pool):
    s = mooncake_go.MooncakeDistributedStore()
    assert s.setup("127.0.0.1", pool.url, 0, 4 * MIB, "tcp", "", "127.0.0.1:1") == errors.STORE_ERR_RPC_FAIL
    assert s.setup("127.0.0.1", pool.url, 0, 4 * MIB, "tcp", "", pool.rpc) == 0
    key = unique("compat")
    assert s.put(key, b"value") == 0
    assert s.get(key) == b"value"
    assert s.get(unique("missing")) == b""
    assert s.get_size(key) == 5
    assert s.get_size(unique("missing")) == -704
    assert s.is_exist(key) == 1
    assert s.is_exist(unique("missing")) == 0
    assert s.is_exist("") == errors.ERR_INVALID_ARGUMENT
    assert s.batch_is_exist([key, unique("missing")]) == [1, 0]
    assert s.put_from(key, 0x10, 10) == errors.ERR_INVALID_ARGUMENT  # zero page
    assert s.put_from(unique("unreg"), ctypes.addressof(ctypes.create_string_buffer(16)), 16) == errors.ERR_ADDRESS_NOT_REGISTERED
    assert s.batch_put_from(["a"], [1, 2], [1]) == [errors.ERR_INVALID_ARGUMENT]
    assert s.remove(key, True) == 0
    assert s.remove(key) == -704
    assert s.register_buffer(0, 1) == errors.ERR_INVALID_ARGUMENT
    assert s.close() == 0
    assert s.close() == 0
    assert s.put(key, b"v") == errors.ERR_INVALID_HANDLE


def test_last_error_per_thread(store):
    """mc_last_error belongs to the calling thread, so each exception
    carries its own call's reason."""
    lib = mooncake_go.load()
    with pytest.raises(mooncake_go.InvalidArgumentError) as mine:
        store.put("", b"x")
    seen = {}

    def other():
        seen["before"] = mooncake_go._lib.last_error(lib)
        try:
            store.get_into(unique("none"), 0, 8)
        except mooncake_go.MooncakeError as e:
            seen["err"] = e

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["before"] == "", "a new thread inherited another thread's error"
    assert "ptr is NULL" in seen["err"].message, seen
    assert "key is empty" in mine.value.message
    assert "key is empty" in mooncake_go._lib.last_error(lib), "another thread's call changed this thread's error"


def test_error_constants_match_headers():
    """errors.py has the values of common.h and store.h, all of them."""
    want = {}
    for name in ("common.h", "store.h"):
        for line in (mc_te.INCLUDE / name).read_text().splitlines():
            m = re.match(r"^#define\s+MC_((?:STORE_)?ERR_\w+)\s+\((-?\d+)\)", line)
            if m:
                want[m.group(1)] = int(m.group(2))
    got = {k: v for k, v in vars(errors).items() if re.fullmatch(r"(STORE_)?ERR_\w+", k)}
    assert got == want


# -- the loader, each case in a fresh interpreter -------------------------


def run_python(code, **env):
    """Runs code in a new interpreter (mooncake_go importable) and returns
    its stdout; fails the test on a non-zero exit."""
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=child_env(**env)
    )
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


MAPPED = "sum('libmooncake' in l for l in open('/proc/self/maps'))"


def test_import_is_lazy(lib_path):
    out = run_python(
        f"""
        import mooncake_go, mooncake_go.store, mooncake_go.errors, mooncake_go._lib
        s = mooncake_go.Store()  # constructing loads nothing either
        print({MAPPED}, mooncake_go.loaded())
        mooncake_go.load()
        print({MAPPED} > 0, mooncake_go.loaded())
        """
    )
    assert out.split("\n")[:2] == ["0 None", f"True {os.environ['MOONCAKE_GO_LIB']}"], out


def test_env_override(lib_path, tmp_path):
    link = tmp_path / "custom" / "libmooncake.so"
    link.parent.mkdir()
    link.symlink_to(lib_path)
    out = run_python("import mooncake_go; mooncake_go.load(); print(mooncake_go.loaded())", MOONCAKE_GO_LIB=str(link))
    assert out.strip() == str(link)


def test_bad_path_is_a_clear_error(lib_path, tmp_path):
    missing = tmp_path / "nowhere" / "libmooncake.so"
    text = tmp_path / "libmooncake.so"
    text.write_text("not a library\n")
    code = """
        import mooncake_go
        try:
            mooncake_go.load()
        except ImportError as e:
            assert isinstance(e, mooncake_go.LibraryLoadError), type(e)
            print(e.tried, '|', e)
        else:
            raise SystemExit('load() succeeded')
        print(mooncake_go.loaded())
        """
    out = run_python(code, MOONCAKE_GO_LIB=str(missing))
    assert f"('{missing}',)" in out and "not found" in out and "MOONCAKE_GO_LIB" in out, out
    assert out.strip().endswith("None"), "fell back to another library despite MOONCAKE_GO_LIB"
    out = run_python(code, MOONCAKE_GO_LIB=str(text))
    assert f"cannot load {text}" in out, out


def fake_library(tmp_path, body):
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc not installed")
    src, lib = tmp_path / "fake.c", tmp_path / "libmooncake.so"
    src.write_text(body)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_version_check(tmp_path):
    lib = fake_library(tmp_path, "unsigned mc_abi_version(void) { return 2u << 16 | 3; }\n")
    code = """
        import mooncake_go
        for _ in range(2):  # the failure is remembered: the library stays loaded
            try:
                mooncake_go.load()
            except mooncake_go.LibraryLoadError as e:
                print(e)
        """
    out = run_python(code, MOONCAKE_GO_LIB=str(lib))
    lines = out.strip().split("\n")
    assert len(lines) == 2 and all(f"{lib} has C ABI version 2.3" in l and "needs 1.x" in l for l in lines), out


def test_store_minor_check(tmp_path):
    """A library whose store ABI predates the _n calls (1.0) is refused with
    a clear LibraryLoadError, not an AttributeError on a missing symbol."""
    lib = fake_library(
        tmp_path,
        "unsigned mc_abi_version(void) { return 1u << 16; }\n"
        "const char* mc_last_error(void) { return \"\"; }\n"
        "void mc_buf_free(void* p) { (void)p; }\n"
        "unsigned mc_store_abi_version(void) { return 1u << 16; }\n",
    )
    out = run_python(
        """
        import mooncake_go
        try:
            mooncake_go.Store().setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", "127.0.0.1:1")
        except mooncake_go.LibraryLoadError as e:
            print(e)
        """,
        MOONCAKE_GO_LIB=str(lib),
    )
    assert "mc_store_abi_version() is 1.0, this package needs 1.1 or later" in out, out


def test_not_mooncake(tmp_path):
    lib = fake_library(tmp_path, "int something_else(void) { return 0; }\n")
    out = run_python(
        """
        import mooncake_go
        try:
            mooncake_go.load()
        except mooncake_go.LibraryLoadError as e:
            print(e)
        """,
        MOONCAKE_GO_LIB=str(lib),
    )
    assert f"{lib} is not libmooncake.so of mooncake-go" in out, out


def test_load_once_from_many_threads(lib_path):
    out = run_python(
        f"""
        import threading, mooncake_go
        got, start = [], threading.Barrier(16)
        def f():
            start.wait()
            got.append(mooncake_go.load())
        ts = [threading.Thread(target=f) for _ in range(16)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(len(got), len(set(map(id, got))))
        """
    )
    assert out.strip() == "16 1", out


def test_search_order(lib_path, tmp_path):
    """Without $MOONCAKE_GO_LIB: the package's directory, then <repo>/build
    relative to the package (abi/python/mooncake_go -> build)."""
    pkg = tmp_path / "abi" / "python" / "mooncake_go"
    shutil.copytree(os.path.join(PYTHON_DIR, "mooncake_go"), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    code = """
        import mooncake_go
        try:
            mooncake_go.load()
            print(mooncake_go.loaded())
        except mooncake_go.LibraryLoadError as e:
            print('error', e.tried)
        """
    env = {"MOONCAKE_GO_LIB": None, "PYTHONPATH": str(pkg.parent)}
    out = run_python(code, **env)
    assert out.strip() == f"error ({str(pkg / 'libmooncake.so')!r}, {str(tmp_path / 'build' / 'libmooncake.so')!r})", out
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libmooncake.so").symlink_to(lib_path)
    assert run_python(code, **env).strip() == str(tmp_path / "build" / "libmooncake.so")
    (pkg / "libmooncake.so").symlink_to(lib_path)
    assert run_python(code, **env).strip() == str(pkg / "libmooncake.so")


def test_batch_get_alloc(store):
    """mc_store_batch_get_alloc (store.h 1.3): Store.batch_get fills bytes
    objects in place through it; the 1.2 path (mc_store_batch_get, a
    library buffer copied again) gives the same values; a callback that
    returns NULL fails only its key, with MC_ERR_MEMORY; a NULL callback
    is an invalid argument."""
    from mooncake_go import store as ms

    lib = ms._library13()
    assert lib is not None, "libmooncake.so speaks store.h 1.3 and this is CPython"
    key = unique("alloc")
    vals = [os.urandom(n) for n in (1, 4095, 300_000)]
    keys = [f"{key}-{i}" for i in range(len(vals))]
    for k, v in zip(keys, vals):
        store.put(k, v)
    missing = unique("none")
    got = store.batch_get(keys + [missing])
    assert got[:3] == vals and all(type(g) is bytes for g in got[:3])
    assert got[3] == errors.STORE_ERR_OBJECT_NOT_FOUND
    assert store.batch_get([]) == []
    try:  # the 1.2 path
        ms._protos13 = False
        assert store.batch_get(keys + [missing]) == vals + [errors.STORE_ERR_OBJECT_NOT_FOUND]
    finally:
        ms._protos13 = None
    assert store.batch_get(keys) == vals

    h = store._h
    kb = [k.encode() for k in keys]
    n = len(kb)
    k_arr = (ctypes.c_char_p * n)(*kb)
    l_arr = (ctypes.c_size_t * n)(*[len(k) for k in kb])
    out = (ctypes.c_int64 * n)()
    calls = []

    @ms._ALLOC_FN
    def refuse_second(ctx, i, size):
        calls.append((i, size))
        if i == 1:
            return 0
        b = ctypes.create_string_buffer(size)
        ctx.append(b)
        return ctypes.addressof(b)

    held = []
    rc = lib.mc_store_batch_get_alloc(h, k_arr, l_arr, n, refuse_second, held, out)
    assert rc == 0, rc  # per-key failures go to out; the call itself succeeded
    assert sorted(calls) == [(0, 1), (1, 4095), (2, 300_000)]
    assert list(out) == [1, errors.ERR_MEMORY, 300_000]
    assert "cannot allocate 4095 bytes" in mooncake_go._lib.last_error(lib)
    assert held[0].raw[:1] == vals[0] and held[1].raw[:300_000] == vals[2]
    null = ctypes.cast(None, ms._ALLOC_FN)
    assert lib.mc_store_batch_get_alloc(h, k_arr, l_arr, n, null, held, out) == errors.ERR_INVALID_ARGUMENT
    assert "alloc is NULL" in mooncake_go._lib.last_error(lib)


PINNED_CALLER = r"""
import ctypes, json, mmap, os, sys
import mooncake_go
st = mooncake_go.Store()
st.setup("127.0.0.1", sys.argv[1], 0, 4 << 20, "tcp", "", sys.argv[2])
full = os.sched_getaffinity(0)
os.sched_setaffinity(0, {min(full)})  # this (main) thread only, as vLLM pins its worker's
n, size = 16, 256 << 10
buf = mmap.mmap(-1, n * size)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
st.register_buffer(base, n * size)
ptrs = [base + i * size for i in range(n)]
for r in range(40):
    keys = [f"pinned/{os.getpid()}/{r}/{i}" for i in range(n)]
    assert st.batch_put_from(keys, ptrs, [size] * n) == [0] * n
    assert st.batch_get_into(keys, ptrs, [size] * n) == [size] * n
    for k in keys:
        st.remove(k, force=True)
me = str(__import__("threading").get_native_id())
masks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task") if t != me}
print(json.dumps({"full": sorted(full), "others": masks}))
st.unregister_buffer(base)
st.close()
"""


def test_pinned_caller_leaves_go_threads_unpinned(lib_path, pool):
    """A caller whose thread is pinned to one CPU (vLLM's CPU worker pins
    its main thread) must not confine the library's own threads: the
    runtime creates its threads from its template thread while an export
    runs (cbridge.Guard), not by cloning the pinned caller."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to pin away from")
    r = subprocess.run([sys.executable, "-c", PINNED_CALLER, pool.url, pool.rpc], env=child_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    pinned = {t: m for t, m in got["others"].items() if m != got["full"]}
    assert len(got["others"]) >= 2, got  # the Go runtime's threads are there
    assert pinned == {}, f"threads confined by the pinned caller: {pinned} (process CPUs {got['full']})"
